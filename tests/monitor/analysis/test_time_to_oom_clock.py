"""monitor/analysis/time_to_oom.py OomClock: a flat pool costs no forecast a tick (its
window's minimum is kept as points arrive), and every tick's answer is the one forecast()
gives on the whole window (issue 32 item 3: the 300-point window was copied and scanned
every tick at 1 Hz, ~0.2 ms)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import monitor.analysis.time_to_oom as tto
from collectors.base import CgroupMemory, DeviceSample, ProcessCgroup, Snapshot
from monitor.analysis.time_to_oom import OomClock, PoolPoint, forecast

MIB, GIB = 1024**2, 1024**3


def snap_at(t: int, host_held: int, cgroup_held: int | None = None) -> Snapshot:
    """A tick at ``t`` s: host RAM holding ``host_held`` of 64 GiB, and a 4 GiB cgroup."""
    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * GIB, None,
        available_bytes=64 * GIB - host_held,
    )  # fmt: skip
    cgroups = ()
    if cgroup_held is not None:
        limit = CgroupMemory("/llm.slice", 4 * GIB, None, cgroup_held, 0)
        cgroups = (ProcessCgroup(7, limit),)
    return Snapshot(t * 1000, (host,), (), (), (), (), (), cgroups=cgroups)


def count_forecasts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = tto.forecast

    def counted(pool: str, points: list[PoolPoint]) -> object:
        calls.append(pool)
        return real(pool, points)

    monkeypatch.setattr(tto, "forecast", counted)
    return calls


def test_a_flat_box_runs_no_forecast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Noise case: host RAM and a cgroup flat (with jitter under 64 MiB) for 400 ticks:
    no forecast run and none given (before: 800 runs, one per pool and tick)."""
    calls = count_forecasts(monkeypatch)
    clock = OomClock()
    for t in range(400):
        jitter = (t % 7) * 5 * MIB
        assert clock.tick(snap_at(t, 20 * GIB + jitter, GIB + jitter)) == ()
    assert calls == []


HeldAt = Callable[[int], int]
SHAPES: dict[str, HeldAt] = {
    "steady fill": lambda t: 2 * GIB + 10 * MIB * t,
    "load step then flat": lambda t: GIB + min(max(t - 40, 0), 20) * 300 * MIB,
    "fill, drop, fill": lambda t: 2 * GIB + 10 * MIB * (t % 250),
    "sawtooth under the growth floor": lambda t: 3 * GIB + (t % 13) * 4 * MIB,
    "late steady fill": lambda t: 2 * GIB + 12 * MIB * max(0, t - 350),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_tick_answers_as_forecast_on_the_whole_window(shape: str) -> None:
    """Signal and step cases: over 700 ticks (the window slides past its minima more than
    once) the clock's answer equals forecast() on the last 300 s, tick for tick; a
    steady fill is forecast."""
    held_at = SHAPES[shape]
    clock = OomClock()
    history: list[PoolPoint] = []
    given = 0
    for t in range(700):
        held = held_at(t)
        history.append(PoolPoint(t * 1000, held, 64 * GIB))
        window = [p for p in history if t * 1000 - p.ts_ms <= tto.WINDOW_S * 1000]
        expected = forecast("host", window)
        got = clock.tick(snap_at(t, held))
        assert got == (() if expected is None else (expected,)), t
        given += bool(got)
    if shape in ("steady fill", "fill, drop, fill", "late steady fill"):
        assert given > 0
    if shape in ("load step then flat", "sawtooth under the growth floor"):
        assert given == 0


def test_a_small_max_points_keeps_the_minimum_of_what_is_kept() -> None:
    """At 10 Hz with 100 points kept the window is the last 10 s (too short a span): no
    forecast, and the minima never point before the kept points."""
    clock = OomClock(max_points=100)
    for i in range(1000):
        assert clock.tick(_tenth(i)) == ()
    assert clock._lows["host"][0].ts_ms >= clock._points["host"][0].ts_ms


def _tenth(i: int) -> Snapshot:
    snap = snap_at(0, 2 * GIB + 10 * MIB * i)
    return Snapshot(i * 100, snap.devices, (), (), (), (), ())
