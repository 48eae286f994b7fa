"""StoreSource over a real database written by the daemon's Store, and LiveSource's
bookkeeping; both are blocking and are exercised here without the app."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fake_source import T0, discrete_three
from pilot_helpers import settle, sync

from monitor.store.database import Store
from tui.app import VramscopeApp, open_source
from tui.series import downsample
from tui.source import SourceError, StoreSource


def write_as_the_daemon(store: Store, snaps, proc_root: Path) -> None:  # noqa: ANN001
    """Each tick written, then its servers assessed and stored, as the daemon's tick does
    (``proc_root``: where their LLAMA_ARG_* environment is read; none for these)."""
    from monitor.daemon.assessor import Assessor

    assessor = Assessor(proc_root, threaded=False)
    for snap in snaps:
        store.write(snap)
        assessor.on_tick(snap, store)


@pytest.fixture
def db(tmp_path: Path, models: dict[str, str]) -> Path:
    path = tmp_path / "vramscope.db"
    store = Store.open(path)
    write_as_the_daemon(store, discrete_three(models, ticks=5), tmp_path / "no-proc")
    store.add_event(
        "crash", "critical", "llama-server[4099]", "killed by the OOM killer", ts_ms=T0 + 1500
    )
    store.close()
    return path


def test_store_source_reads_the_latest_tick_with_models(db: Path) -> None:
    source = StoreSource(db)
    frame = source.latest()
    assert frame.ts_ms == T0 + 4000 and not frame.live
    assert {r.pid for r in frame.models} == {4101, 4102, 4103}
    assert any("draft KV in f16" in r.flags for r in frame.models)
    assert [e.kind for e in frame.events] == ["crash"]
    source.close()


def test_store_source_replays_ticks_and_history(db: Path) -> None:
    source = StoreSource(db)
    assert source.ticks(T0, T0 + 10_000) == [T0 + i * 1000 for i in range(5)]
    assert source.at(T0 + 2500).ts_ms == T0 + 2000
    series = source.history(None, T0 - 1, T0 + 10_000)
    assert len(series["device:nvml:GPU-0"]) == 5
    models = [k for k in series if k.startswith("model:")]
    assert len(models) == 3
    assert [e.message for e in source.events(T0)] == ["killed by the OOM killer"]


def test_a_missing_database_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no database"):
        StoreSource(tmp_path / "nope.db").latest()
    with pytest.raises(SourceError, match="no database"):
        open_source(tmp_path / "nope.db", None)


def test_not_a_database_is_a_message_in_the_app(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("not sqlite at all " * 100)
    app = VramscopeApp(StoreSource(bad), refresh_s=None)

    async def run() -> str:
        async with app.run_test(size=(100, 30)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            return str(app.screen.query_one("#status").render())

    assert "is not a vramscope database (not a SQLite file)" in asyncio.run(run())


def test_downsample_keeps_peaks() -> None:
    points = [(i, i % 100) for i in range(10_000)]
    out = downsample(points, 50)
    assert len(out) <= 51 and max(v for _, v in out) == 99


def test_main_reports_an_unopenable_source_in_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from tui.app import main

    assert main(tmp_path / "nope.db") == 2
    assert main(None, "2026-01-01 10:00") == 2
    assert main(None, "not a time") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("vramscope: error: ") for line in lines)
    assert "Traceback" not in capsys.readouterr().err


def test_without_a_daemon_the_tui_samples_live(tmp_path: Path) -> None:
    from tui.source import LiveSource

    source, at_ms = open_source(None, None, default_db=tmp_path / "absent.db")
    assert isinstance(source, LiveSource) and at_ms is None


def test_kv_far_above_the_p99_context_in_use_is_flagged(tmp_path: Path, models) -> None:  # noqa: ANN001
    from monitor.integrations.slots import SlotSample

    path = tmp_path / "usage.db"
    store = Store.open(path)
    write_as_the_daemon(store, discrete_three(models, ticks=2), tmp_path / "no-proc")
    q4 = models["qwen3-8b-q4_k.gguf"]
    for i in range(200):
        store.add_slot_usage(
            T0 - 200_000 + i * 1000, q4, [SlotSample(0, 8192, 800 + i % 200, True)]
        )
    store.close()
    rows = {r.pid: r for r in StoreSource(path).latest().models}
    assert any(f.startswith("KV ") and "× the p99 context in use" in f for f in rows[4101].flags), (
        rows[4101].flags
    )
    # the figure diagnose gives for the same p99 (one source: analysis.diagnose.kv_over_p99)
    from monitor.analysis.diagnose import kv_over_p99, times
    from monitor.analysis.slot_usage import usage_p99

    p99 = usage_p99(path, q4)
    est = rows[4101].estimate
    assert p99 is not None and est is not None
    ratio = kv_over_p99(est, p99)
    assert ratio is not None
    assert f"KV {times(ratio)} the p99 context in use" in rows[4101].flags


def test_history_keeps_each_buckets_peak_in_both_resolutions(tmp_path: Path) -> None:
    """3 h of raw samples and 3 days of rollups with one spike each: the spike survives the
    bucketing, no series exceeds HISTORY_POINTS, and points stay in time order."""
    import sqlite3

    from tui.series import HISTORY_POINTS

    path = tmp_path / "v.db"
    Store.open(path).close()
    gib = 2**30
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "INSERT INTO devices (id, collector, vendor, name, memory_kind, "
            "first_seen_ms, last_seen_ms) VALUES ('gpu', 't', 'amd', 'g', 'dedicated',"
            " 0, 0)"
        )
        raw = [(T0 + i * 1000, "gpu", 7 * gib if i == 4321 else gib) for i in range(3 * 3600)]
        con.executemany(
            "INSERT INTO device_samples (ts_ms, device_id, used_bytes) VALUES (?,?,?)", raw
        )
        mins = [
            (T0 + i * 60_000, "gpu", 60, 9 * gib if i == 2000 else 2 * gib) for i in range(3 * 1440)
        ]
        con.executemany(
            "INSERT INTO device_minutes (ts_ms, device_id, samples, "
            "used_max_bytes) VALUES (?,?,?,?)",
            mins,
        )
        # the rollups cover the 3 days (a prune ran at their end)
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('rolled_up_to_ms', ?)", (str(T0 + 3 * 86400_000),)
        )
    con.close()
    source = StoreSource(path)
    short = source.history(None, T0 + 3600_000, T0 + 7200_000)["device:gpu"]  # raw, 1 h
    long = source.history(None, T0, T0 + 3 * 86400_000)["device:gpu"]  # rollups, 3 days
    source.close()
    for series, spike in ((short, (T0 + 4321_000, 7 * gib)), (long, (T0 + 2000 * 60_000, 9 * gib))):
        assert 200 <= len(series) <= HISTORY_POINTS
        assert spike in series
        assert [t for t, _ in series] == sorted(t for t, _ in series)


def test_a_server_a_gpu_lists_without_its_memory_has_a_breakdown(models) -> None:  # noqa: ANN001
    """NVML 'not available' (WSL2, GB10 containers): measured is unknown, so is the excess;
    the breakdown says so instead of failing to draw (it compared None with a number)."""
    from collectors.base import ProcessInfo, ProcessMemory, Snapshot
    from tui.source import FrameBuilder
    from tui.widgets.breakdown import Breakdown

    info = ProcessInfo(
        10,
        1,
        None,
        1,
        0,
        "llama-server",
        ("llama-server", "-m", models["qwen3-8b-q4_k.gguf"], "-c", "4096"),
        "llama.cpp",
    )
    snap = Snapshot(T0, (), (info,), (ProcessMemory(10, "nvml:GPU-0"),), (), (), ())
    (row,) = FrameBuilder().build(snap).models
    assert row.measured_bytes is None and row.diagnosis is not None
    assert row.diagnosis.verdict == "unknown" and row.diagnosis.excess_bytes is None
    text = Breakdown.describe(row, 100).plain
    assert "cannot judge" in text and "without its memory" in text


def test_a_read_that_fails_is_one_source_error_line(db: Path) -> None:
    """A vramscope database missing a table (an older or hand-edited file): the store's
    read fails and the TUI shows one line naming the file, never a traceback."""
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE events")
    conn.commit()
    conn.close()
    source = StoreSource(db)
    try:
        assert source.ticks(T0, T0 + 10_000)[0] == T0  # the other tables still read
        with pytest.raises(SourceError, match=rf"^cannot read {db}: no such table: events$"):
            source.events(T0)
    finally:
        source.close()


def test_a_long_window_includes_what_is_not_rolled_up_yet_and_ends_at_now(tmp_path: Path) -> None:
    """Issue 20: the daemon rolls samples up per minute once an hour, so the 24 h / 7 d /
    30 d views (read from the rollups) missed the last hour: "now 1.6G peak 1.6G" while the
    device held 3.5G after a 7.8G peak. Rollups end where the last prune stopped; the raw
    samples after that count, and the series ends at the newest tick's own value."""
    path = _fifty_minutes(tmp_path / "v.db")
    gib = 2**30
    source = StoreSource(path)
    now = T0 + 50 * 60_000
    try:
        day = source.history(None, now - 86400_000, now)["device:gpu"]
    finally:
        source.close()
    values = [v for _, v in day]
    assert max(values) == int(7.8 * gib)
    assert day[-1] == (T0 + (50 * 60 - 1) * 1000, int(3.5 * gib))  # now is now
    assert [t for t, _ in day] == sorted(t for t, _ in day)


