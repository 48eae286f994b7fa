"""A real daemon whose database refuses writes: another writer holds its lock (a second
SQLite connection in ``BEGIN IMMEDIATE``), or it is stopped while refused.

It keeps sampling into memory, says why in its log once per change of state (not once a
tick), answers ``/healthz`` with 503 and the reason, exports ``vramscope_db_write_ok`` and
``vramscope_db_backlog_ticks``, writes the backlog when the lock goes, and on SIGTERM
while refused saves the backlog beside the database for the next start: nothing lost.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from stopping import STOP_GUARD_S

# the slow tier: a real daemon for many seconds (the default suite stays under 5 min)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
INTERVAL_S = 0.2
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    def __init__(self, tmp_path: Path, db: Path) -> None:
        self.port = free_port()
        cfg = tmp_path / f"c{self.port}.toml"
        cfg.write_text(f'[http]\nlisten = "127.0.0.1:{self.port}"\n')
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "monitor",
                "daemon",
                "--db",
                str(db),
                "--interval",
                str(INTERVAL_S),
                "--config",
                str(cfg),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with OPENER.open(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str) -> float | None:
        _, body = self.get("/metrics")
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def wait(self, what: str, check, timeout_s: float = 30.0):  # noqa: ANN001
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc.poll() is None, f"daemon exited: {self.proc.communicate()[1]}"
            try:
                got = check()
            except OSError:
                got = None
            if got:
                return got
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def stop(self) -> str:
        try:
            self.proc.send_signal(signal.SIGTERM)
            _, err = self.proc.communicate(timeout=STOP_GUARD_S)
        finally:
            self.proc.kill()
        return err


def tick_times(db: Path) -> set[int]:
    if not db.exists():
        return set()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return {r[0] for r in conn.execute("SELECT DISTINCT ts_ms FROM collector_runs")}
    except sqlite3.OperationalError:
        return set()
    finally:
        conn.close()


def hold_write_lock(db: Path) -> sqlite3.Connection:
    """Another writer: a real second connection holding the write lock."""
    blocker = sqlite3.connect(db, timeout=10, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    return blocker


def log_problems(err: str) -> list[str]:
    """Warnings and errors, less the load watch's about other servers on this (busy) box."""
    return [
        line
        for line in err.splitlines()
        if (" WARNING " in line or " ERROR " in line) and " monitor.daemon.watch: " not in line
    ]


@pytest.mark.parametrize("hold_s", [4.0, pytest.param(30.0, marks=pytest.mark.slow)])
def test_a_locked_database_costs_no_tick_and_is_said_once(tmp_path: Path, hold_s: float) -> None:
    db = tmp_path / "v.db"
    d = Daemon(tmp_path, db)
    try:
        d.wait("three ticks", lambda: len(tick_times(db)) >= 3)
        d.wait("healthz 200", lambda: d.get("/healthz")[0] == 200)
        assert d.metric("vramscope_db_write_ok") == 1.0
        blocker = hold_write_lock(db)
        locked_at = time.time() * 1000
        try:
            status, body = d.wait("healthz 503", lambda: (r := d.get("/healthz"))[0] == 503 and r)
            assert body.startswith("database: cannot write") and "locked" in body, body
            assert d.metric("vramscope_db_write_ok") == 0.0
            d.wait("a backlog", lambda: (d.metric("vramscope_db_backlog_ticks") or 0) >= 3)
            time.sleep(max(0.0, hold_s - (time.time() * 1000 - locked_at) / 1000))
        finally:
            blocker.rollback()
            blocker.close()
        freed_at = time.time() * 1000
        d.wait("healthz 200 again", lambda: d.get("/healthz")[0] == 200)
        d.wait("the backlog written", lambda: d.metric("vramscope_db_backlog_ticks") == 0)
        during = {t for t in tick_times(db) if locked_at <= t <= freed_at}
    finally:
        err = d.stop()
    assert d.proc.returncode == 0, err
    expected = (freed_at - locked_at) / 1000 / INTERVAL_S
    print(
        f"lock {hold_s:.0f} s: {len(during)} ticks recorded of ~{expected:.0f} expected; "
        f"{len(log_problems(err))} warning/error lines: {log_problems(err)}"
    )
    assert len(during) >= 0.5 * expected, (len(during), expected)  # sampling went on
    refusals = [line for line in err.splitlines() if "cannot write to" in line]
    assert len(refusals) == 1, err  # once per change of state, not once a tick
    assert sum("accepts writes again;" in line for line in err.splitlines()) == 1, err
    assert len(log_problems(err)) <= 2, log_problems(err)
    assert "Traceback" not in err


def test_sigterm_while_locked_saves_the_backlog_and_the_next_start_writes_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "v.db"
    d = Daemon(tmp_path, db)
    blocker = None
    try:
        d.wait("three ticks", lambda: len(tick_times(db)) >= 3)
        blocker = hold_write_lock(db)
        d.wait("a backlog", lambda: (d.metric("vramscope_db_backlog_ticks") or 0) >= 5)
        err = d.stop()  # the lock is still held: the final flush fails
        assert d.proc.returncode == 0, err
    finally:
        if blocker is not None:
            blocker.rollback()
            blocker.close()
    side = tmp_path / "v.db.backlog.jsonl"
    assert side.exists(), err
    assert stat.S_IMODE(side.stat().st_mode) == 0o600
    import json

    saved = [json.loads(line) for line in side.read_text().splitlines()]
    saved_ticks = {doc["ts_ms"] for doc in saved if doc["runs"]}
    assert len(saved_ticks) >= 5 and not saved_ticks & tick_times(db)
    assert any(e["kind"] == "daemon_stopped" for doc in saved for e in doc["events"])
    assert "saved" in err and str(side) in err, err

    again = Daemon(tmp_path, db)
    try:
        again.wait("the backlog file removed", lambda: not side.exists())
        again.wait("the saved ticks in the database", lambda: saved_ticks <= tick_times(db))
    finally:
        err2 = again.stop()
    assert again.proc.returncode == 0, err2
    conn = sqlite3.connect(db)
    kinds = [
        r[0] for r in conn.execute("SELECT kind FROM events WHERE subject = 'daemon' ORDER BY id")
    ]
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert kinds.count("daemon_stopped") == 2, kinds  # the first run's stop came back too


