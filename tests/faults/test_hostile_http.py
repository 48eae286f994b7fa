"""The daemon's HTTP API under hostile clients (issue 14): a real ``vramscope daemon`` on a
real database, HTTP on a free 127.0.0.1 port, its memory and threads read from
``/proc/PID/status``. Nothing here leaves loopback."""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from monitor.store import Store

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hostile-test-token-0123456789"
MIB = 1024 * 1024


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    port: int
    db: Path

    def status(self) -> dict[str, int]:
        """VmRSS (bytes) and Threads from /proc/PID/status."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "VmRSS":
                out["rss_bytes"] = int(value.split()[0]) * 1024
            elif key == "Threads":
                out["threads"] = int(value)
        return out

    def get(self, path: str, token: str | None = TOKEN, timeout: float = 30.0
            ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_daemon(tmp_path: Path, db: Path, token: str | None = TOKEN) -> Iterator[Daemon]:
    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n'
                   + (f'token = "{token}"\n' if token else ""))
    proc = subprocess.Popen([sys.executable, "-m", "monitor", "daemon", "--db", str(db),
                             "--interval", "0.2", "--config", str(cfg)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    daemon = Daemon(proc, port, db)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            with contextlib.suppress(OSError):
                if daemon.get("/healthz", token, timeout=5)[0] == 200:
                    break
            assert time.monotonic() < deadline, "the daemon never answered /healthz"
            time.sleep(0.1)
        yield daemon
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        finally:
            proc.kill()


def stop(daemon: Daemon) -> str:
    """SIGTERM, wait, and the daemon's stderr."""
    daemon.proc.send_signal(signal.SIGTERM)
    _, err = daemon.proc.communicate(timeout=30)
    return err


def peak_while(daemon: Daemon, work: threading.Thread) -> dict[str, int]:
    """The largest VmRSS and thread count seen while ``work`` runs (polled)."""
    peak = daemon.status()
    while work.is_alive():
        now = daemon.status()
        peak = {k: max(peak[k], now[k]) for k in peak}
        work.join(0.02)
    return peak


# -- item 2: the events API reads only what it returns ---------------------------------

def fill_events(db: Path, n: int) -> int:
    Store.open(db).close()
    conn = sqlite3.connect(db)
    t0 = int(time.time() * 1000) - 10 * n
    with conn:
        conn.executemany(
            "INSERT INTO events (ts_ms, kind, severity, subject, message, data)"
            " VALUES (?, 'xid', 'warning', 'nvml:GPU-0', ?, '{\"xid\": 79}')",
            ((t0 + 10 * i, f"Xid 79 number {i}: GPU has fallen off the bus") for i in range(n)))
    conn.close()
    return t0


def test_events_with_a_small_limit_never_load_the_whole_table(tmp_path: Path) -> None:
    """300,000 events; eight `since_ms=0&limit=1` requests at once used to read every row
    into the daemon (140 MB -> 3.8 GB, ticks lost)."""
    db = tmp_path / "v.db"
    t0 = fill_events(db, 300_000)
    with running_daemon(tmp_path, db) as daemon:
        base = daemon.status()
        answers: list[tuple[int, bytes]] = []

        def attack() -> None:
            pool = [threading.Thread(target=lambda: answers.append(
                daemon.get("/api/v1/events?since_ms=0&limit=1", timeout=120)))
                for _ in range(8)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()

        work = threading.Thread(target=attack)
        work.start()
        peak = peak_while(daemon, work)
        assert len(answers) == 8
        for status, body in answers:
            doc = json.loads(body)
            assert status == 200 and doc["truncated"] is True
            assert [e["ts_ms"] for e in doc["events"]] == [t0]
        assert peak["rss_bytes"] - base["rss_bytes"] < 200 * MIB, (base, peak)
        # A page in the middle is the right page, and the default is bounded too.
        status, body = daemon.get(f"/api/v1/events?since_ms={t0 + 10 * 150_000}&limit=3")
        assert [e["ts_ms"] for e in json.loads(body)["events"]] == [
            t0 + 10 * i for i in (150_000, 150_001, 150_002)]
        status, body = daemon.get("/api/v1/events?since_ms=0")
        doc = json.loads(body)
        assert len(doc["events"]) == 1000 and doc["truncated"] is True
