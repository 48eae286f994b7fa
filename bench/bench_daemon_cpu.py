"""The daemon's own cost over time: CPU as % of a core at 1 s and 0.25 s, and its RSS,
open file descriptors and threads from start to end (a short soak).

Method (results in bench/RESULTS.md): two real `vramscope daemon` processes (1 s and 0.25 s,
separate databases, HTTP off) run side by side for ``--minutes``; utime+stime come from
/proc/PID/stat at 30 s (after warm-up) and at the end; RSS, fds and threads likewise.
Processes come and go meanwhile (a sleeper spawned and killed every 2 s), so tracking,
exits and inserts are exercised.

Run: .venv/bin/python bench/bench_daemon_cpu.py [--minutes 10]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HZ = os.sysconf("SC_CLK_TCK")


def probe(pid: int) -> dict[str, float]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    status = {
        line.split(":")[0]: line.split(":")[1].strip()
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    }
    return {
        "cpu_s": (int(fields[11]) + int(fields[12])) / HZ,
        "rss_kib": float(status["VmRSS"].split()[0]),
        "threads": float(status["Threads"]),
        "fds": float(len(os.listdir(f"/proc/{pid}/fd"))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "c.toml"
        cfg.write_text("[http]\nenabled = false\n")
        daemons = {
            iv: subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "monitor",
                    "daemon",
                    "--db",
                    f"{tmp}/{iv}.db",
                    "--interval",
                    iv,
                    "--config",
                    str(cfg),
                ],
                cwd=ROOT,
                stderr=subprocess.DEVNULL,
            )
            for iv in ("1", "0.25")
        }
        try:
            time.sleep(30)
            start = {iv: (time.monotonic(), probe(p.pid)) for iv, p in daemons.items()}
            deadline = time.monotonic() + args.minutes * 60 - 30
            while time.monotonic() < deadline:
                churn = subprocess.Popen(["sleep", "60"])
                time.sleep(2)
                churn.kill()
                churn.wait()
            print("| interval | CPU % of a core | RSS start -> end MiB | fds | threads |")
            print("|---|---|---|---|---|")
            for iv, p in daemons.items():
                t0, a = start[iv]
                b = probe(p.pid)
                pct = 100 * (b["cpu_s"] - a["cpu_s"]) / (time.monotonic() - t0)
                print(
                    f"| {iv} s | {pct:.2f} | {a['rss_kib'] / 1024:.1f} -> "
                    f"{b['rss_kib'] / 1024:.1f} | {a['fds']:.0f} -> {b['fds']:.0f} | "
                    f"{a['threads']:.0f} -> {b['threads']:.0f} |",
                    flush=True,
                )
        finally:
            for p in daemons.values():
                p.send_signal(signal.SIGTERM)
            for p in daemons.values():
                p.wait(timeout=30)


if __name__ == "__main__":
    main()
