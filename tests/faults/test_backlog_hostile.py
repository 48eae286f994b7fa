"""The backlog side file against a hostile box (issue 28, items 2, 8 and 9).

- A FIFO (or a link) where the daemon reads its backlog must not hang a start: the real
  daemon reaches its first tick and ``/healthz`` quickly and names each refused file.
- A planted backlog is read bounded: an oversized line, a line nested 100 000 deep and a
  file past the read cap are skipped and counted, never an exception or unbounded memory.
- Replaying a backlog twice (a kill -9 during its replay) adds each event once.
Real daemons, real files, FIFOs and links, a real SQLite database.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import get, running

from collectors.base import DeviceEvent, DeviceSample, ExitedProcess, ProcessInfo, Snapshot
from monitor.analysis.exits_judged import JUDGE
from monitor.store import backlog
from monitor.store.database import Store

GIB = 1 << 30


def _tick(ts_ms: int) -> Snapshot:
    dev = DeviceSample("drm:0000:c3:00.0", "drm", "amd", "Strix", "unified", 96 * GIB, GIB)
    proc = ProcessInfo(7, 70, 1_700_000_000_000, 1, 1000, "llama-server", ("llama-server",),
                       "llama.cpp", ("inference",))  # fmt: skip
    events = (
        DeviceEvent(ts_ms, "drm:0000:c3:00.0", "xid", "critical", "Xid 79", {"xid": 79}),
        DeviceEvent(ts_ms, "daemon", "daemon_stopped", "info", "stopped", {"ticks": 3}),
    )
    return Snapshot(ts_ms, (dev,), (proc,), (), (), (), (), events)


def _old_fallback(db: Path) -> Path:
    """Where the code before issue 28 looked: a predictable name in /dev/shm."""
    key = hashlib.sha256(str(db.resolve()).encode()).hexdigest()[:16]
    return Path("/dev/shm") / f"vramscope-{key}.backlog.jsonl"


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private runtime folder, as systemd's RuntimeDirectory= gives (inherited by the
    daemon); the old /dev/shm name is cleaned up after."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(run))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield run
    with contextlib.suppress(FileNotFoundError):
        _old_fallback(tmp_path / "v.db").unlink()


def test_fifos_and_links_where_the_backlog_is_read_do_not_hang_a_start(
    tmp_path: Path, runtime: Path
) -> None:
    db = tmp_path / "v.db"
    os.mkfifo(backlog.backlog_path(db), 0o600)  # beside the database: old and new code read it
    os.mkfifo(_old_fallback(db), 0o666)  # what anyone could create before
    key = hashlib.sha256(str(db.resolve()).encode()).hexdigest()[:16]
    fallback = runtime / f"backlog-{key}.jsonl"  # where it goes now: the private folder
    fallback.symlink_to("/etc/passwd")
    with running(tmp_path, start_timeout_s=20) as live:
        assert get(f"{live.url}/healthz", timeout_s=5).startswith("ok")
    lines = live.stderr.splitlines()
    fifo = [ln for ln in lines if str(backlog.backlog_path(db)) in ln and "not read" in ln]
    link = [ln for ln in lines if str(fallback) in ln and "not read" in ln]
    assert len(fifo) == 1 and "not a regular file" in fifo[0], live.stderr
    assert len(link) == 1 and "symbolic link" in link[0], live.stderr
    assert backlog.backlog_path(db).exists() and fallback.is_symlink()  # left alone
    assert backlog.fallback_path(db) == fallback


def test_a_runtime_folder_others_can_write_is_not_used(tmp_path: Path, runtime: Path) -> None:
    runtime.chmod(0o777)
    db = tmp_path / "v.db"
    with pytest.raises(OSError, match="not a private folder"):
        backlog._save(backlog.fallback_path(db), [_tick(1000)], private=True)
    assert backlog.load(db).refused and not list(runtime.iterdir())


def _planted(path: Path, good: list[Snapshot], *, pad_mib: int = 0) -> None:
    with open(path, "wb") as f:
        f.write((json.dumps(backlog.to_json(good[0])) + "\n").encode())
        f.write(b'{"ts_ms": 5, "pad": "' + b"x" * (2 << 20) + b'"}\n')  # a 2 MiB line
        f.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")  # past the JSON decoder's recursion
        f.write(b'{"ts_ms": 6, "events": ' + b"[" * 200 + b"]" * 200 + b"}\n")  # past MAX_DEPTH
        f.write(b"[1, 2]\n")  # JSON, not a tick
        for snap in good[1:]:
            f.write((json.dumps(backlog.to_json(snap)) + "\n").encode())
        junk = b"#" * 1023 + b"\n"
        for _ in range(pad_mib * 1024):
            f.write(junk)
    path.chmod(0o600)


def test_a_planted_backlog_is_read_bounded_and_bad_lines_are_counted(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    good = [_tick(1000), _tick(2000)]
    _planted(backlog.backlog_path(db), good)
    got = backlog.load(db)
    assert list(got.snaps) == good and got.bad == 4 and not got.truncated
    assert got.files == (backlog.backlog_path(db),)


def test_a_backlog_past_the_read_cap_stops_there(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    path = backlog.backlog_path(db)
    _planted(path, [_tick(1000)], pad_mib=backlog.MAX_READ_BYTES >> 20)
    with open(path, "ab") as f:  # past the cap: never read
        f.write((json.dumps(backlog.to_json(_tick(9000))) + "\n").encode())
    got = backlog.load(db)
    assert [s.ts_ms for s in got.snaps] == [1000] and got.truncated
    assert got.bad > 60_000  # the junk lines read before the cap, counted


def test_the_daemon_starts_on_a_poisoned_backlog_and_counts_it(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    good = [_tick(1000), _tick(2000)]
    _planted(backlog.backlog_path(db), good)
    with running(tmp_path, start_timeout_s=20) as live:
        live.poll("the backlog written", lambda: not backlog.backlog_path(db).exists(), 20)
    queued = [ln for ln in live.stderr.splitlines() if "queued 2 tick(s)" in ln]
    assert len(queued) == 1 and "4 unreadable or oversized line(s) skipped" in queued[0]
    conn = sqlite3.connect(db)
    kinds = [k for (k,) in conn.execute("SELECT kind FROM events WHERE kind = 'xid'")]
    conn.close()
    assert len(kinds) == 2


def _counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("events", "device_samples", "processes")
        }
    finally:
        conn.close()


def test_replaying_the_same_backlog_twice_adds_each_event_once(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    ticks = [_tick(1000), _tick(2000)]
    gone = ExitedProcess(7, 70, 2000, "vanished", exit_code=137, exit_signal=9)
    ticks.append(Snapshot(3000, (), (), (), (), (gone,), (), ()))
    path = backlog.save(db, ticks)
    for _ in range(2):  # the second replay: as after a kill -9 before the file was removed
        store = Store.open(db, exit_judge=JUDGE)
        try:
            for line in path.read_text().splitlines():
                store.write(backlog.from_json(json.loads(line)))
        finally:
            store.close()
        if _ == 0:
            first = _counts(db)
    assert _counts(db) == first
    assert first["events"] >= 4  # two per tick, and the exit's own
