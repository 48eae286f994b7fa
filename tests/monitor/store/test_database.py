"""The SQLite store on real database files."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from collectors.base import (
    CollectorRun,
    DeviceSample,
    ExitedProcess,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
)
from monitor.analysis.exits_judged import JUDGE
from monitor.store.database import MINUTE_MS, Retention, Store, StoreError, open_readonly

GIB = 1024**3
T0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE_MS


def snapshot(
    ts_ms: int,
    used: int = 10 * GIB,
    pid: int = 100,
    start: int = 5,
    gtt: int = 70 * GIB,
    exited: tuple[ExitedProcess, ...] = (),
) -> Snapshot:
    return Snapshot(
        ts_ms=ts_ms,
        devices=(
            DeviceSample(
                "drm:0000:c3:00.0",
                "drm",
                "amd",
                "Strix Halo",
                "unified",
                total_bytes=96 * GIB,
                used_bytes=used,
                gtt_used_bytes=gtt,
            ),
            DeviceSample(
                "host",
                "procfs",
                "host",
                "Host RAM",
                "host",
                128 * GIB,
                20 * GIB,
                available_bytes=108 * GIB,
            ),
        ),
        processes=(
            ProcessInfo(
                pid,
                start,
                None,
                1,
                1000,
                "llama-server",
                ("llama-server", "--api-key", "<redacted>"),
                "llama.cpp",
                ("inference", "gpu"),
            ),
        ),
        memory=(
            ProcessMemory(pid, "drm:0000:c3:00.0", vram_bytes=0, gtt_bytes=gtt),
            ProcessMemory(pid, "host", rss_anon_bytes=GIB, rss_file_bytes=4 * GIB),
            ProcessMemory(999, "drm:0000:c3:00.0", gtt_bytes=GIB),  # no identity: skipped
        ),
        hidden=(),
        exited=exited,
        runs=(
            CollectorRun("procfs", ts_ms, 0.002, 0.001, "ok"),
            CollectorRun("drm", ts_ms, 0.001, 0.001, "error", "boom"),
        ),
    )


@pytest.fixture
def store(tmp_path: Path):
    s = Store.open(tmp_path / "state" / "v.db", exit_judge=JUDGE)
    yield s
    s.close()


def count(store: Store, table: str) -> int:
    return store.db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_file_is_private_wal_and_migrated(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "v.db"
    s = Store.open(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert s.db.journal_mode == "wal"
    assert {
        "devices",
        "device_samples",
        "processes",
        "process_samples",
        "events",
        "collector_runs",
        "device_minutes",
        "process_minutes",
    } <= set(s.db.table_names())
    s.close()
    Store.open(path).close()  # migrations are idempotent


def test_one_tick_writes_every_table_and_skips_unknown_identities(store: Store) -> None:
    store.write(snapshot(T0))
    assert count(store, "devices") == 2
    assert count(store, "device_samples") == 2
    assert count(store, "processes") == 1
    assert count(store, "process_samples") == 2  # pid 999 had no identity
    assert count(store, "collector_runs") == 2
    row = store.db.execute("SELECT argv, engine, reasons FROM processes").fetchone()
    assert row == ('["llama-server", "--api-key", "<redacted>"]', "llama.cpp", "inference,gpu")
    gtt = store.db.execute("SELECT gtt_bytes FROM process_samples WHERE device_id != 'host'")
    assert gtt.fetchone()[0] == 70 * GIB


def test_process_identity_is_pid_plus_start_time(store: Store) -> None:
    store.write(snapshot(T0, pid=100, start=5))
    store.write(snapshot(T0 + 1000, pid=100, start=5))
    store.write(snapshot(T0 + 2000, pid=100, start=6, exited=(ExitedProcess(100, 5, T0 + 1000),)))
    rows = store.db.execute(
        "SELECT pid, start_ticks, first_seen_ms, last_seen_ms, exited_ms FROM processes ORDER BY id"
    ).fetchall()
    assert rows == [(100, 5, T0, T0 + 1000, T0 + 2000), (100, 6, T0 + 2000, T0 + 2000, None)]
    event = store.db.execute("SELECT kind, subject FROM events").fetchall()
    assert event == [("process_exit", "llama-server[100]")]


def test_prune_rolls_up_complete_minutes_then_drops_raw(store: Store) -> None:
    for second in range(120):  # two full minutes at 1 s
        store.write(snapshot(T0 + second * 1000, used=(10 + second % 3) * GIB))
    now = T0 + 150_000
    counts = store.prune(now, Retention(raw_hours=0.1))
    assert counts["device_minutes"] == 4  # 2 minutes x 2 devices
    row = store.db.execute(
        "SELECT samples, used_min_bytes, used_max_bytes, used_avg_bytes FROM device_minutes"
        " WHERE device_id != 'host' AND ts_ms = ?",
        (T0,),
    ).fetchone()
    assert row == (60, 10 * GIB, 12 * GIB, 11 * GIB)
    pm = store.db.execute(
        "SELECT samples, gtt_max_bytes FROM process_minutes"
        " WHERE device_id != 'host' AND ts_ms = ?",
        (T0,),
    ).fetchone()
    assert pm == (60, 70 * GIB)
    assert count(store, "device_samples") == 240  # 6 minutes of raw kept: nothing dropped
    # Later: raw older than the window goes, the rollups stay, each minute once.
    later = T0 + 3 * 3600_000
    counts = store.prune(later, Retention(raw_hours=0.1))
    assert counts["deleted_device_samples"] == 240
    assert count(store, "device_samples") == 0
    assert count(store, "device_minutes") == 4
    again = store.db.execute(
        "SELECT samples, used_min_bytes, used_max_bytes, used_avg_bytes FROM device_minutes"
        " WHERE device_id != 'host' AND ts_ms = ?",
        (T0,),
    ).fetchone()
    assert again == row


def test_a_tick_written_late_still_reaches_its_minute(store: Store) -> None:
    for second in range(60):
        store.write(snapshot(T0 + second * 1000 + 500, used=10 * GIB))
    store.prune(T0 + 90_000, Retention())
    # A tick held in memory while the database was locked arrives after the rollup.
    store.write(snapshot(T0 + 100, used=50 * GIB))
    store.prune(T0 + 150_000, Retention())
    row = store.db.execute(
        "SELECT samples, used_max_bytes FROM device_minutes WHERE device_id != 'host'"
        " AND ts_ms = ?",
        (T0,),
    ).fetchone()
    assert row == (61, 50 * GIB)


def test_out_of_range_counter_is_stored_as_unknown(store: Store) -> None:
    snap = snapshot(T0)
    from dataclasses import replace

    bad = replace(snap, devices=(replace(snap.devices[0], used_bytes=2**64 - 1), snap.devices[1]))
    store.write(bad)
    got = store.db.execute("SELECT used_bytes FROM device_samples WHERE device_id != 'host'")
    assert got.fetchone() == (None,)


def test_locked_database_is_not_mistaken_for_corruption(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    Store.open(path).close()
    holder = sqlite3.connect(path)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked"):
            Store.open(path)
    finally:
        holder.rollback()
        holder.close()
    assert not list(tmp_path.glob("v.db.corrupt-*"))  # the history stays where it was


def test_same_pid_and_start_tick_in_another_boot_is_another_process(store: Store) -> None:
    one = snapshot(T0)
    other_boot = replace_info(one, started_at_ms=T0 + 86400_000)
    store.write(replace_info(one, started_at_ms=T0 - 10_000))
    store.write(other_boot)
    assert count(store, "processes") == 2


def replace_info(snap: Snapshot, **changes: object) -> Snapshot:
    from dataclasses import replace

    return replace(snap, processes=tuple(replace(p, **changes) for p in snap.processes))


def test_minute_rollups_expire_after_minute_days(store: Store) -> None:
    store.write(snapshot(T0))
    store.prune(T0 + MINUTE_MS, Retention())
    assert count(store, "device_minutes") == 2
    store.prune(T0 + 31 * 86400_000, Retention(minute_days=30))
    assert count(store, "device_minutes") == 0


def test_corrupt_database_is_moved_aside_and_a_new_one_started(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    s = Store.open(path)
    for i in range(200):
        s.write(snapshot(T0 + i * 1000))
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    data = bytearray(path.read_bytes())
    data[8192 : 8192 + 3 * 4096] = b"\xde\xad" * (3 * 2048)  # vramscope's file, pages 3-5 torn
    path.write_bytes(bytes(data))
    s = Store.open(path)
    moved = list(tmp_path.glob("v.db.corrupt-*"))
    assert len(moved) == 1
    assert moved[0].read_bytes() == bytes(data)  # evidence kept
    ((kind, message),) = s.db.execute("SELECT kind, message FROM events").fetchall()
    assert kind == "database_recovered" and str(moved[0]) in message
    s.write(snapshot(T0))
    s.close()


def test_truncated_database_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    s = Store.open(path)
    for i in range(200):
        s.write(snapshot(T0 + i * 1000))
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])  # a torn copy
    s2 = Store.open(path)
    assert len(list(tmp_path.glob("v.db.corrupt-*"))) == 1
    assert count(s2, "device_samples") == 0
    s2.close()


def test_failed_write_rolls_back_and_the_next_write_still_works(store: Store) -> None:
    store.db.execute(
        "CREATE TRIGGER no_runs BEFORE INSERT ON collector_runs "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    )
    with pytest.raises(sqlite3.IntegrityError):
        store.write(snapshot(T0))
    assert count(store, "processes") == 0  # rolled back with the rest of the tick
    store.db.execute("DROP TRIGGER no_runs")
    store.write(snapshot(T0 + 1000))  # caches were restored: the process row is re-inserted
    assert count(store, "processes") == 1
    assert count(store, "process_samples") == 2


def test_unwritable_location_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create the database"):
        Store.open(blocker / "v.db")


def test_readonly_open_rejects_missing_and_garbage(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no database"):
        open_readonly(tmp_path / "none.db")
    (tmp_path / "bad.db").write_bytes(b"\0garbage" * 1000)
    with pytest.raises(StoreError, match="not a vramscope database"):
        open_readonly(tmp_path / "bad.db")


def test_device_events_become_event_rows(store: Store) -> None:
    from dataclasses import replace

    from collectors.base import DeviceEvent

    xid = DeviceEvent(T0, "nvml:GPU-1", "xid", "critical", "NVIDIA Xid 79 on H100", {"xid": 79})
    store.write(replace(snapshot(T0), events=(xid,)))
    row = store.db.execute("SELECT kind, severity, subject, message, data FROM events").fetchone()
    assert row == ("xid", "critical", "nvml:GPU-1", "NVIDIA Xid 79 on H100", '{"xid": 79}')


def test_samples_around_a_crash_survive_raw_retention(store: Store) -> None:
    crash_at = T0 + 30 * MINUTE_MS
    for minute in range(0, 40):
        store.write(snapshot(T0 + minute * MINUTE_MS))
    store.add_event(
        "crash",
        "critical",
        "llama-server[100]",
        "killed by the kernel OOM killer",
        {"pid": 100},
        ts_ms=crash_at,
    )
    store.prune(T0 + 10 * 3600_000, Retention(raw_hours=0.1))
    kept = [
        r[0] for r in store.db.execute("SELECT DISTINCT ts_ms FROM device_samples ORDER BY ts_ms")
    ]
    expected = [T0 + m * MINUTE_MS for m in range(20, 32)]  # 10 min before to 1 min after
    assert kept == expected
    rows = store.db.execute("SELECT count(*) FROM process_samples").fetchone()[0]
    assert rows == 2 * len(expected)


def test_prune_bounds_events_and_processes_that_only_grew(store: Store) -> None:
    """Issue 14: events and processes rows were never deleted. Events go by age and by
    count; a process row goes once its samples are gone and it was last seen before the
    minute retention; one with samples kept around a crash stays."""
    day = 86400_000
    for pid, when in ((100, T0), (200, T0 + 40 * day), (300, T0 + 40 * day - 5 * MINUTE_MS)):
        store.write(snapshot(when, pid=pid, start=pid))
    store.add_event(
        "crash",
        "critical",
        "llama-server[300]",
        "killed",
        {"pid": 300},
        ts_ms=T0 + 40 * day - 4 * MINUTE_MS,
    )
    conn = store.db.conn
    with store.db.atomic():  # a flood: 3,000 old events and 3,000 recent ones
        conn.executemany(
            "INSERT INTO events (ts_ms, kind, severity, message) VALUES (?, 'xid', 'warning', 'x')",
            [(T0 + i,) for i in range(3000)] + [(T0 + 40 * day + i,) for i in range(3000)],
        )
    now = T0 + 41 * day
    counts = store.prune(
        now, Retention(raw_hours=1, minute_days=30, events_days=30, events_max=2000)
    )
    pids = sorted(r[0] for r in store.db.execute("SELECT pid FROM processes"))
    assert pids == [200, 300]  # 100: last seen 41 days ago, no sample left
    assert counts["deleted_processes"] == 1
    assert count(store, "events") == 2000  # the newest 2000 of the recent ones
    kept = store.db.execute("SELECT min(ts_ms), max(ts_ms) FROM events").fetchone()
    assert kept == (T0 + 40 * day + 1000, T0 + 40 * day + 2999)
    assert counts["deleted_events"] == 3000 + 1000 + 1  # old ones, the cap, the crash
    # Pruned twice is pruned once; the rows still there are still read.
    assert (
        store.prune(now, Retention(raw_hours=1, minute_days=30, events_days=30, events_max=2000))[
            "deleted_events"
        ]
        == 0
    )


def test_an_old_database_gains_the_memory_clock_and_keeps_its_rows(tmp_path: Path) -> None:
    """A database written before m008 (no mem_clock_mhz column) upgrades in place: its rows
    stay, read back with an unknown clock, and new ticks store the clock."""
    from sqlite_utils import Database

    from monitor.store.migrations import migrations
    from monitor.store.moment import snapshot_in

    path = tmp_path / "old.db"
    old = Database(sqlite3.connect(path))
    migrations.apply(old, stop_before="m008_memory_clock")
    columns = {c.name for c in old["device_samples"].columns}
    assert "mem_clock_mhz" not in columns and "temp_c" in columns
    old.execute(
        "INSERT INTO devices (id, collector, vendor, name, memory_kind, total_bytes,"
        " first_seen_ms, last_seen_ms) VALUES ('nvml:GPU-1', 'nvml', 'nvidia', 'RTX 4060',"
        " 'dedicated', 8188, ?, ?)",
        (T0, T0),
    )
    old.execute(
        "INSERT INTO device_samples (ts_ms, device_id, used_bytes, total_bytes, temp_c)"
        " VALUES (?, 'nvml:GPU-1', 7021, 8188, 66.0)",
        (T0,),
    )
    old.conn.commit()
    old.close()

    store = Store.open(path)
    try:
        rows = store.db.execute(
            "SELECT ts_ms, used_bytes, temp_c, mem_clock_mhz FROM device_samples"
        )
        assert rows.fetchall() == [(T0, 7021, 66.0, None)]
        (dev,) = snapshot_in(store.db, T0).devices
        assert (dev.used_bytes, dev.temp_c, dev.mem_clock_mhz) == (7021, 66.0, None)
        gpu = DeviceSample(
            "nvml:GPU-1",
            "nvml",
            "nvidia",
            "RTX 4060",
            "dedicated",
            8188,
            7000,
            temp_c=67.0,
            mem_clock_mhz=8500.0,
        )
        store.write(Snapshot(T0 + 1000, (gpu,), (), (), (), (), ()))
        (dev,) = snapshot_in(store.db, T0 + 1000).devices
        assert (dev.used_bytes, dev.mem_clock_mhz) == (7000, 8500.0)
        assert count(store, "device_samples") == 2
    finally:
        store.close()
    Store.open(path).close()  # applied once: opening again changes nothing
