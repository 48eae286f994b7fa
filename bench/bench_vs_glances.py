"""vramscope's daemon beside glances, sampling the same box at the same time.

Method (results in bench/RESULTS.md): `glances --stdout mem.used,processcount.total -t 1`
(glances' stdout mode: it still refreshes every plugin each second, processes included)
and `vramscope daemon --interval 1` (HTTP off) run side by side for ``--seconds``; each
one's utime+stime from /proc/PID/stat after a 20 s warm-up and at the end gives its CPU as
a percentage of a core. glances comes from ``--glances`` (a separate venv: it is not a
dependency of this project: `python3 -m venv /tmp/gl && /tmp/gl/bin/pip install glances`).
The ratio is what travels between machines.

Run: .venv/bin/python bench/bench_vs_glances.py --glances /tmp/gl/bin/glances [--seconds 120]
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


def cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glances", required=True)
    parser.add_argument("--seconds", type=float, default=120)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "c.toml"
        cfg.write_text("[http]\nenabled = false\n")
        procs = {
            "vramscope daemon (1 s)": subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "monitor",
                    "daemon",
                    "--db",
                    f"{tmp}/v.db",
                    "--interval",
                    "1",
                    "--config",
                    str(cfg),
                ],
                cwd=ROOT,
                stderr=subprocess.DEVNULL,
            ),
            "glances --stdout (1 s)": subprocess.Popen(
                [args.glances, "--stdout", "mem.used,processcount.total", "-t", "1"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
        }
        try:
            time.sleep(20)
            start = {k: (time.monotonic(), cpu_s(p.pid)) for k, p in procs.items()}
            time.sleep(args.seconds)
            pct = {}
            for k, p in procs.items():
                t0, c0 = start[k]
                pct[k] = 100 * (cpu_s(p.pid) - c0) / (time.monotonic() - t0)
        finally:
            for p in procs.values():
                p.send_signal(signal.SIGTERM)
            for p in procs.values():
                p.wait(timeout=30)
    print(
        f"| sampler over {args.seconds:.0f} s, {len(os.listdir('/proc'))} /proc entries "
        "| CPU % of a core |"
    )
    print("|---|---|")
    for k, v in pct.items():
        print(f"| {k} | {v:.2f} |")
    ours, theirs = pct["vramscope daemon (1 s)"], pct["glances --stdout (1 s)"]
    print(f"\nglances / vramscope: {theirs / ours:.1f}x")


if __name__ == "__main__":
    main()
