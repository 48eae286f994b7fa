"""Random bytes written into the database while a real daemon runs (issue 28 item 15).

The daemon checks the file with ``PRAGMA quick_check`` every ``[daemon] integrity_check_s``
seconds (1 s here; hourly by default): ``/healthz`` answers 503 "database corrupt: ...",
``vramscope_db_integrity_ok`` reads 0, ``vramscope doctor`` fails naming it, and the next
start moves the file aside and starts a new database instead of refusing it (also when
the bytes destroyed the file's header). ``doctor`` also fails while the daemon's database
refuses writes when it cannot reach the daemon's /healthz (no HTTP in its config).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import cli_runner
import daemon_harness
import pytest
from stopping import STOP_GUARD_S

# the slow tier: a real daemon for many seconds (the default suite stays under 5 min)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHECK_EVERY = "[daemon]\nintegrity_check_s = 1\n"


def status(d: daemon_harness.LiveDaemon, path: str) -> tuple[int, str]:
    import urllib.error

    try:
        with daemon_harness.OPENER.open(f"{d.url}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(d: daemon_harness.LiveDaemon, name: str) -> float | None:
    for line in d.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def doctor(db: Path, config: Path) -> tuple[int, dict]:
    done = cli_runner.vramscope("doctor", "--db", str(db), "--config", str(config), "--json")
    assert "Traceback" not in done.stderr, done.stderr
    check = next(c for c in json.loads(done.stdout) if c["name"] == "database")
    return done.returncode, check


def quick_check(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return " ".join(str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall())
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        conn.close()


def corrupt(db: Path, offset: int, size: int = 4096) -> str:
    """Checkpoint the WAL into the file (so the pages read are the file's), write random
    bytes over ``size`` bytes at ``offset``; what quick_check says of it then."""
    conn = sqlite3.connect(db, timeout=10, isolation_level=None)
    try:
        deadline = time.monotonic() + 30
        while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] != 0:
            assert time.monotonic() < deadline, "the WAL could not be checkpointed"
            time.sleep(0.05)
    finally:
        conn.close()
    with open(db, "r+b") as f:
        f.seek(offset)
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    return quick_check(db)


@pytest.mark.parametrize("offset", [8192, 0], ids=["page-3", "header-page"])
def test_corruption_under_a_running_daemon_is_noticed_and_survived(
    tmp_path: Path, offset: int
) -> None:
    with daemon_harness.running(tmp_path, CHECK_EVERY) as d:
        d.poll("healthz 200", lambda: status(d, "/healthz")[0] == 200)
        assert metric(d, "vramscope_db_integrity_ok") == 1.0
        said = corrupt(d.db, offset)
        assert said != "ok", "quick_check did not notice the bytes"
        code, body = d.poll(
            "healthz 503", lambda: (r := status(d, "/healthz"))[0] == 503 and r, timeout_s=30
        )
        assert body.startswith("database corrupt:"), body
        assert metric(d, "vramscope_db_integrity_ok") == 0.0
        assert (metric(d, "vramscope_db_integrity_checked_timestamp_seconds") or 0) > 0
        rc, check = doctor(d.db, tmp_path / "vramscope.toml")
        assert rc != 0 and check["level"] == "fail" and "corrupt" in check["detail"], check
    first_err = d.stderr
    print(f"offset {offset}: quick_check said {said[:80]!r}; healthz {code}: {body.strip()}")
    assert "is corrupt (quick_check" in first_err, first_err
    with daemon_harness.running(tmp_path, CHECK_EVERY) as again:
        again.poll("healthz 200 on the new file", lambda: status(again, "/healthz")[0] == 200)
        assert metric(again, "vramscope_db_integrity_ok") == 1.0
    moved = [p for p in tmp_path.glob("v.db.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(moved) == 1, again.stderr
    assert "moved it to" in again.stderr, again.stderr
    assert quick_check(tmp_path / "v.db") == "ok"
    assert not (tmp_path / "v.db.corrupt-found").exists()


def test_doctor_fails_while_the_database_refuses_writes_without_healthz(tmp_path: Path) -> None:
    """The daemon and doctor with no HTTP (doctor cannot ask /healthz): another writer
    holds the database's lock; doctor must not say ok once no tick has been written for
    10 s (5 intervals, at least 10 s)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("[http]\nenabled = false\n")
    db = tmp_path / "v.db"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2"]
        + ["--config", str(cfg)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    blocker = None
    try:
        deadline = time.monotonic() + 60
        while not (db.exists() and _ticks(db) >= 3):
            assert daemon.poll() is None and time.monotonic() < deadline, "no ticks"
            time.sleep(0.1)
        rc, check = doctor(db, cfg)
        assert check["level"] == "ok", check
        blocker = sqlite3.connect(db, timeout=10, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        time.sleep(11)
        rc, check = doctor(db, cfg)
    finally:
        if blocker is not None:
            blocker.rollback()
            blocker.close()
        daemon.terminate()
        _, err = daemon.communicate(timeout=STOP_GUARD_S)
    print(f"doctor while locked: rc {rc}, {check['level']}: {check['detail']}")
    assert rc != 0 and check["level"] == "fail" and "cannot write" in check["detail"], check
    assert "Traceback" not in err, err


def _ticks(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return int(conn.execute("SELECT COUNT(DISTINCT ts_ms) FROM collector_runs").fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        conn.close()
