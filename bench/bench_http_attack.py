"""The daemon under two HTTP attacks on loopback: its memory, threads and ticks (issue 14).

Method: a real ``vramscope daemon`` (``--interval 0.25``) on a fresh database, HTTP on a free
127.0.0.1 port with a token. Its VmRSS and thread count come from ``/proc/PID/status``
(polled every 50 ms, the peak kept); ticks are the distinct ``device_samples`` timestamps
written during the attack window, against the ticks the interval asks for.

- ``events``: the database first gets ``--events`` rows (300,000 by default), then
  ``--clients`` (8) threads each send ``GET /api/v1/events?since_ms=0&limit=1`` in a loop,
  with the token, for the window.
- ``connections``: ``--clients`` (150) connections without a token each send 99 header
  lines of 64 KiB and then one byte every 5 s without ever ending the headers (slowloris
  with the largest headers http.client accepts); during the window a legit
  ``GET /healthz`` with the token is timed.

    python bench/bench_http_attack.py events
    python bench/bench_http_attack.py connections --clients 150
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOKEN = "bench-token-0123456789"
INTERVAL_S = 0.25


def status_of(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            out[key] = int(value.split()[0])
    return out


def fill_events(db: Path, n: int) -> None:
    from monitor.store.database import Store

    store = Store.open(db)
    store.close()
    conn = sqlite3.connect(db)
    t0 = int(time.time() * 1000) - n
    with conn:
        conn.executemany(
            "INSERT INTO events (ts_ms, kind, severity, subject, message, data)"
            " VALUES (?, 'xid', 'warning', 'nvml:GPU-0', ?, ?)",
            (
                (t0 + i, f"Xid 79 number {i}: GPU has fallen off the bus", '{"xid": 79}')
                for i in range(n)
            ),
        )
    conn.close()


def ticks_between(db: Path, start_ms: int, end_ms: int) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(
            "SELECT count(DISTINCT ts_ms) FROM device_samples WHERE ts_ms BETWEEN ? AND ?",
            (start_ms, end_ms),
        ).fetchone()[0]
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str, timeout: float = 60.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def slowloris(port: int, stop: threading.Event, opened: list[socket.socket]) -> None:
    line = b"X-Pad: " + b"a" * (65536 - 20) + b"\r\n"
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        return
    opened.append(sock)
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(99):
            sock.sendall(line)
        while not stop.wait(5.0):
            sock.sendall(b"X")
    except OSError:
        return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attack", choices=("events", "connections"))
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--clients", type=int)
    parser.add_argument("--window-s", type=float, default=20.0)
    args = parser.parse_args()
    clients = args.clients or (8 if args.attack == "events" else 150)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "v.db"
        if args.attack == "events":
            fill_events(db, args.events)
        port = free_port()
        cfg = Path(tmp) / "c.toml"
        cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\ntoken = "{TOKEN}"\n')
        daemon = subprocess.Popen(
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
            stderr=subprocess.PIPE,
        )
        try:
            for _ in range(200):
                with contextlib.suppress(OSError):
                    if get(port, "/healthz", 2) == 200:
                        break
                time.sleep(0.1)
            time.sleep(2)
            before = status_of(daemon.pid)
            stop = threading.Event()
            peak = dict(before)
            done = [0]
            opened: list[socket.socket] = []

            def events_client() -> None:
                while not stop.is_set():
                    with contextlib.suppress(OSError):
                        get(port, "/api/v1/events?since_ms=0&limit=1")
                        done[0] += 1

            target = (
                events_client
                if args.attack == "events"
                else (lambda: slowloris(port, stop, opened))
            )
            start_ms = int(time.time() * 1000)
            workers = [threading.Thread(target=target, daemon=True) for _ in range(clients)]
            for w in workers:
                w.start()
            legit: list[float] = []
            deadline = time.monotonic() + args.window_s
            next_legit = time.monotonic() + args.window_s / 2
            while time.monotonic() < deadline:
                now = status_of(daemon.pid)
                peak = {k: max(peak[k], now[k]) for k in peak}
                if args.attack == "connections" and not legit and time.monotonic() > next_legit:
                    t = time.monotonic()
                    try:
                        code = get(port, "/healthz", 30)
                    except OSError:
                        code = -1
                    legit.append(time.monotonic() - t if code == 200 else float("inf"))
                time.sleep(0.05)
            end_ms = int(time.time() * 1000)
            stop.set()
            for sock in opened:
                with contextlib.suppress(OSError):
                    sock.close()
            ticks = ticks_between(db, start_ms, end_ms)
            expected = int((end_ms - start_ms) / 1000 / INTERVAL_S)
            print(f"attack={args.attack} clients={clients} window={args.window_s:.0f}s")
            print(
                f"rss_before_mib={before['VmRSS'] / 1024:.0f} "
                f"rss_peak_mib={peak['VmRSS'] / 1024:.0f} "
                f"threads_before={before['Threads']} threads_peak={peak['Threads']}"
            )
            print(f"ticks={ticks} of {expected} asked for")
            if args.attack == "events":
                print(f"events requests answered={done[0]}")
            else:
                print(f"legit /healthz during the attack: {legit[0] if legit else None} s")
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                _, err = daemon.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                _, err = daemon.communicate()
            lines = err.decode(errors="replace").splitlines()
            print(
                f"daemon stderr lines={len(lines)} tracebacks="
                f"{sum('Traceback' in x for x in lines)}"
            )


if __name__ == "__main__":
    main()
