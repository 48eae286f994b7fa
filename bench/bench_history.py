"""History queries over a database holding 30 days: the TUI's history windows and replay.

Method (results in bench/RESULTS.md): the 30-day database of ``bench_postmortem.py`` (per-
minute rollups for 30 days, the last 6 h at 1 s, 2 devices, 20 processes), plus the GPU
memory of its 3 llama.cpp processes on the GPU device (rollups for 30 days, raw for 6 h), so
the per-model series have rows to read. Timed, cold (a fresh read-only connection each run)
``--runs`` times:
- ``StoreSource.history`` for each window the TUI history screen offers and for 30 days
  (devices and models; raw samples up to 2 h, rollups beyond, downsampled to 240 points);
- ``StoreSource.at`` one hour ago: replay (``vramscope tui --at``) and ``predict --at``
  read the last raw tick before a time, then build the whole frame (estimates included).

Run: .venv/bin/python bench/bench_history.py [--runs 10]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_postmortem import DAY_MS, GIB, month_database  # noqa: E402

from tui.source import StoreSource  # noqa: E402

WINDOWS = {
    "5 min": 300_000,
    "1 h": 3600_000,
    "24 h": DAY_MS,
    "7 d": 7 * DAY_MS,
    "30 d": 30 * DAY_MS,
}
GPU = "drm:0000:c5:00.0"


def add_gpu_rows(path: Path, now: int) -> None:
    """GPU memory of the three llama.cpp processes (ids 1-3), as the daemon would keep it."""
    con = sqlite3.connect(path)
    with con:
        start = now - 30 * DAY_MS
        minutes = range(start - start % 60_000, now, 60_000)
        con.executemany(
            "INSERT INTO process_minutes (ts_ms, process_id, device_id, samples,"
            " gtt_avg_bytes, gtt_max_bytes) VALUES (?,?,?,?,?,?)",
            [(t, p, GPU, 60, p * GIB, p * GIB) for t in minutes for p in (1, 2, 3)],
        )
        con.executemany(
            "INSERT INTO process_samples (ts_ms, process_id, device_id,"
            " gtt_bytes) VALUES (?,?,?,?)",
            [(t, p, GPU, p * GIB) for t in range(now - 6 * 3600_000, now, 1000) for p in (1, 2, 3)],
        )
    con.close()


def timed(fn, runs: int) -> tuple[float, float, object]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), max(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db, now = month_database(tmp, add_gpu_rows)
        print("| query | median ms | max ms | series x points |")
        print("|---|---|---|---|")

        def cold_history(width: int):
            source = StoreSource(db)
            try:
                return source.history(None, now - width, now)
            finally:
                source.close()

        for label, width in WINDOWS.items():
            med, worst, series = timed(lambda w=width: cold_history(w), args.runs)
            assert series and len(series) == 5, sorted(series)  # 2 devices + 3 models
            points = max(len(v) for v in series.values())
            print(f"| history, last {label} | {med:.1f} | {worst:.1f} | {len(series)} x {points} |")

        def cold_at():
            source = StoreSource(db)
            try:
                return source.at(now - 3600_000)
            finally:
                source.close()

        med, worst, frame = timed(cold_at, args.runs)
        assert abs(frame.ts_ms - (now - 3600_000)) <= 1000
        print(
            f"| replay: the frame one hour ago | {med:.1f} | {worst:.1f} | "
            f"{len(frame.picture.devices)} devices |"
        )


if __name__ == "__main__":
    main()
