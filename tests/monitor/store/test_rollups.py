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
from monitor.store.rollups import HISTORY_KEY, history_rolled_up_to_ms

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


def _without(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    with con:
        for statement in statements:
            con.execute(statement)
    con.close()


def test_long_windows_read_the_history_rollups_the_prune_wrote(tmp_path: Path) -> None:
    """The prune wrote server_minutes and the 10-minute tables: a day reads the servers
    from server_minutes, a week or a month from the tens, with the same peaks as the
    per-minute rollups of every process give (the read without the history key)."""
    path = tmp_path / "v.db"
    last = _database(path)
    db = open_readonly(path)
    assert history_rolled_up_to_ms(db) == rolled_up_to_ms(db) == T0 + 2 * 3600_000
    (servers,) = db.execute("SELECT count(*) FROM server_minutes").fetchone()
    assert servers == 120  # one server (the other process is no engine), 2 h of minutes
    db.conn.close()
    reads = {days: _read(path, last - days * DAY_MS, last)[0] for days in (1, 7, 30)}
    # what the history rollups hold, the process rows of every minute are not read for
    _without(path, "DELETE FROM process_minutes", "DELETE FROM device_minutes")
    for days in (1, 7, 30):
        assert _read(path, last - days * DAY_MS, last)[0][1] == reads[days][1]
        if days > 1:
            assert _read(path, last - days * DAY_MS, last)[0][0] == reads[days][0]
    fresh = tmp_path / "w.db"
    _database(fresh)
    _without(fresh, f"DELETE FROM meta WHERE key = '{HISTORY_KEY}'")
    for days in (1, 7, 30):  # the per-minute rollups of every process: the same peaks
        devices, servers = _read(fresh, last - days * DAY_MS, last)[0]  # type: ignore[misc]
        want_devices, want_servers = reads[days]  # type: ignore[misc]
        assert max(p.used_bytes for p in devices["gpu"]) == 5 * GIB
        assert max(p.used_bytes for p in want_devices["gpu"]) == 5 * GIB
        assert [s.used_bytes for s in servers] == [s.used_bytes for s in want_servers] or (
            days > 1
            and max(s.used_bytes for s in servers) == max(s.used_bytes for s in want_servers)
        )


def test_the_migration_backfills_the_history_rollups(tmp_path: Path) -> None:
    """A database rolled up before m011: reopening it fills the new tables from the
    per-minute rollups and moves the history key to where those end."""
    path = tmp_path / "v.db"
    _database(path)
    _without(
        path,
        "DROP TABLE server_minutes",
        "DROP TABLE device_tens",
        "DROP TABLE server_tens",
        f"DELETE FROM meta WHERE key = '{HISTORY_KEY}'",
        "DELETE FROM _sqlite_migrations WHERE name = 'm011_history_rollups'",
    )
    Store.open(path).close()
    db = open_readonly(path)
    assert history_rolled_up_to_ms(db) == T0 + 2 * 3600_000
    assert db.execute("SELECT count(*) FROM server_minutes").fetchone() == (120,)
    assert db.execute("SELECT count(*), max(used_max_bytes) FROM device_tens").fetchone() == (
        12,
        5 * GIB,
    )
    db.conn.close()
