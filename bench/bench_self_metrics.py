"""The daemon's own cost as Prometheus sees it (issue 32 item 5): start a real daemon with
its defaults (1 s interval, HTTP on a free loopback port, a fresh database), read its
``process_resident_memory_bytes``, ``process_cpu_seconds_total`` and ``process_open_fds``
from its ``/metrics`` at the given minutes, and print each reading with the CPU share of
a core since the previous one and the box's load average.

The box is whatever runs it (a busy box costs more: every new process is looked at).

Run: .venv/bin/python bench/bench_self_metrics.py [--at 1,5,10]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WANTED = ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in WANTED:
            out[name] = float(value)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--at", default="1,5,10", help="minutes after the start, comma-separated")
    minutes = [float(m) for m in parser.parse_args().at.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        cfg = Path(tmp) / "vramscope.toml"
        cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
        cmd = [sys.executable, "-m", "monitor", "daemon", "--db", f"{tmp}/v.db"]
        daemon = subprocess.Popen([*cmd, "--config", str(cfg)], cwd=ROOT)
        start, last = time.monotonic(), None
        try:
            for at in minutes:
                time.sleep(max(0.0, start + at * 60 - time.monotonic()))
                got = read(f"http://127.0.0.1:{port}/metrics")
                cpu = got["process_cpu_seconds_total"]
                share = "" if last is None else f"{(cpu - last[1]) / (at * 60 - last[0]):.2%}"
                load = Path("/proc/loadavg").read_text().split()[:3]
                print(
                    f"{at:>5.1f} min  RSS {got['process_resident_memory_bytes'] / 2**20:6.1f} MiB"
                    f"  CPU {cpu:7.2f} s  {share:>7} of a core since  fds "
                    f"{got['process_open_fds']:.0f}  load {' '.join(load)}",
                    flush=True,
                )
                last = (at * 60, cpu)
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
