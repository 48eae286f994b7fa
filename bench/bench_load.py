"""Sampling cost as the process count grows: 50 / 300 / 1,000 / 2,000 live processes.

Method (results in bench/RESULTS.md): real sleeping processes are spawned until the box has
about N; the Sampler (all default collectors, real /proc and /sys) runs ``--ticks`` ticks on
a simulated 1 s clock (so the 10 s rescan lands on every 10th tick, as in the daemon); the
CPU per tick (``time.process_time``: every thread,
  as collectors run in worker threads) is reported as median, rescan-tick median and mean, and
the same machine state is read by ``psutil.process_iter(['memory_info', 'cmdline'])`` — the
floor a Python monitor that looks at every process pays — for the ratio.

Run: .venv/bin/python bench/bench_load.py [--counts 50,300,1000,2000] [--ticks 60]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from collectors.base import CollectorOptions, Roots  # noqa: E402
from monitor.daemon.sampler import Sampler  # noqa: E402


def measure(ticks: int) -> tuple[float, float, float]:
    sampler = Sampler(Roots(), CollectorOptions())
    t0 = 1_800_000_000_000
    sampler.sample(t0)
    steady, rescans = [], []
    for i in range(1, ticks + 1):
        c0 = time.process_time()
        sampler.sample(t0 + i * 1000)
        (rescans if i % 10 == 0 else steady).append(time.process_time() - c0)
    sampler.close()
    every = steady + rescans
    return (
        statistics.median(steady) * 1000,
        statistics.median(rescans) * 1000,
        statistics.fmean(every) * 1000,
    )


def floor(rounds: int = 10) -> float:
    out = []
    for _ in range(rounds):
        c0 = time.process_time()
        for p in psutil.process_iter(["memory_info", "cmdline"]):
            _ = p.info
        out.append(time.process_time() - c0)
    return statistics.median(out) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="50,300,1000,2000")
    parser.add_argument("--ticks", type=int, default=60)
    args = parser.parse_args()
    sleepers: list[subprocess.Popen[bytes]] = []
    print(
        "| processes | tick median ms | rescan tick ms | mean ms (% of a core at 1 s) "
        "| psutil floor ms | floor / mean |"
    )
    print("|---|---|---|---|---|---|")
    try:
        for target in (int(x) for x in args.counts.split(",")):
            while len(psutil.pids()) < target:
                sleepers.append(subprocess.Popen(["sleep", "3600"]))
            time.sleep(1.0)
            n = len(psutil.pids())
            med, rescan, mean = measure(args.ticks)
            fl = floor()
            print(
                f"| {n} | {med:.2f} | {rescan:.2f} | {mean:.2f} ({mean / 10:.2f} %) | "
                f"{fl:.1f} | {fl / mean:.1f}x |",
                flush=True,
            )
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()


if __name__ == "__main__":
    main()
