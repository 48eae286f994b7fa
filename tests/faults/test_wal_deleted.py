"""Someone deletes the database's -wal file while the daemon runs (issue 14, item 6): the
ticks committed in it are not lost, readers keep working, and the next start is clean."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stopping import STOP_GUARD_S

# the slow tier: a real daemon for many seconds (the default suite stays under 5 min)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _read(db: Path) -> tuple[int, str] | None:
    """(distinct ticks, integrity) as a new reader sees them; None while it cannot read."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        ticks = conn.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0]
        return ticks, conn.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def _until(what: str, check, timeout_s: float = 60.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def _daemon(db: Path) -> subprocess.Popen[str]:
    cfg = db.with_name("c.toml")
    cfg.write_text("[http]\nenabled = false\n")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "monitor",
            "daemon",
            "--db",
            str(db),
            "--interval",
            "0.2",
            "--config",
            str(cfg),
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> str:
    import signal

    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=STOP_GUARD_S)
    finally:
        proc.kill()
    return err or ""


def test_a_deleted_wal_loses_no_committed_tick(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    daemon = _daemon(db)
    try:
        # the daemon checkpoints its WAL from time to time: wait until ticks are in it
        before = _until(
            "10 ticks, some in the -wal file",
            lambda: (
                (r := _read(db))
                and r[0] >= 10
                and Path(f"{db}-wal").exists()
                and Path(f"{db}-wal").stat().st_size > 0
                and r
            ),
        )[0]
        Path(f"{db}-wal").unlink()
        after = _until(
            "readers see every earlier tick and new ones",
            lambda: (r := _read(db)) and r[0] >= before + 5 and r[1] == "ok" and r,
        )
        assert after[0] >= before + 5
    finally:
        err = _stop(daemon)
    assert daemon.returncode == 0, err
    assert err.count("was deleted while running") == 1, err  # said, once
    stopped = _read(db)
    assert stopped is not None and stopped[0] >= after[0] and stopped[1] == "ok"
    # the next start takes the same database: nothing moved aside, nothing lost
    again = _daemon(db)
    try:
        _until(
            "the restarted daemon adds ticks", lambda: (r := _read(db)) and r[0] >= stopped[0] + 3
        )
    finally:
        err = _stop(again)
    assert again.returncode == 0, err
    assert not list(tmp_path.glob("v.db.corrupt-*")), err
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert (
            conn.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0]
            >= stopped[0] + 3
        )


def test_a_fresh_database_is_not_a_deleted_wal(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    """Switching to WAL mode creates no -wal file; the first tick of a new database once
    took that for a deleted -wal ("could not be checkpointed: database table is locked")."""
    import logging

    from collectors.base import CollectorOptions, Roots
    from monitor import config as config_mod
    from monitor.daemon.loop import DaemonContext, tick
    from monitor.daemon.sampler import Sampler
    from monitor.store.database import Store

    store = Store.open(tmp_path / "v.db")
    try:
        assert not store.wal_lost()
        cfg = config_mod.load(None, db=tmp_path / "v.db")
        ctx = DaemonContext(
            cfg, store, Sampler(Roots(), CollectorOptions(pss_per_tick=0), ["procfs"])
        )
        with caplog.at_level(logging.WARNING, logger="monitor.daemon.loop"):
            tick(ctx)
            tick(ctx)
        assert not [r for r in caplog.records if "-wal" in r.getMessage()]
    finally:
        store.close()
