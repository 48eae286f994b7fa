"""A real llama-server stopped while the daemon still sees it loading is a stop, not a
crash: its exit event says "stopped during load", info, and no alert
fires (issue 19's done-when; llama-swap unloading a model mid-load must page no one).

The daemon judges a load finished after its memory holds steady for 3 ticks; at a 1 s
interval the server is stopped as soon as its ``load_started`` event is stored (on its
second tick, stamped with its first: monitor/daemon/watch.py), well
inside that window.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stopping import STOP_GUARD_S

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _rows(db: Path, sql: str) -> list[tuple]:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:
        return []
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _events(db: Path, kind: str) -> list[dict]:
    return [
        {"severity": sev, "message": msg, "data": json.loads(data)}
        for sev, msg, data in _rows(
            db, f"SELECT severity, message, data FROM events WHERE kind = '{kind}'"
        )
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ticks(db: Path) -> int:
    rows = _rows(db, "SELECT count(DISTINCT ts_ms) FROM device_samples")
    return rows[0][0] if rows else 0


def _wait(what: str, check, timeout_s: float = 120.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_real_llama_server_stopped_during_load_is_no_crash_and_no_alert(
    llama_server_bin: Path, tiny, tmp_path: Path, wait_for_ticks
) -> None:
    db = tmp_path / "v.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "1"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    server = None
    try:
        wait_for_ticks(db, 2)
        server = subprocess.Popen(
            [
                str(llama_server_bin),
                "-m",
                str(tiny["llama"].path),
                "--host",
                "127.0.0.1",
                "--port",
                str(_free_port()),
                "-c",
                "256",
                "--no-warmup",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        pid = server.pid
        _wait(
            "the daemon to see the load start",
            lambda: any(e["data"].get("pid") == pid for e in _events(db, "load_started")),
        )
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        exits = _wait(
            "the exit event",
            lambda: [e for e in _events(db, "process_exit") if e["data"].get("pid") == pid],
        )
        # alerts fire in the tick that records the exit; two more ticks to be sure
        wait_for_ticks(db, _ticks(db) + 2)
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=STOP_GUARD_S)
    assert not any(e["data"].get("pid") == pid for e in _events(db, "load_finished"))
    (exit_event,) = exits
    data = exit_event["data"]
    assert data["cause"] == "stopped_during_load", exit_event
    assert exit_event["severity"] == "info"
    assert "stopped during load" in exit_event["message"]
    assert not any(e["data"].get("pid") == pid for e in _events(db, "crash"))
    fired = [json.dumps(e["data"]) for e in _events(db, "alert_fired")]
    assert not any(f"[{pid}]" in s for s in fired), fired