@sync
async def test_the_history_screen_says_now_and_the_peak_of_a_long_window(tmp_path: Path) -> None:

    app = VramscopeApp(StoreSource(_fifty_minutes(tmp_path / "v.db")), refresh_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        await pilot.press("3")  # 24 h: the per-minute rollups and what is not rolled up yet
        await settle(pilot)
        labels = [str(w.render()) for w in app.screen.query(".series-label")]
    assert any("now 3.5G" in x and "peak 7.8G" in x for x in labels), labels


def _fifty_minutes(path: Path) -> Path:
    """50 minutes of 1 s ticks of one GPU: 1.6G, a 7.8G peak at minute 30, then 3.5G;
    a prune rolled up the first 10 minutes."""
    import sqlite3

    Store.open(path).close()
    gib = 2**30
    con = sqlite3.connect(path)
    rolled = T0 + 10 * 60_000
    with con:
        con.execute(
            "INSERT INTO devices (id, collector, vendor, name, memory_kind, "
            "first_seen_ms, last_seen_ms) VALUES ('gpu', 't', 'amd', 'g', 'dedicated',"
            " 0, 0)"
        )
        # 50 minutes of 1 s ticks: 1.6G, a 7.8G peak at minute 30, then 3.5G
        raw = []
        for i in range(50 * 60):
            used = 1.6 if i < 30 * 60 else (7.8 if i == 30 * 60 else 3.5)
            raw.append((T0 + i * 1000, "gpu", int(used * gib)))
        con.executemany(
            "INSERT INTO device_samples (ts_ms, device_id, used_bytes) VALUES (?,?,?)", raw
        )
        con.executemany(
            "INSERT INTO device_minutes (ts_ms, device_id, samples, used_max_bytes) "
            "VALUES (?,?,?,?)",
            [(T0 + m * 60_000, "gpu", 60, int(1.6 * gib)) for m in range(10)],
        )
        con.execute("INSERT OR REPLACE INTO meta VALUES ('rolled_up_to_ms', ?)", (str(rolled),))
    con.close()
    return path


def test_live_frames_name_growth_from_the_servers_log(models, tmp_path: Path) -> None:  # noqa: ANN001
    """Live, the TUI follows the server's own --log-file: 3000 MiB over the estimate is the
    prompt cache the log reports, with the line, and new lines are picked up next frame."""
    from collectors.base import ProcessInfo, ProcessMemory, Snapshot
    from tui.source import FrameBuilder
    from tui.widgets.breakdown import Breakdown

    state = (
        "0.42.101.912 W srv        update:  - cache state: {} prompts, {:.3f} MiB "
        "(limits: 8192.000 MiB, 4096 tokens, 8589934592 est)\n"
    )
    log = tmp_path / "llama.log"
    log.write_text(state.format(30, 3000.0))
    argv = ("llama-server", "-m", models["qwen3-8b-q4_k.gguf"], "-c", "4096")
    info = ProcessInfo(
        10,
        1,
        None,
        1,
        0,
        "llama-server",
        (*argv, "--log-file", "llama.log"),
        "llama.cpp",
        cwd=str(tmp_path),
    )
    builder = FrameBuilder()
    bare = Snapshot(T0, (), (info,), (), (), (), ())
    (first,) = builder.build(bare).models
    assert first.estimate_bytes is not None
    held = ProcessMemory(
        10, "host", rss_anon_bytes=first.estimate_bytes + 3000 * 1024**2, rss_file_bytes=0
    )
    snap = Snapshot(T0, (), (info,), (held,), (), (), ())
    (row,) = builder.build(snap).models
    assert row.diagnosis is not None and row.diagnosis.verdict == "over"
    cache = next(f for f in row.diagnosis.findings if f.component == "prompt_cache")
    assert cache.bytes == 3000 * 1024**2 and "cache state: 30 prompts" in (cache.evidence or "")
    assert not any(f.component == "unaccounted" for f in row.diagnosis.findings)
    text = Breakdown.describe(row, 200).plain
    assert f"llama.cpp log {log}: 'srv        update:  - cache state: 30 prompts" in text
    with log.open("a") as f:
        f.write(state.format(10, 1000.0))  # evicted: the cache shrank, the rest is unexplained
    (later,) = builder.build(snap).models
    assert later.diagnosis is not None
    by = {f.component: f for f in later.diagnosis.findings}
    assert by["prompt_cache"].bytes == 1000 * 1024**2 and by["unaccounted"].bytes > 1900 * 1024**2
    builder.build(Snapshot(T0, (), (), (), (), (), ()))  # the server is gone: its log closed
    assert builder._logs == {}


@sync
async def test_the_history_plot_has_axes_and_a_cursor_that_reads_values(tmp_path: Path) -> None:
    """Issue 20: the history was sparklines with no axes and no way to read a value."""
    from textual_plotext import PlotextPlot

    app = VramscopeApp(StoreSource(_fifty_minutes(tmp_path / "v.db")), refresh_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        await pilot.press("3")
        await settle(pilot)
        screen = app.screen
        devices = screen.query_one("#devices-plot", PlotextPlot)
        drawn = str(devices.render())
        assert "hours before now" in drawn and "GiB" in drawn and "-24" in drawn
        assert not screen.query_one("#models-plot", PlotextPlot).display  # no models here
        newest = str(screen.query_one("#readout").render())
        await pilot.press("home")
        await pilot.pause()
        oldest = str(screen.query_one("#readout").render())
        await pilot.press("right")
        await pilot.pause()
        moved = str(screen.query_one("#readout").render())
    assert newest.endswith("GPU0 g 3.5G"), newest
    assert oldest.endswith("GPU0 g 1.6G"), oldest
    assert moved != oldest and moved.endswith("GPU0 g 1.6G")  # a later moment, same value


def test_value_at_reads_the_last_point_and_nothing_before_the_first() -> None:
    from tui.screens.history import readout, value_at

    points = [(10, 1), (20, 5), (30, 2)]
    assert [value_at(points, t) for t in (5, 10, 19, 20, 99)] == [None, 1, 1, 5, 2]
    series = {"device:gpu": [(10, 2**30), (30, 2**30)], "model:x.gguf (pid 1)": [(10, 2**29)]}
    # the model ended at 10: at 30 it holds nothing, not its last figure
    line = readout(series, 30, newest_ms=30)
    assert "gpu 1.0G" in line and "x.gguf (pid 1) -" in line
