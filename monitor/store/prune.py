"""Retention's writer: per-minute rollups, then the rows retention no longer keeps.

Run by :meth:`monitor.store.database.Store.prune` in one transaction. Raw samples from
``KEEP_BEFORE_MS`` before to ``KEEP_AFTER_MS`` after a crash or OOM kill are never deleted
by raw retention: they are ``vramscope postmortem``'s evidence. Events are bounded by
``events_max`` with the kernel records, exits, crashes and alerts evicted last
(monitor/store/retention.py says which kinds).
"""

from __future__ import annotations

import sqlite3

from monitor.store import rollups
from monitor.store.retention import KEPT_KINDS, LOG_DERIVED_KINDS, Retention

MINUTE_MS = 60_000
LATE_MS = 3_600_000  # how late a tick may be written and still reach its minute's rollup


def prune(conn: sqlite3.Connection, now_ms: int, retention: Retention) -> dict[str, int]:
    """Roll raw samples up per minute, then drop what retention no longer keeps (the
    caller holds the transaction).

    Only complete minutes are rolled up. Each prune recomputes the minutes from
    ``LATE_MS`` before the previous end (``meta.rolled_up_to_ms``), and raw rows are
    never deleted inside that window: a tick written late (kept in memory while the
    database was locked) still lands in its minute's rollup, and a recomputed minute
    always sees all of its raw rows.
    """
    counts: dict[str, int] = {}
    row = conn.execute("SELECT value FROM meta WHERE key='rolled_up_to_ms'").fetchone()
    previous_end = int(row[0]) if row else 0
    start = max(0, previous_end - LATE_MS)
    end = now_ms - now_ms % MINUTE_MS
    if end > start:
        counts["device_minutes"] = conn.execute(_DEVICE_ROLLUP, (start, end)).rowcount
        counts["process_minutes"] = conn.execute(_PROCESS_ROLLUP, (start, end)).rowcount
        counts.update(rollups.roll_up(conn, start, end))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('rolled_up_to_ms', ?)", (str(end),))
    raw_cut = min(end - LATE_MS, now_ms - int(retention.raw_hours * 3600_000))
    raw_cut -= raw_cut % MINUTE_MS  # whole minutes only
    minute_cut = now_ms - int(retention.minute_days * 86400_000)
    runs_cut = now_ms - int(retention.runs_hours * 3600_000)
    for table, cut in (
        ("device_samples", raw_cut),
        ("process_samples", raw_cut),
        ("hidden_samples", raw_cut),
        ("process_cgroups", raw_cut),
        ("device_minutes", minute_cut),
        ("process_minutes", minute_cut),
        *((table, minute_cut) for table in rollups.TABLES),
        ("collector_runs", runs_cut),
        ("slot_usage", minute_cut),
    ):
        keep = (
            _KEEP_AROUND_CRASHES.format(table=table)
            if table in ("device_samples", "process_samples", "process_cgroups")
            else ""
        )
        counts[f"deleted_{table}"] = conn.execute(
            f"DELETE FROM {table} WHERE ts_ms < ?{keep}", (cut,)
        ).rowcount
    counts["deleted_events"] = _prune_events(conn, now_ms, retention)
    # A process row outlives its samples by nothing: once its last sample (raw,
    # minute, or kept around a crash) is gone and it was last seen before the
    # minute retention, it goes too.
    counts["deleted_processes"] = conn.execute(
        "DELETE FROM processes WHERE last_seen_ms < ? AND id NOT IN"
        " (SELECT process_id FROM process_samples"
        " UNION SELECT process_id FROM process_minutes)",
        (minute_cut,),
    ).rowcount
    counts["deleted_estimates"] = conn.execute(
        "DELETE FROM estimates WHERE process_id NOT IN (SELECT id FROM processes)"
    ).rowcount
    return counts


def _prune_events(conn: sqlite3.Connection, now_ms: int, retention: Retention) -> int:
    """Events older than ``events_days``; then, while more than ``events_max`` are
    left, the oldest log-derived ones (a flooded engine log), then the oldest of the
    rest that are not kept (``retention.is_kept``: kernel records, exits, crashes,
    alerts), and only when those alone are too many, the oldest of them (issue 28
    item 4: a log flood evicted every kernel OOM kill)."""
    cut = now_ms - int(retention.events_days * 86400_000)
    deleted = conn.execute("DELETE FROM events WHERE ts_ms < ?", (cut,)).rowcount
    kept = ", ".join(f"'{k}'" for k in sorted(KEPT_KINDS))
    logged = ", ".join(f"'{k}'" for k in sorted(LOG_DERIVED_KINDS))
    for where in (
        f"kind IN ({logged})",
        f"kind NOT IN ({kept}) AND kind != 'process_exit' AND kind NOT LIKE 'alert^_%' ESCAPE '^'",
        "1",
    ):
        (count,) = conn.execute("SELECT count(*) FROM events").fetchone()
        if count <= retention.events_max:
            break
        deleted += conn.execute(
            f"DELETE FROM events WHERE id IN (SELECT id FROM events WHERE {where}"
            " ORDER BY id LIMIT ?)",
            (count - retention.events_max,),
        ).rowcount
    return deleted


# Full-resolution samples from 10 minutes before to 1 minute after a crash or OOM kill are
# evidence for `vramscope postmortem`: raw retention never deletes them.
KEEP_BEFORE_MS, KEEP_AFTER_MS = 600_000, 60_000
_KEEP_AROUND_CRASHES = (
    " AND NOT EXISTS (SELECT 1 FROM events e WHERE e.kind IN ('crash', 'oom_kill', 'oomd_kill')"
    " AND {table}.ts_ms BETWEEN e.ts_ms - "
    + str(KEEP_BEFORE_MS)
    + " AND e.ts_ms + "
    + str(KEEP_AFTER_MS)
    + ")"
)
_DEVICE_ROLLUP = """
INSERT OR REPLACE INTO device_minutes
SELECT ts_ms - ts_ms % 60000, device_id, count(*),
       min(used_bytes), CAST(avg(used_bytes) AS INTEGER), max(used_bytes),
       CAST(avg(vram_used_bytes) AS INTEGER), max(vram_used_bytes),
       CAST(avg(gtt_used_bytes) AS INTEGER), max(gtt_used_bytes),
       min(available_bytes), CAST(avg(available_bytes) AS INTEGER),
       max(shmem_bytes), max(mlocked_bytes), min(swap_free_bytes),
       avg(util_pct), max(util_pct), max(temp_c), avg(power_w), max(power_w)
FROM device_samples WHERE ts_ms >= ? AND ts_ms < ?
GROUP BY ts_ms - ts_ms % 60000, device_id
"""
_PROCESS_ROLLUP = """
INSERT OR REPLACE INTO process_minutes
SELECT ts_ms - ts_ms % 60000, process_id, device_id, count(*),
       CAST(avg(vram_bytes) AS INTEGER), max(vram_bytes),
       CAST(avg(gtt_bytes) AS INTEGER), max(gtt_bytes),
       min(vram_bytes), min(gtt_bytes), max(cpu_bytes),
       CAST(avg(rss_anon_bytes) AS INTEGER), max(rss_anon_bytes),
       CAST(avg(rss_file_bytes) AS INTEGER), max(rss_file_bytes), max(rss_shmem_bytes),
       max(swap_bytes), max(hwm_bytes), max(locked_bytes), max(pss_bytes)
FROM process_samples WHERE ts_ms >= ? AND ts_ms < ?
GROUP BY ts_ms - ts_ms % 60000, process_id, device_id
"""
