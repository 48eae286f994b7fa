"""The live TUI's frame store holds an hour of history in a fixed budget (issue 32: a
deque of 3,600 whole frames grew the TUI by 15-70 MiB). Measured with tracemalloc over
two windows' worth of ticks of a realistic frame built by the real FrameBuilder."""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc

import pytest
from fake_source import GIB, MIB, T0, discrete_three

from tui.frames import BUDGET_BYTES, MAX_SERIES, FrameStore
from tui.source import Frame, FrameBuilder, LiveSource


@pytest.fixture(scope="module")
def base(models: dict[str, str]) -> Frame:
    """A discrete GPU with three llama-servers, assessed and pictured as the TUI does."""
    frame = FrameBuilder().build(discrete_three(models, ticks=3)[-1])
    assert len(frame.models) == 3 and all(r.measured_bytes for r in frame.models)
    return frame


def tick(base: Frame, i: int, pid_shift: int = 0) -> Frame:
    """Tick ``i`` one second after the last: new snapshot, new rows, values that move."""
    rows = tuple(
        dataclasses.replace(r, pid=r.pid + pid_shift, measured_bytes=r.measured_bytes + i % 7 * MIB)
        for r in base.models
    )
    snap = dataclasses.replace(base.snapshot, ts_ms=T0 + i * 1000)
    return dataclasses.replace(base, snapshot=snap, models=rows)


def traced_growth(store: FrameStore, frames: range, make) -> int:  # noqa: ANN001
    """Bytes still allocated after feeding ``frames`` through ``store.add``."""
    gc.collect()
    before, _ = tracemalloc.get_traced_memory()
    for i in frames:
        store.add(make(i))
    gc.collect()  # what only a cycle still held is garbage, not kept
    after, _ = tracemalloc.get_traced_memory()
    return after - before


def test_an_hour_of_ticks_stays_in_budget_and_stops_growing(base: Frame) -> None:
    tracemalloc.start()
    try:
        store = FrameStore()
        full = traced_growth(store, range(3600), lambda i: tick(base, i))
        more = traced_growth(store, range(3600, 7200), lambda i: tick(base, i))
    finally:
        tracemalloc.stop()
    assert len(store) == 3600
    assert full <= BUDGET_BYTES, full
    assert more <= 32 * 1024, more  # the window is full: an hour more adds nothing


def test_a_new_server_every_tick_stays_bounded(base: Frame) -> None:
    """A busy box where servers come and go every second: labels change each tick, and
    the labels of the ticks that left the ring go with them."""
    tracemalloc.start()
    try:
        store = FrameStore(keep_ticks=600)
        traced_growth(store, range(600), lambda i: tick(base, i, pid_shift=3 * i))
        more = traced_growth(store, range(600, 2400), lambda i: tick(base, i, pid_shift=3 * i))
    finally:
        tracemalloc.stop()
    assert more <= 64 * 1024, more
    live = {label for t in store._ticks for label in t.labels}
    assert len(live) == 2 + 3 * 600  # two devices, three new servers a tick


def test_a_tick_keeps_at_most_max_series_devices_first(base: Frame) -> None:
    many = tuple(
        dataclasses.replace(base.models[0], pid=10_000 + n, measured_bytes=n * MIB)
        for n in range(1, 200)
    )
    store = FrameStore()
    store.add(dataclasses.replace(base, models=many))
    series = store.series(None, 0, 2**62)
    assert len(series) == MAX_SERIES
    assert sum(label.startswith("device:") for label in series) == len(
        [p for p in base.picture.devices.values() if p.used_bytes is not None]
    )
    assert f"model:{many[-1].model} (pid {many[-1].pid})" in series  # the largest kept


def test_history_replay_and_ticks_read_what_is_kept(base: Frame) -> None:
    store = FrameStore(keep_ticks=3600, keep_frames=60)
    for i in range(5000):
        store.add(tick(base, i))
    series = store.series(None, T0, T0 + 10_000 * 1000)
    row = base.models[0]
    points = series[f"model:{row.model} (pid {row.pid})"]
    assert len(points) == 3600 and points[0][0] == T0 + 1400 * 1000
    assert points[-1] == (T0 + 4999 * 1000, row.measured_bytes + 4999 % 7 * MIB)
    gpu = next(p for p in base.picture.devices.values() if p.used_bytes)
    only = store.series(gpu.device_id, T0, T0 + 10_000 * 1000)
    assert {k for k in only if k.startswith("device:")} == {f"device:{gpu.device_id}"}
    frame = store.at(T0 + 4990 * 1000 + 500)
    assert frame is not None and frame.ts_ms == T0 + 4990 * 1000
    assert store.ticks(0, 2**62) == [T0 + i * 1000 for i in range(4940, 5000)]
    oldest = store.at(T0)  # before every kept frame: the oldest, as before
    assert oldest is not None and oldest.ts_ms == T0 + 4940 * 1000
    assert FrameStore().at(T0) is None


def test_live_source_history_ends_at_the_newest_frame(base: Frame) -> None:
    """LiveSource's history through the store: peaks per bucket, the newest value last."""
    source = LiveSource(keep=100, keep_frames=5)
    for i in range(300):
        source._frames.add(tick(base, i, 0))
    out = source.history(None, 0, 2**62)
    row = base.models[0]
    points = out[f"model:{row.model} (pid {row.pid})"]
    assert points[0][0] == T0 + 200 * 1000 and points[-1][0] == T0 + 299 * 1000
    assert max(v for _, v in points) == row.measured_bytes + 6 * MIB
    assert any(v >= 1 * GIB for _, v in points)
    assert source.ticks(0, 2**62) == [T0 + i * 1000 for i in range(295, 300)]