def test_a_hard_link_to_the_database_does_not_let_a_second_daemon_in(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    first = Daemon(tmp_path, db)
    try:
        first.wait("a tick", lambda: len(tick_times(db)) >= 1)
        other_dir = tmp_path / "other"
        other_dir.mkdir()
        link = other_dir / "same.db"
        os.link(db, link)
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "monitor",
                "daemon",
                "--db",
                str(link),
                "--interval",
                str(INTERVAL_S),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip().splitlines() == [
            f"vramscope: error: another vramscope daemon (pid {first.proc.pid}) is already "
            f"writing {link} (the same file, by another name: a link)"
        ], second.stderr
    finally:
        err = first.stop()
    assert first.proc.returncode == 0, err
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_sigterm_on_a_full_disk_keeps_every_tick_for_the_next_start(tmp_path: Path) -> None:
    """The database's own disk is full: the backlog goes to the private runtime folder
    (here $XDG_RUNTIME_DIR/vramscope in tmp_path), and the next start on the freed disk
    writes it all."""
    import contextlib

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
            capture_output=True,
            check=False,
        ).returncode
        != 0
    ):
        pytest.skip("needs root to mount a tiny tmpfs")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    old_env = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)  # inherited by the daemons
    try:
        filler = mnt / "filler"
        db = mnt / "v.db"
        d = Daemon(tmp_path, db)
        try:
            d.wait("three ticks", lambda: len(tick_times(db)) >= 3)
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with contextlib.suppress(OSError):  # ENOSPC: the disk is full now
                while True:
                    os.write(fd, b"\0" * 4096)
            os.close(fd)
            d.wait(
                "503 for a full disk", lambda: (r := d.get("/healthz"))[0] == 503 and "full" in r[1]
            )
            doctor = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "monitor",
                    "doctor",
                    "--db",
                    str(db),
                    "--config",
                    str(tmp_path / f"c{d.port}.toml"),
                    "--json",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            import json

            check = next(c for c in json.loads(doctor.stdout) if c["name"] == "database")
            assert check["level"] == "fail" and "cannot write" in check["detail"], check
            d.wait("a backlog", lambda: (d.metric("vramscope_db_backlog_ticks") or 0) >= 5)
        finally:
            err = d.stop()
        assert d.proc.returncode == 0, err
        assert not (mnt / "v.db.backlog.jsonl").exists()
        saved_files = list((runtime / "vramscope").glob("backlog-*.jsonl"))  # a 0700 folder
        assert len(saved_files) == 1, err
        assert stat.S_IMODE(saved_files[0].stat().st_mode) == 0o600
        import json

        saved = {
            json.loads(line)["ts_ms"]
            for line in saved_files[0].read_text().splitlines()
            if json.loads(line)["runs"]
        }
        assert len(saved) >= 5 and not saved & tick_times(db)
        print(f"full disk: {len(saved)} ticks saved at SIGTERM to {saved_files[0]}")

        filler.unlink()
        again = Daemon(tmp_path, db)
        try:
            again.wait("the saved ticks in the database", lambda: saved <= tick_times(db))
            again.wait("the backlog file removed", lambda: not saved_files[0].exists())
        finally:
            err2 = again.stop()
        assert again.proc.returncode == 0, err2
    finally:
        if old_env is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = old_env
        with contextlib.suppress(Exception):
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_daemon_started_while_another_writer_holds_the_lock_waits_for_it(tmp_path: Path) -> None:
    """The start itself writes (daemon_started): a lock held longer than SQLite's busy
    timeout must not end the daemon; the event is written with the backlog."""
    from monitor.store.database import Store

    db = tmp_path / "v.db"
    Store.open(db).close()  # an existing vramscope database
    blocker = hold_write_lock(db)
    d = None
    try:
        d = Daemon(tmp_path, db)
        status, body = d.wait(
            "healthz 503 database",
            lambda: (r := d.get("/healthz"))[0] == 503 and r[1].startswith("database:") and r,
            timeout_s=60,
        )
        assert "locked" in body, body
        time.sleep(6)  # past SQLite's 5 s busy timeout of the start
        assert d.proc.poll() is None, d.proc.communicate()[1]
    finally:
        blocker.rollback()
        blocker.close()
    try:
        d.wait("healthz 200", lambda: d.get("/healthz")[0] == 200)
        d.wait("the backlog written", lambda: d.metric("vramscope_db_backlog_ticks") == 0)
    finally:
        err = d.stop()
    assert d.proc.returncode == 0 and "Traceback" not in err, err
    conn = sqlite3.connect(db)
    kinds = [r[0] for r in conn.execute("SELECT kind FROM events ORDER BY id")]
    conn.close()
    assert kinds.count("daemon_started") == 1 and kinds[-1] == "daemon_stopped", kinds
