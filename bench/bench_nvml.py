"""CPU cost of one NVML pass: 2 GPUs x 10 processes each, through the fake driver.

Method (results in bench/RESULTS.md): the fake driver of tests/fakes/nvml_fake.py is
installed at pynvml's function-pointer lookup, so pynvml's wrappers and vramscope's
collector run for real; the driver's work is a few Python lines per call. 10 real sleeping
processes are on both GPUs. ``NvmlCollector.collect`` is timed with ``time.thread_time``
over ``--ticks`` ticks, for the versioned process API (driver >= 550) and the R535
legacy-struct path. The figure includes the fake's own Python time, so it is an upper
bound for the collector's CPU; a real driver's ioctls add kernel time that a fake cannot
show.

Run: .venv/bin/python bench/bench_nvml.py [--ticks 500]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes")]

import nvml_fake  # noqa: E402

from collectors.base import CollectorOptions, Roots, Tick  # noqa: E402
from collectors.nvml import NvmlCollector  # noqa: E402
from monitor.units import MIB  # noqa: E402


def scenario(pids: list[int], legacy: bool) -> dict:
    devices = []
    for g in range(2):
        devices.append(
            {
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": f"GPU-bench-{g}",
                "bus_id": f"00000000:{g + 1:02x}:00.0",
                "memory": {
                    "total": 81559 * MIB,
                    "used": 40000 * MIB,
                    "free": 41000 * MIB,
                    "reserved": 500 * MIB,
                },
                "util": {"gpu": 50, "memory": 20},
                "temp_c": 40,
                "power_mw": 250000,
                "mig": [0, 0],
                "event_types": 0x8,
                "compute": [{"pid": p, "used": (i + 1) * 1000 * MIB} for i, p in enumerate(pids)],
                "graphics": [],
            }
        )
    data = {"driver": "550.54.15", "devices": devices}
    if legacy:
        data.update(
            missing_symbols=["nvmlDeviceGetRunningProcessDetailList"],
            process_struct_bytes=32,
            driver="535.43.02",
        )
    return data


def run(pids: list[int], legacy: bool, ticks: int) -> list[float]:
    lib = nvml_fake.install(scenario(pids, legacy))
    collector = NvmlCollector(Roots(), CollectorOptions(), lib=lib)
    tick0 = Tick(Roots(), 0)
    pid_list = tick0.pids()
    reading = collector.collect(tick0)
    assert len(reading.memory) == 20, len(reading.memory)
    out = []
    for i in range(1, ticks + 1):
        tick = Tick(Roots(), i * 1000, _pids=pid_list)  # the /proc listing is shared, not NVML's
        t0 = time.thread_time()
        collector.collect(tick)
        out.append(time.thread_time() - t0)
    collector.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=500)
    args = parser.parse_args()
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(10)]
    try:
        pids = [p.pid for p in sleepers]
        print("| process API | median ms | p90 ms | max ms |")
        print("|---|---|---|---|")
        for legacy in (False, True):
            ms = sorted(x * 1000 for x in run(pids, legacy, args.ticks))
            label = (
                "R535 legacy v3 struct (own two-call loop)"
                if legacy
                else "nvmlDeviceGetRunningProcessDetailList"
            )
            print(
                f"| {label} | {statistics.median(ms):.3f} | {ms[int(0.9 * len(ms))]:.3f} | "
                f"{ms[-1]:.3f} |"
            )
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
