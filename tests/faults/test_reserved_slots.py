"""Stalled or busy HTTP clients cannot starve health checks and authorized clients (issue
28 item 12): a real ``vramscope daemon`` with a token, HTTP on a free 127.0.0.1 port.

Before, each connection took one of the 32 request threads as it was accepted, before its
head was read: 32 connections that sent nothing made an authorized ``/healthz`` 503 for
as long as they stalled. Now a head is read without a thread (monitor/http/heads.py) and
cut at ``HEAD_TIMEOUT_S``; 4 more threads are kept for ``/healthz`` and requests with the
token when the 32 are busy. Nothing here leaves loopback."""

from __future__ import annotations

import contextlib
import http.client
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stopping import STOP_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "reserved-slots-token-0123456789"
MAX_CONNECTIONS = 32  # monitor.http.server.MAX_CONNECTIONS
RESERVED = 4  # monitor.http.server.RESERVED_CONNECTIONS


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    port: int

    def get(self, path: str, token: str | None = TOKEN) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def threads(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise AssertionError("no Threads line")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_daemon(tmp_path: Path) -> Iterator[Daemon]:
    port = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\ntoken = "{TOKEN}"\n')
    argv = [sys.executable, "-m", "monitor", "daemon", "--db", str(tmp_path / "v.db")]
    proc = subprocess.Popen(
        [*argv, "--interval", "0.2", "--config", str(cfg)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    daemon = Daemon(proc, port)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            with contextlib.suppress(OSError):
                if daemon.get("/healthz")[0] == 200:
                    break
            assert time.monotonic() < deadline, "the daemon never answered /healthz"
            time.sleep(0.1)
        yield daemon
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=STOP_GUARD_S)
        finally:
            proc.kill()
    assert "Traceback" not in err, err


def connect(port: int, n: int, send: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if send:
            s.sendall(send)
        socks.append(s)
    return socks


def still_open(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the daemon has neither answered nor closed."""
    return len(socks) - len(select.select(socks, [], [], 0)[0])


def test_stalled_connections_leave_authorized_and_health_requests_served(
    tmp_path: Path,
) -> None:
    """40 connections that send nothing (and 8 that send half a request line) while an
    authorized /healthz and an authorized API request are made: before, 503; now 200.
    An unauthenticated request still gets no data (401)."""
    with running_daemon(tmp_path) as daemon:
        stalled: list[socket.socket] = []
        try:
            stalled += connect(daemon.port, MAX_CONNECTIONS + 8, b"")
            stalled += connect(daemon.port, 8, b"GET /api/v1/snap")
            health = daemon.get("/healthz")
            snapshot = daemon.get("/api/v1/snapshot")
            anonymous = daemon.get("/api/v1/snapshot", token=None)
            assert health[0] == 200 and health[1].startswith(b"ok"), health
            assert snapshot[0] == 200 and b"vramscope.status/1" in snapshot[1], snapshot[:1]
            assert anonymous[0] == 401, anonymous
            # the scenario held: the stalled ones were still waiting (HEAD_TIMEOUT_S, 5 s)
            assert still_open(stalled) == len(stalled)
            # and they are cut at the head deadline, without an answer
            for s in stalled:
                s.settimeout(30)
                assert s.recv(100) == b""
        finally:
            for s in stalled:
                s.close()


def test_busy_threads_leave_reserved_ones_for_health_and_the_token(tmp_path: Path) -> None:
    """32 authorized predict requests whose body never comes hold every general thread:
    an unauthenticated request gets 503 as before, an authorized /healthz and snapshot are
    served from the reserved threads (before: 503), and the threads stay bounded."""
    held = (
        b"POST /api/v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
        + TOKEN.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    with running_daemon(tmp_path) as daemon:
        base = daemon.threads()
        busy: list[socket.socket] = []
        try:
            busy += connect(daemon.port, MAX_CONNECTIONS, held)
            deadline = time.monotonic() + 30  # hang guard: each takes a thread in time
            while daemon.threads() < base + MAX_CONNECTIONS and time.monotonic() < deadline:
                time.sleep(0.05)
            anonymous = daemon.get("/api/v1/snapshot", token=None)
            health = daemon.get("/healthz")
            snapshot = daemon.get("/api/v1/snapshot")
            peak = daemon.threads()
            assert health[0] == 200 and health[1].startswith(b"ok"), health
            assert snapshot[0] == 200 and b"vramscope.status/1" in snapshot[1], snapshot[:1]
            assert anonymous[0] == 503 and b"busy" in anonymous[1], anonymous
            assert still_open(busy) == len(busy)  # the scenario held: all still waiting
            assert peak <= base + MAX_CONNECTIONS + RESERVED, (base, peak)
        finally:
            for s in busy:
                s.close()


def test_a_body_that_trickles_is_cut_at_its_deadline(tmp_path: Path) -> None:
    """A predict POST whose declared 200-byte body comes a byte a second held a request
    thread for up to 200 s (each read had its own 10 s timeout, the body none); now the
    whole body has BODY_DEADLINE_S (5 s), then 408 and the connection is closed."""
    with running_daemon(tmp_path) as daemon:
        sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=60)
        head = (
            "POST /api/v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            "Content-Length: 200\r\n\r\n"
        )
        sock.sendall(head.encode())
        answer = b""
        start = time.monotonic()
        with sock:
            while time.monotonic() - start < 40 and b"\r\n" not in answer:
                with contextlib.suppress(OSError):
                    sock.sendall(b" ")
                ready, _, _ = select.select([sock], [], [], 1.0)
                if ready:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
        status_line = answer.split(b"\r\n", 1)[0].decode(errors="replace")
        assert " 408 " in status_line + " ", (status_line, time.monotonic() - start)
