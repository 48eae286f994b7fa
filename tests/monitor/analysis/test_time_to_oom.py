"""monitor/analysis/time_to_oom.py: a forecast only for steady filling, never for a step.

Signal: a pool growing 10 MiB/s toward its limit is forecast to the second. Noise: a
single model load (a step, then flat), a flat pool, jitter around a level, a shrinking
pool and too short a history give no forecast.
"""

from __future__ import annotations

from dataclasses import replace

from collectors.base import (
    CgroupMemory,
    DeviceSample,
    ProcessCgroup,
    Snapshot,
)
from monitor.analysis.time_to_oom import MIN_POINTS, OomClock, PoolPoint, forecast, slope

MIB, GIB = 1024**2, 1024**3


def series(held, seconds: int = 300, limit: int = 8 * GIB) -> list[PoolPoint]:  # noqa: ANN001
    return [PoolPoint(t * 1000, int(held(t)), limit) for t in range(seconds + 1)]


def test_a_steady_fill_is_forecast_to_the_second() -> None:
    points = series(lambda t: 2 * GIB + 10 * MIB * t)
    found = forecast("host", points)
    assert found is not None
    assert abs(found.rate_bytes_per_s - 10 * MIB) < 1
    held = 2 * GIB + 10 * MIB * 300
    assert abs(found.seconds - (8 * GIB - held) / (10 * MIB)) < 0.01
    assert slope(points[:1]) is None


def test_a_single_load_is_a_step_not_a_slope() -> None:
    """A model loads 6 GiB in 20 s, then the pool is flat for four minutes: the 5-minute
    slope is steep (predict_linear fires on it), the last minute's is zero: nothing."""
    step = series(lambda t: 1 * GIB + min(max(t - 40, 0), 20) * 300 * MIB)
    assert slope(step) and slope(step) > 0
    assert forecast("host", step) is None


def test_flat_jitter_shrinking_and_short_histories_give_nothing() -> None:
    assert forecast("host", series(lambda t: 3 * GIB)) is None
    jitter = series(lambda t: 3 * GIB + (40 * MIB if t % 2 else 0) + t * 0.1 * MIB)
    assert forecast("host", jitter) is None  # 30 MiB in 5 minutes: below MIN_GROWTH_BYTES
    assert forecast("host", series(lambda t: 6 * GIB - 10 * MIB * t)) is None
    assert forecast("host", series(lambda t: GIB + 10 * MIB * t, MIN_POINTS - 2)) is None


def test_the_clock_follows_each_pool_and_forgets_a_gone_cgroup() -> None:
    clock = OomClock()
    found = ()
    for t in range(120):
        host = DeviceSample(
            "host", "procfs", "host", "Host RAM", "host", 64 * GIB, None,
            available_bytes=60 * GIB,
        )  # fmt: skip
        limit = CgroupMemory("/llm.slice", 4 * GIB, None, GIB + 20 * MIB * t + 300 * MIB, 300 * MIB)
        snap = Snapshot(t * 1000, (host,), (), (), (), (), (), cgroups=(ProcessCgroup(7, limit),))
        found = clock.tick(snap)
    (cg,) = found  # host RAM is flat: no forecast for it
    assert cg.pool == "cgroup /llm.slice"
    held = GIB + 20 * MIB * 119  # the reclaimable page cache is not held
    assert cg.held_bytes == held and abs(cg.seconds - (4 * GIB - held) / (20 * MIB)) < 0.5
    gone = Snapshot(121_000, (), (), (), (), (), ())
    assert clock.tick(gone) == () and not clock._points


def _ramp_alerts(held_at, ticks: int = 600, limit: int = 3 * GIB):  # noqa: ANN001, ANN202
    """Feed a cgroup pool through the clock and the alert rules, one tick a second."""
    from monitor.alerts.rules import AlertSettings, AlertState, evaluate

    clock, state, fired = OomClock(), AlertState.empty(), []
    for t in range(ticks):
        g = CgroupMemory("/llm.slice", limit, None, int(held_at(t)), 0)
        snap = Snapshot(t * 1000, (), (), (), (), (), (), cgroups=(ProcessCgroup(7, g),))
        snap = replace(snap, time_to_oom=clock.tick(snap))
        state, changes = evaluate(AlertSettings(), snap, state, t * 1000)
        fired += [(t, int(held_at(t)), c) for c in changes if c.alert.rule == "oom_soon"]
    return fired


def test_a_steady_fill_alerts_long_before_the_limit_and_a_load_never_does() -> None:
    # a prompt cache filling at 2 MiB/s from 0.5 GiB toward a 3 GiB cgroup: 21 min ahead
    fired = _ramp_alerts(lambda t: GIB // 2 + 2 * MIB * t)
    first_t, held, change = fired[0]
    assert change.kind == "fired" and change.alert.level == "warning"
    assert held < 0.25 * 3 * GIB  # raised on the rate, not at 92 % of the limit
    assert "2.0 MiB/s" in change.alert.message and "in ~" in change.alert.message
    # a model loading 2 GiB in 20 s then flat: no alert at all
    assert _ramp_alerts(lambda t: GIB // 2 + min(max(t - 30, 0), 20) * 100 * MIB) == []
    # the fill stops: resolved
    stops = _ramp_alerts(lambda t: GIB // 2 + 2 * MIB * min(t, 200))
    assert [c.kind for _, _, c in stops] == ["fired", "resolved"]


def test_status_says_it_and_a_state_file_keeps_it() -> None:
    """status text names the pool and the minutes; --json carries the forecasts and a
    recorded state (--state, a remote daemon's snapshot) reads them back."""
    from collectors.base import OomForecast
    from monitor.analysis.picture import snapshot_from_status_json
    from monitor.report.status import render_text, to_json

    ahead = OomForecast("cgroup /llm.slice", 2 * GIB, 3 * GIB, 2 * MIB, 512.0)
    snap = Snapshot(1_800_000_000_000, (), (), (), (), (), (), time_to_oom=(ahead,))
    text = render_text(snap)
    assert "Filling steadily" in text and "cgroup /llm.slice: full in ~9 min (+2.0 MiB/s" in text
    back = snapshot_from_status_json(to_json(snap))
    assert back.time_to_oom == (ahead,)
    assert "Filling steadily" not in render_text(replace(snap, time_to_oom=()))
