"""A long history window reads the per-minute rollups the store's own prune wrote, and the
raw samples only after ``meta.rolled_up_to_ms`` (issue 32: a second lower bound on
``ts_ms`` let SQLite range over every raw sample of the window, 6 h of them already rolled
up, and the 24 h read took 12x the CPU). Pinned by SQLite's own instruction count (the
progress handler), never by a timing: raw samples already rolled up must cost nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from monitor.store.database import Store, open_readonly
from monitor.store.reads import device_peaks, rolled_up_to_ms, server_peaks
from monitor.store.retention import Retention

GIB = 2**30
T0 = 1_700_000_000_000 - 1_700_000_000_000 % 3600_000
DAY_MS = 86_400_000


def _database(path: Path) -> int:
    """3 h of 1 s ticks (a GPU, one llama-server, one other process), rolled up by the
    store's own ``prune`` an hour before the last tick, as the hourly daemon leaves it;
    returns the last tick."""
    store = Store.open(path)
    con = store.db.conn
    end = T0 + 3 * 3600_000
    with store.db.atomic():
        con.execute(
            "INSERT INTO devices (id, collector, vendor, name, memory_kind, first_seen_ms,"
            " last_seen_ms) VALUES ('gpu', 't', 'amd', 'g', 'dedicated', ?, ?)",
            (T0, end),
        )
        for pid, engine in ((100, "llama.cpp"), (200, None)):
            con.execute(
                "INSERT INTO processes (pid, start_ticks, comm, argv, engine, first_seen_ms,"
                " last_seen_ms) VALUES (?, 1, 'x', ?, ?, ?, ?)",
                (pid, json.dumps(["/m.gguf"]), engine, T0, end),
            )
        ticks = range(T0, end, 1000)
        con.executemany(
            "INSERT INTO device_samples (ts_ms, device_id, used_bytes) VALUES (?, 'gpu', ?)",
            [(t, (5 if t == T0 + 600_000 else 2) * GIB) for t in ticks],
        )
        con.executemany(
            "INSERT INTO process_samples (ts_ms, process_id, device_id, vram_bytes)"
            " VALUES (?, ?, 'gpu', ?)",
            [(t, p, p * GIB) for t in ticks for p in (1, 2)],
        )
    store.prune(end - 3600_000, Retention(raw_hours=6.0))
    store.close()
    return end - 1000


def _read(path: Path, since_ms: int, until_ms: int) -> tuple[object, int]:
    """(device and server peaks of the window, SQLite VM instructions / 100 it took)."""
    db = open_readonly(path)
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    db.conn.set_progress_handler(count, 100)
    try:
        peaks = (
            device_peaks(db, None, since_ms, until_ms, 239, True),
            server_peaks(db, None, since_ms, until_ms, 239, True),
        )
    finally:
        db.conn.close()
    return peaks, steps[0]


def test_a_month_reads_rollups_and_no_raw_sample_already_rolled_up(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    last = _database(path)
    db = open_readonly(path)
    cut = rolled_up_to_ms(db)
    db.conn.close()
    assert cut == T0 + 2 * 3600_000  # the store's prune wrote its meta row
    for days in (1, 7, 30):
        with_raw, steps_with_raw = _read(path, last - days * DAY_MS, last)
        # the raw samples the rollups already hold (2 h of them) go, as retention would
        con = sqlite3.connect(path)
        with con:
            con.execute("DELETE FROM device_samples WHERE ts_ms < ?", (cut,))
            con.execute("DELETE FROM process_samples WHERE ts_ms < ?", (cut,))
        con.close()
        without_raw, steps_without_raw = _read(path, last - days * DAY_MS, last)
        assert with_raw == without_raw  # they added nothing the rollups lacked
        devices, servers = with_raw  # type: ignore[misc]
        assert max(p.used_bytes for p in devices["gpu"]) == 5 * GIB  # the rolled-up spike
        assert {s.pid for s in servers} == {100}
        # 2 h of raw rows (3 a tick) scanned would be ~20,000 rows: hundreds of steps more
        assert steps_with_raw <= steps_without_raw + 5, (days, steps_with_raw, steps_without_raw)


def test_a_window_inside_the_rollups_or_after_them_reads_one_table(tmp_path: Path) -> None:
    """Windows wholly before or after the cut, and a window ending before it starts."""
    path = tmp_path / "v.db"
    last = _database(path)
    cut = T0 + 2 * 3600_000
    before, _ = _read(path, T0, cut - 1)
    after, _ = _read(path, cut, last)
    devices_before, _servers = before  # type: ignore[misc]
    devices_after, _servers = after  # type: ignore[misc]
    assert max(p.used_bytes for p in devices_before["gpu"]) == 5 * GIB
    assert all(cut <= p.ts_ms <= last for p in devices_after["gpu"])
    assert _read(path, last, T0)[0] == ({}, [])
