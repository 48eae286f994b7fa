"""The daemon's memory under process churn (issue 32): RSS over time, and where it grows.

A real daemon (``python -m monitor daemon``, its own database and a free loopback HTTP
port, alerts off) at ``--interval`` with real processes coming and going: a ``sleep``
every ``--sleeper-s`` seconds (killed after one second) and a ``llama-server``-named copy
of the Python interpreter every ``--server-s`` seconds (living ``--server-life-s``, with a
``-m`` model path unique to that launch, so anything keyed by launch or path shows).
RSS (``/proc/PID/status`` VmRSS) is printed every ``--every-s`` seconds.

``--tracemalloc DIR`` runs the daemon under ``tracemalloc`` (a wrapper in this file, not a
switch in the daemon): it writes a snapshot to DIR every ``--every-s`` seconds, and at the
end the top growth between the first snapshot after the warm-up and the last is printed,
grouped by source line. Tracing slows the daemon; use the plain run for RSS figures.

Run: .venv/bin/python bench/bench_daemon_memory.py --minutes 10 [--tracemalloc DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# run inside the daemon's interpreter: trace, snapshot every N s, then run the CLI
WRAPPER = """
import runpy, sys, threading, time, tracemalloc
tracemalloc.start(int(sys.argv.pop(1)))
out, every = sys.argv.pop(1), float(sys.argv.pop(1))
def dump():
    n = 0
    while True:
        time.sleep(every)
        tracemalloc.take_snapshot().dump(f"{out}/{n:04d}.snap")
        n += 1
threading.Thread(target=dump, daemon=True).start()
sys.argv[0] = "monitor"
runpy.run_module("monitor", run_name="__main__")
"""


def rss_mib(pid: int) -> float:
    """VmRSS from /proc/PID/status, in MiB."""
    return status_mib(pid)["VmRSS"]


def status_mib(pid: int) -> dict[str, float]:
    """VmRSS and its parts (RssAnon, RssFile, RssShmem) from /proc/PID/status, in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = float(value.split()[0]) / 1024
    return out


def daemon_argv(args: argparse.Namespace, tmp: Path) -> list[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp / "c.toml"
    cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
    tail = ["daemon", "--db", str(tmp / "v.db"), "--interval", str(args.interval)]
    tail += ["--config", str(cfg)]
    if args.tracemalloc is None:
        return [sys.executable, "-m", "monitor", *tail]
    args.tracemalloc.mkdir(parents=True, exist_ok=True)
    head = [sys.executable, "-c", WRAPPER, str(args.frames), str(args.tracemalloc)]
    return [*head, str(args.every_s), *tail]


def churn(args: argparse.Namespace, exe: Path, daemon: subprocess.Popen[bytes]) -> None:
    """Start and reap processes until the time is up, printing RSS every --every-s."""
    start = time.monotonic()
    end = start + args.minutes * 60
    live: list[tuple[float, subprocess.Popen[bytes]]] = []
    next_sleeper = next_server = next_print = start
    n = 0
    while time.monotonic() < end and daemon.poll() is None:
        now = time.monotonic()
        if now >= next_sleeper:
            live.append((now + 1.0, subprocess.Popen(["sleep", "30"])))
            next_sleeper += args.sleeper_s
        if now >= next_server:
            model = f"/models/m{n}.gguf"
            code = "import time; time.sleep(60)"
            argv = [str(exe), "-c", code, "-m", model, "--port", str(20000 + n % 1000)]
            live.append((now + args.server_life_s, subprocess.Popen(argv)))
            next_server += args.server_s
            n += 1
        if now >= next_print:
            mib = status_mib(daemon.pid)
            parts = ", ".join(f"{k} {v:.1f}" for k, v in mib.items() if k != "VmRSS")
            line = f"{(now - start) / 60:6.2f} min: RSS {mib['VmRSS']:.1f} MiB ({parts})"
            print(line, flush=True)
            next_print += args.every_s
        for item in [x for x in live if x[0] <= now]:
            item[1].kill()
            item[1].wait()
            live.remove(item)
        time.sleep(0.05)
    for _, proc in live:
        proc.kill()
        proc.wait()
    print(f"servers started: {n}", flush=True)


def top_growth(folder: Path, warm_minutes: float, every_s: float, limit: int) -> None:
    import tracemalloc

    snaps = sorted(folder.glob("*.snap"))
    first_i = min(len(snaps) - 1, int(warm_minutes * 60 / every_s))
    if first_i < 0 or first_i >= len(snaps) - 1:
        print("too few snapshots to compare")
        return
    first = tracemalloc.Snapshot.load(str(snaps[first_i]))
    last = tracemalloc.Snapshot.load(str(snaps[-1]))
    print(f"growth {snaps[first_i].name} -> {snaps[-1].name}, by line:")
    for stat in last.compare_to(first, "lineno")[:limit]:
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d}  {stat.traceback}")
    print("by traceback (largest growth):")
    for stat in last.compare_to(first, "traceback")[:5]:
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d}")
        for line in stat.traceback.format()[-12:]:
            print("     " + line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--warmup-minutes", type=float, default=1)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--sleeper-s", type=float, default=0.5)
    parser.add_argument("--server-s", type=float, default=3.0)
    parser.add_argument("--server-life-s", type=float, default=2.0)
    parser.add_argument("--every-s", type=float, default=30.0)
    parser.add_argument("--tracemalloc", type=Path, default=None)
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        exe = tmp / "llama-server"
        shutil.copy(sys.executable, exe)  # a real process that looks like llama-server
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with (tmp / "daemon.log").open("w") as log:
            daemon = subprocess.Popen(daemon_argv(args, tmp), cwd=ROOT, stderr=log, env=env)
            try:
                churn(args, exe, daemon)
            finally:
                print(f"final: RSS {rss_mib(daemon.pid):.1f} MiB", flush=True)
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(timeout=60)
        print("daemon log tail:", *(tmp / "daemon.log").read_text().splitlines()[-5:], sep="\n  ")
    if args.tracemalloc is not None:
        top_growth(args.tracemalloc, args.warmup_minutes, args.every_s, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
