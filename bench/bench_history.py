"""History reads over 30 days, this code beside the code before it, on a database whose
rollups the store wrote itself: the TUI's history windows and replay (issue 32).

Method (results in bench/RESULTS.md): a database through the store's migrations (``Store.
open``), 2 devices (host, a GPU) and 20 processes (3 llama-servers on the GPU, 20 on the
host). Raw samples for 30 days, as the daemon writes them (one a minute before the last
6 h to keep the build short, every second in the last 6 h), then ``Store.prune`` half a
``prune_interval_s`` (the daemon's default) before the last tick, as a read between two
prunes finds it on average: the per-minute and history rollups (monitor/store/rollups.py),
``meta.rolled_up_to_ms`` and the 6 h raw cut are the store's own (the bench before issue
32 inserted rollups by hand without ``meta``, so every read ignored them and the 24 h
regression of 81e5928 did not show).

For each window the TUI history screen offers, ``--pairs`` pairs, in alternating order,
each on a fresh read-only connection, CPU time (``time.process_time``):
- new: ``monitor.store.reads`` of this tree (device_peaks + server_peaks, as
  ``StoreSource.history`` asks: rollups beyond 2 h, 239 buckets);
- old: the same two reads of ``--old`` (default ``main``), loaded from git;
- pre: the same of ``81e5928^`` (before the regression), for the record;
then ``StoreSource.history`` whole (new) and ``StoreSource.at`` one hour ago (replay).
Medians, and the median of the per-pair ratios old/new.

Run: .venv/bin/python bench/bench_history.py [--pairs 5] [--old main]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.config import Config  # noqa: E402
from monitor.store.database import Store, open_readonly  # noqa: E402
from monitor.store.retention import Retention  # noqa: E402
from monitor.units import GIB  # noqa: E402
from tui.source import StoreSource  # noqa: E402

DAY_MS, HOUR_MS = 86_400_000, 3_600_000
WINDOWS = {"5 min": 300_000, "1 h": HOUR_MS, "24 h": DAY_MS, "7 d": 7 * DAY_MS, "30 d": 30 * DAY_MS}
GPU = "drm:0000:c5:00.0"
PROCS, ENGINES = 20, 3


def _ticks(now_ms: int) -> list[int]:
    """Once a minute for 30 days, every second in the last 6 h."""
    start, recent = now_ms - 30 * DAY_MS, now_ms - 6 * HOUR_MS
    return [*range(start - start % 60_000, recent, 60_000), *range(recent, now_ms, 1000)]


def populate(path: Path, now_ms: int) -> None:
    """The database of the method above; ``now_ms`` is its last tick."""
    store = Store.open(path)
    c = store.db.conn
    with store.db.atomic():
        for dev, kind in (("host", "host"), (GPU, "unified")):
            c.execute(
                "INSERT INTO devices (id, collector, vendor, name, memory_kind, total_bytes,"
                " first_seen_ms, last_seen_ms) VALUES (?,?,?,?,?,?,?,?)",
                (dev, "bench", "amd", dev, kind, 128 * GIB, now_ms - 30 * DAY_MS, now_ms),
            )
        for i in range(PROCS):
            argv = [f"/usr/bin/proc{i}"] + (["-m", f"/m/model{i}.gguf"] if i < ENGINES else [])
            c.execute(
                "INSERT INTO processes (pid, start_ticks, comm, argv, engine, first_seen_ms,"
                " last_seen_ms) VALUES (?,?,?,?,?,?,?)",
                (1000 + i, i, f"proc{i}", json.dumps(argv), "llama.cpp" if i < ENGINES else None,
                 now_ms - 30 * DAY_MS, now_ms),
            )  # fmt: skip
        for t in _ticks(now_ms + 1000):
            wave = (t // 60_000) % 7
            c.executemany(
                "INSERT INTO device_samples (ts_ms, device_id, used_bytes, available_bytes)"
                " VALUES (?,?,?,?)",
                [(t, d, (2 + wave) * GIB, 60 * GIB) for d in ("host", GPU)],
            )
            c.executemany(
                "INSERT INTO process_samples (ts_ms, process_id, device_id, rss_anon_bytes,"
                " rss_file_bytes, gtt_bytes) VALUES (?,?,?,?,?,?)",
                [(t, p, "host", GIB, 0, None) for p in range(1, PROCS + 1)]
                + [(t, p, GPU, None, None, (p + wave) * GIB) for p in range(1, ENGINES + 1)],
            )
    store.prune(now_ms - int(Config().prune_interval_s * 1000) // 2, Retention())
    store.close()


def reads_of(rev: str) -> ModuleType:
    """``monitor/store/reads.py`` as it was at ``rev``, loaded beside this tree's."""
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:monitor/store/reads.py"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    spec = importlib.util.spec_from_loader(f"reads_{rev.replace('^', '_parent')}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(text, f"{rev}:monitor/store/reads.py", "exec"), module.__dict__)  # noqa: S102
    return module


