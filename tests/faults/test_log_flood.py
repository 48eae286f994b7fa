"""A followed engine log flooded with out-of-memory lines (issue 28, item 4).

Anyone who can write an engine's log can write 200,000 ``cudaMalloc failed: out of memory``
lines into it. Before the fix a real daemon made an ``engine_oom`` event of every line,
parsed and stored them on its sampling tick (ticks stalled) and, at ``events_max``, the
flood evicted every kernel OOM kill, exit and alert record. Now the logs are read off the
tick within a budget, a flood is one event at once and one merged event (with its count)
per minute, and retention prunes log-derived events first.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import daemon_harness
import pytest

from monitor.logs.kernel_records import KernelEvent
from monitor.store.database import Store
from monitor.store.retention import Retention

OOM = "ggml_backend_cuda_buffer_type_alloc_buffer: cudaMalloc failed: out of memory"
FLOOD_LINES, CHUNKS = 200_000, 20
EVENTS_MAX = 1000  # the smallest the config accepts
INTERVAL_S = 0.25
CONTROL_TICKS = 12
KEPT = ("oom_kill", "process_exit", "alert_firing")


def _rows(db: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _ticks(db: Path) -> list[int]:
    rows = _rows(db, "SELECT DISTINCT ts_ms FROM collector_runs ORDER BY ts_ms")
    return [int(r[0]) for r in rows]  # type: ignore[call-overload]


def _pace(db: Path, start_ms: int, end_ms: int) -> float:
    """Ticks recorded per interval between two ticks (rows counted, from their times)."""
    ticks = [t for t in _ticks(db) if start_ms <= t <= end_ms]
    return (len(ticks) - 1) / max(1.0, (end_ms - start_ms) / (INTERVAL_S * 1000))


def _seed(db: Path, now_ms: int) -> None:
    """A database from an earlier run: a kernel OOM kill, an exit, an alert, then
    ``EVENTS_MAX`` engine OOM lines of an earlier flood (the table is full)."""
    store = Store.open(db)
    for i, kind in enumerate(KEPT):
        store.add_event(
            kind, "critical", "llama-server[777]", f"seeded {kind}", {"pid": 777}, now_ms + i
        )
    with store.db.atomic():
        store.db.conn.executemany(
            "INSERT INTO events (ts_ms, kind, severity, message) VALUES (?, 'engine_oom',"
            " 'critical', 'an earlier flood')",
            [(now_ms + 10 + i,) for i in range(EVENTS_MAX)],
        )
    store.close()


@pytest.mark.slow  # a real daemon for many seconds: the default suite stays under 5 min
def test_a_flooded_engine_log_is_merged_and_evicts_no_kernel_record(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    _seed(db, int(time.time() * 1000) - 3_600_000)
    flood = tmp_path / "llama-server.log"
    flood.write_text("started\n")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    config = (
        f"[daemon]\nprune_interval_s = 1\n[retention]\nevents_max = {EVENTS_MAX}\n"
        f'[logs]\nfiles = ["{flood}"]\n'
    )
    chunk = "".join(f"{OOM} (attempt {i})\n" for i in range(FLOOD_LINES // CHUNKS))
    with daemon_harness.running(
        tmp_path,
        config,
        interval_s=INTERVAL_S,
        python_args=daemon_harness.kmsg_daemon_args(kmsg),
    ) as d:
        d.poll("the log opened", lambda: len(_ticks(d.db)) >= 2)
        quiet = _ticks(d.db)[-1]
        d.poll("ticks with a quiet log", lambda: len(_ticks(d.db)) >= CONTROL_TICKS + 2)
        first_tick = _ticks(d.db)[-1]
        for _ in range(CHUNKS):  # one chunk a tick: 200,000 lines in 20 ticks
            seen = len(_ticks(d.db))
            with flood.open("a") as f:
                f.write(chunk)
            d.poll("the next tick", lambda seen=seen: len(_ticks(d.db)) > seen)
        last_tick = _ticks(d.db)[-1]
        seen = len(_ticks(d.db))
        d.poll("a few more ticks", lambda: len(_ticks(d.db)) >= seen + 3)
    # Ticks per interval while the log floods, beside the same before it (same daemon,
    # same box, the same load from whatever else runs): a stalled tick shows as a drop.
    during, before = _pace(db, first_tick, last_tick), _pace(db, quiet, first_tick)
    events = _rows(
        db,
        "SELECT message, data FROM events WHERE kind = 'engine_oom' AND data IS NOT NULL",
    )
    ours = [(m, json.loads(str(x))) for m, x in events if str(flood) in str(x)]
    survived = {k for (k,) in _rows(db, "SELECT kind FROM events WHERE message LIKE 'seeded %'")}
    inserted = int(str(_rows(db, "SELECT max(id) FROM events")[0][0])) - len(KEPT) - EVENTS_MAX
    print(  # the figures of the report
        f"events inserted during the run: {inserted}; engine_oom events of the flood left:"
        f" {len(ours)}; ticks per interval during it: {during:.2f} (before it: {before:.2f});"
        f" seeded kept events left: {sorted(survived)}"
    )
    assert 1 <= len(ours) <= 3 and inserted < EVENTS_MAX, (inserted, [m for m, _ in ours][:5])
    merged = [(m, x) for m, x in ours if "lines" in x]
    assert merged and "more such lines" in str(merged[-1][0])
    counted = 1 + sum(int(x["lines"]) for _, x in merged)
    assert FLOOD_LINES // CHUNKS <= counted <= FLOOD_LINES, counted  # read at its pace
    assert survived == set(KEPT), survived
    assert during >= before / 3, (during, before)  # old code: 0.13 vs 0.91


def test_merger_passes_the_first_line_on_and_counts_the_rest() -> None:
    """The merge rule itself: the first line of a quiet log at once, then one event per
    window with the count, a window that ended quiet closed (the next line at once)."""
    from monitor.logs.reader import LogMerger

    merger = LogMerger(window_s=60)

    def oom(source: str) -> KernelEvent:
        return KernelEvent("engine_oom", None, OOM, None, None, {"source": source})

    kernel = KernelEvent("oom_kill", 1, "Killed process 9", 9, "x", {})
    first = merger.admit([oom("a"), oom("a"), kernel, oom("b")], now_ms=0)
    assert [(e.kind, e.data.get("source")) for e in first] == [
        ("engine_oom", "a"),
        ("oom_kill", None),
        ("engine_oom", "b"),
    ]
    assert merger.admit([oom("a")] * 5, now_ms=59_000) == []
    (merged,) = merger.admit([], now_ms=60_000)
    assert merged.data["lines"] == 6 and "6 more such lines in 60 s" in merged.message
    assert merger.admit([], now_ms=120_000) == []  # the next window ended quiet: closed
    assert len(merger.admit([oom("a")], now_ms=130_000)) == 1  # at once again


def test_prune_makes_room_from_log_events_first(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "v.db")
    for i, kind in enumerate(KEPT):
        store.add_event(kind, "critical", None, "kept", None, ts_ms=1_000 + i)
    store.add_event("load_watch", "warning", None, "other", None, ts_ms=1_010)
    with store.db.atomic():
        store.db.conn.executemany(
            "INSERT INTO events (ts_ms, kind, severity, message) VALUES (?, 'engine_oom',"
            " 'critical', 'log')",
            [(2_000 + i,) for i in range(EVENTS_MAX)],
        )
    store.prune(10_000, Retention(events_max=EVENTS_MAX))
    kinds = [k for (k,) in store.db.execute("SELECT kind FROM events ORDER BY id")]
    assert kinds[:4] == [*KEPT, "load_watch"] and len(kinds) == EVENTS_MAX
    store.prune(10_000, Retention(events_max=2))  # the kept alone too many: the oldest go
    kinds = [k for (k,) in store.db.execute("SELECT kind FROM events ORDER BY id")]
    assert kinds == ["process_exit", "alert_firing"]
    store.close()


def test_a_tail_reads_within_its_budget_and_skips_a_huge_backlog(tmp_path: Path) -> None:
    """Past the line budget the next call goes on where this one stopped (no line lost
    or read twice); a file more than MAX_BACKLOG_BYTES ahead is skipped, counted."""
    from monitor.logs.follow import MAX_BACKLOG_BYTES, FileTail

    log = tmp_path / "llama-server.log"
    log.write_text("started\n")
    tail = FileTail(log)
    assert tail.read() == []  # positioned at the end
    with log.open("a") as f:
        f.write("".join(f"{OOM} ({i})\n" for i in range(12)) + f"{OOM} (unfinished")
    got = [tail.read(max_lines=5) for _ in range(4)]
    assert [len(x) for x in got] == [5, 5, 2, 0]
    numbers = [e.message.rsplit("(", 1)[1] for x in got for e in x]
    assert numbers == [f"{i})" for i in range(12)]
    with log.open("a") as f:
        f.write(") done\n" + "x" * (MAX_BACKLOG_BYTES + 1) + f"\n{OOM} (after)\n")
    assert tail.read() == [] and tail.skipped_bytes > MAX_BACKLOG_BYTES
    with log.open("a") as f:
        f.write(f"{OOM} (next)\n")
    (event,) = tail.read()
    assert event.message.endswith("(next)")
    tail.close()
