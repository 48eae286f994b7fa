"""Database growth per day at a 1 s interval: 1 GPU + the host, 20 tracked processes.

Method (results in bench/RESULTS.md):
- Write simulated ticks through the real Store into a real file, with a simulated clock:
  one tick per second, ``--days`` days, ``Store.prune`` every simulated hour with the
  default retention (6 h raw, per-minute rollups for 30 days). Values vary tick to tick
  (so no page compresses better than a real one would); every process lives all along.
- Record the file size (after a WAL checkpoint) at the end of each day: the growth per day
  is the difference between consecutive days once the raw window has filled. Also the
  CPU time of ``Store.write`` per tick.

Run: .venv/bin/python bench/bench_db_growth.py [--days 3] [--procs 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.base import (  # noqa: E402
    CollectorRun,
    DeviceSample,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
)
from monitor.store import rollups  # noqa: E402
from monitor.store.database import Retention, Store  # noqa: E402
from monitor.units import GIB  # noqa: E402

DAY_S = 86_400
GPU = "drm:0000:c5:00.0"


def make_snapshot(ts_ms: int, procs: int, rng: random.Random, gpus: int = 1) -> Snapshot:
    jitter = rng.randrange(1 << 20)
    infos = tuple(
        ProcessInfo(
            1000 + i,
            5000 + i,
            None,
            1,
            1000,
            f"proc{i}",
            (f"/usr/bin/proc{i}", "--serve", f"/models/m{i}.gguf"),
            "llama.cpp" if i < 3 else None,
            ("top",),
        )
        for i in range(procs)
    )
    memory = []
    for i in range(procs):
        pid = 1000 + i
        memory.append(
            ProcessMemory(
                pid,
                "host",
                rss_anon_bytes=GIB + jitter * i,
                rss_file_bytes=2 * GIB + jitter,
                rss_shmem_bytes=jitter,
                swap_bytes=0,
                hwm_bytes=4 * GIB,
                locked_bytes=0,
            )
        )
        if i < 5:
            memory.append(
                ProcessMemory(pid, GPU, vram_bytes=jitter, gtt_bytes=10 * GIB + jitter, cpu_bytes=0)
            )
    extra = tuple(
        DeviceSample(
            f"nvml:GPU-bench-{g}",
            "nvml",
            "nvidia",
            "H100",
            "dedicated",
            80 * GIB,
            40 * GIB + jitter,
            free_bytes=40 * GIB - jitter,
            reserved_bytes=GIB // 2,
            util_pct=rng.random() * 100,
            temp_c=60.0,
            power_w=300.0,
        )
        for g in range(gpus - 1)
    )
    devices = extra + (
        DeviceSample(
            GPU,
            "drm",
            "amd",
            "Strix Halo",
            "unified",
            96 * GIB,
            50 * GIB + jitter,
            free_bytes=46 * GIB - jitter,
            vram_total_bytes=GIB // 2,
            vram_used_bytes=jitter,
            gtt_total_bytes=96 * GIB,
            gtt_used_bytes=50 * GIB + jitter,
            util_pct=rng.random() * 100,
            temp_c=50 + rng.random(),
            power_w=80 + rng.random(),
        ),
        DeviceSample(
            "host",
            "procfs",
            "host",
            "Host RAM",
            "host",
            128 * GIB,
            60 * GIB + jitter,
            free_bytes=10 * GIB,
            available_bytes=68 * GIB - jitter,
            shmem_bytes=GIB,
            unevictable_bytes=0,
            mlocked_bytes=0,
            hugepages_total_bytes=0,
            hugepages_free_bytes=0,
            swap_total_bytes=0,
            swap_free_bytes=0,
        ),
    )
    runs = (
        CollectorRun("drm", ts_ms, 0.001, 0.001, "ok"),
        CollectorRun("procfs", ts_ms, 0.0005, 0.0005, "ok"),
    )
    return Snapshot(ts_ms, devices, infos, tuple(memory), (), (), runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--procs", type=int, default=20)
    parser.add_argument("--gpus", type=int, default=1, help="GPU devices (plus the host)")
    args = parser.parse_args()
    rng = random.Random(42)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "growth.db"
        store = Store.open(path)
        t0 = 1_800_000_000_000 - 1_800_000_000_000 % 3_600_000
        sizes: list[int] = []
        write_cpu: list[float] = []
        wall0 = time.monotonic()
        for second in range(args.days * DAY_S):
            ts = t0 + second * 1000
            snap = make_snapshot(ts, args.procs, rng, args.gpus)
            cpu0 = time.thread_time()
            store.write(snap)
            if second % 97 == 0:
                write_cpu.append(time.thread_time() - cpu0)
            if (second + 1) % 3600 == 0:
                store.prune(ts + 1000, Retention())
            if (second + 1) % DAY_S == 0:
                store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                sizes.append(path.stat().st_size)
                print(
                    f"day {len(sizes)}: {sizes[-1] / 2**20:.1f} MiB "
                    f"({time.monotonic() - wall0:.0f} s wall)",
                    flush=True,
                )
        counts = {
            t: store.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "device_samples",
                "process_samples",
                "device_minutes",
                "process_minutes",
                *rollups.TABLES,
                "collector_runs",
            )
        }
        store.close()
    growth = [b - a for a, b in zip(sizes, sizes[1:], strict=False)]
    print(f"\n{args.procs} processes, {args.gpus} GPU(s) + host, 1 s interval, default retention")
    print(f"size at end of each day (MiB): {[round(s / 2**20, 1) for s in sizes]}")
    print(f"growth per day after day 1 (MiB): {[round(g / 2**20, 2) for g in growth]}")
    print(f"rows at the end: {counts}")
    print(
        f"Store.write CPU per tick: median {statistics.median(write_cpu) * 1000:.2f} ms, "
        f"p90 {sorted(write_cpu)[int(0.9 * len(write_cpu))] * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