def cpu_ms(fn: Callable[[], Any]) -> float:
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) * 1000


def peaks(reads: ModuleType, path: Path, since_ms: int, until_ms: int) -> Any:
    """The two queries of ``StoreSource.history``, on a fresh read-only connection."""
    db = open_readonly(path)
    try:
        minutes = until_ms - since_ms > 2 * HOUR_MS
        return (
            reads.device_peaks(db, None, since_ms, until_ms, 239, minutes),
            reads.server_peaks(db, None, since_ms, until_ms, 239, minutes),
        )
    finally:
        db.conn.close()


def whole_history(path: Path, since_ms: int, until_ms: int) -> Any:
    source = StoreSource(path)
    try:
        return source.history(None, since_ms, until_ms)
    finally:
        source.close()


def window_row(versions: dict[str, ModuleType], db: Path, label: str, since: int, now: int,
               pairs: int) -> str:  # fmt: skip
    """One window's line: each version's median CPU, the median ratio old/new per pair."""
    cpu: dict[str, list[float]] = {name: [] for name in versions}
    for i in range(pairs):
        for name in list(versions) if i % 2 == 0 else list(reversed(versions)):
            module = versions[name]
            cpu[name].append(cpu_ms(lambda: peaks(module, db, since, now)))  # noqa: B023
    whole = [cpu_ms(lambda: whole_history(db, since, now)) for _ in range(pairs)]
    series = whole_history(db, since, now)
    assert len(series) == 5, sorted(series)  # 2 devices + 3 models
    ratios = [o / max(n, 1e-3) for o, n in zip(cpu["old"], cpu["new"], strict=True)]
    med = {name: statistics.median(v) for name, v in cpu.items()}
    points = max(len(v) for v in series.values())
    return (
        f"| {label} | {med['new']:.1f} | {med['old']:.1f} | {med['pre']:.1f} | "
        f"{statistics.median(ratios):.2f}x | {statistics.median(whole):.1f} | "
        f"{len(series)} x {points} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--old", default="main")
    args = parser.parse_args()
    import monitor.store.reads as new

    versions = {"new": new, "old": reads_of(args.old), "pre": reads_of("81e5928^")}
    with tempfile.TemporaryDirectory() as tmp:
        db, now = Path(tmp) / "month.db", int(time.time() * 1000)
        t0 = time.perf_counter()
        populate(db, now)
        print(f"database: {db.stat().st_size / 2**20:.0f} MiB, {time.perf_counter() - t0:.0f} s")
        print(f"| window | new ms | {args.old} ms | 81e5928^ ms | {args.old}/new (median of "
              f"{args.pairs} pairs) | StoreSource.history ms | series x points |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for label, width in WINDOWS.items():
            print(window_row(versions, db, label, now - width, now, args.pairs))

        def replay() -> None:
            source = StoreSource(db)
            try:
                frame = source.at(now - HOUR_MS)
                assert abs(frame.ts_ms - (now - HOUR_MS)) <= 1000
            finally:
                source.close()

        times = [cpu_ms(replay) for _ in range(args.pairs)]
        print(f"| replay: the frame one hour ago | {statistics.median(times):.1f} | | | | | |")


if __name__ == "__main__":
    main()
