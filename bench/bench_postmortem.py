"""`vramscope postmortem` over a database holding 30 days of history for 20 processes.

Method (results in bench/RESULTS.md): a real database through the store's migrations:
30 days of per-minute rollups (1 device + host, 20 processes), the last 6 hours at 1 s
(raw, as retention keeps them), events over the month (loads, exits) and one OOM kill with
its crash an hour ago. ``monitor.analysis.postmortem.build`` (find the crash, read the 11-minute
window, the kernel record, loads, the cause) is timed cold (fresh connection) ``--runs``
times, plus the rendering of the text and HTML reports.

Run: .venv/bin/python bench/bench_postmortem.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.analysis.postmortem import build  # noqa: E402
from monitor.report.postmortem import render_html, render_text  # noqa: E402
from monitor.store.database import Store  # noqa: E402
from monitor.units import GIB  # noqa: E402

DAY_MS = 86_400_000


def populate(path: Path, now: int, procs: int = 20) -> None:
    store = Store.open(path)
    c = store.db.conn
    with store.db.atomic():
        for dev, kind in (("host", "host"), ("drm:0000:c5:00.0", "unified")):
            c.execute(
                "INSERT INTO devices (id, collector, vendor, name, memory_kind, "
                "total_bytes, first_seen_ms, last_seen_ms) VALUES (?,?,?,?,?,?,?,?)",
                (dev, "bench", "amd", dev, kind, 128 * GIB, now - 30 * DAY_MS, now),
            )
        for i in range(procs):
            c.execute(
                "INSERT INTO processes (pid, start_ticks, comm, argv, engine, "
                "first_seen_ms, last_seen_ms) VALUES (?,?,?,?,?,?,?)",
                (
                    1000 + i,
                    i,
                    f"proc{i}",
                    json.dumps([f"/usr/bin/proc{i}"]),
                    "llama.cpp" if i < 3 else None,
                    now - 30 * DAY_MS,
                    now,
                ),
            )
        start = now - 30 * DAY_MS
        minutes = range(start - start % 60_000, now, 60_000)
        c.executemany(
            "INSERT INTO device_minutes (ts_ms, device_id, samples, used_min_bytes,"
            " used_avg_bytes, used_max_bytes) VALUES (?,?,?,?,?,?)",
            [
                (t, d, 60, GIB, 2 * GIB, 3 * GIB)
                for t in minutes
                for d in ("host", "drm:0000:c5:00.0")
            ],
        )
        c.executemany(
            "INSERT INTO process_minutes (ts_ms, process_id, device_id, samples,"
            " rss_anon_avg_bytes, rss_anon_max_bytes) VALUES (?,?,?,?,?,?)",
            [(t, p, "host", 60, GIB, GIB) for t in minutes for p in range(1, procs + 1)],
        )
        raw = range(now - 6 * 3600_000, now, 1000)
        c.executemany(
            "INSERT INTO device_samples (ts_ms, device_id, used_bytes, "
            "available_bytes) VALUES (?,?,?,?)",
            [(t, d, 2 * GIB, 60 * GIB) for t in raw for d in ("host", "drm:0000:c5:00.0")],
        )
        c.executemany(
            "INSERT INTO process_samples (ts_ms, process_id, device_id, "
            "rss_anon_bytes, rss_file_bytes, rss_shmem_bytes, hwm_bytes) "
            "VALUES (?,?,?,?,?,?,?)",
            [(t, p, "host", GIB, 0, 0, GIB) for t in raw for p in range(1, procs + 1)],
        )
        for day in range(30):
            store._insert_event(
                c, now - day * DAY_MS, "load_started", "info", "proc0[1000]", "load", {"pid": 1000}
            )
    kill = now - 3600_000
    store.add_event(
        "oom_kill",
        "critical",
        "host",
        "Killed process 1000 (proc0)",
        {
            "pid": 1000,
            "comm": "proc0",
            "anon_rss_kb": 1048576,
            "file_rss_kb": 0,
            "shmem_rss_kb": 0,
            "constraint": "CONSTRAINT_NONE",
        },
        ts_ms=kill,
    )
    store.add_event(
        "crash",
        "critical",
        "proc0[1000]",
        "proc0 (pid 1000) killed",
        {"pid": 1000, "how": "killed by the kernel OOM killer"},
        ts_ms=kill,
    )
    store.close()


def month_database(folder: str, *extra) -> tuple[Path, int]:  # noqa: ANN002
    """``populate`` (then each ``extra(path, now)``) into ``folder``/month.db; says its size."""
    db = Path(folder) / "month.db"
    now = int(time.time() * 1000)
    t0 = time.perf_counter()
    populate(db, now)
    for add in extra:
        add(db, now)
    print(
        f"database: {db.stat().st_size / 2**20:.0f} MiB, written in "
        f"{time.perf_counter() - t0:.0f} s"
    )
    return db, now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db, now = month_database(tmp)
        build_ms, render_ms = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            doc = build(db)
            build_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            render_text(doc, 100)
            render_html(doc)
            render_ms.append((time.perf_counter() - t0) * 1000)
        assert doc["victim"]["pid"] == 1000
        print("| step | median ms | max ms |")
        print("|---|---|---|")
        print(
            f"| build (find, window, cause) | {statistics.median(build_ms):.1f} | "
            f"{max(build_ms):.1f} |"
        )
        print(f"| render text + HTML | {statistics.median(render_ms):.1f} | {max(render_ms):.1f} |")


if __name__ == "__main__":
    main()
