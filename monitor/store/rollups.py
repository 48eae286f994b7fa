"""The history screen's own rollups, kept beside the per-minute ones (migration m011,
issue 32): what a long window of the TUI's history reads instead of every process's
per-minute row.

- ``server_minutes``: each inference server's measured total per minute (the sum of each
  part's per-minute maximum, VRAM + GTT + RssAnon + RssFile, monitor/analysis/measured.py;
  a minute where a GPU listed it without its memory is unknown and has no row), from
  ``process_minutes``: 3 rows a minute for 3 servers where ``process_minutes`` holds
  every tracked process on every device;
- ``device_tens`` and ``server_tens``: the peak of each 10 minutes of ``device_minutes``
  and ``server_minutes``, for windows whose buckets are 10 minutes or wider (40 h and
  longer: the history screen's 7 and 30 days).

:func:`roll_up` recomputes them over the span the per-minute rollup just recomputed
(``Store.prune``), whole ten-minute blocks, and moves ``meta.history_rolled_up_to_ms``;
a database without that key (before m011's backfill, or written by hand) is read from the
per-minute rollups alone (monitor/store/reads.py).
"""

from __future__ import annotations

import sqlite3

TEN_MS = 600_000
HISTORY_KEY = "history_rolled_up_to_ms"
TABLES = ("server_minutes", "device_tens", "server_tens")

CREATE = """
CREATE TABLE server_minutes (
    ts_ms INTEGER NOT NULL, process_id INTEGER NOT NULL, used_max_bytes INTEGER NOT NULL,
    PRIMARY KEY (ts_ms, process_id)
) WITHOUT ROWID;
CREATE TABLE device_tens (
    ts_ms INTEGER NOT NULL, device_id TEXT NOT NULL, used_max_bytes INTEGER,
    PRIMARY KEY (ts_ms, device_id)
) WITHOUT ROWID;
CREATE TABLE server_tens (
    ts_ms INTEGER NOT NULL, process_id INTEGER NOT NULL, used_max_bytes INTEGER NOT NULL,
    PRIMARY KEY (ts_ms, process_id)
) WITHOUT ROWID
"""

_SERVER_MINUTES = """
INSERT OR REPLACE INTO server_minutes
SELECT ts_ms, process_id, sum(coalesce(vram_max_bytes, 0) + coalesce(gtt_max_bytes, 0)
       + coalesce(rss_anon_max_bytes, 0) + coalesce(rss_file_max_bytes, 0))
FROM process_minutes WHERE ts_ms >= ? AND ts_ms < ?
  AND process_id IN (SELECT id FROM processes WHERE engine IS NOT NULL)
GROUP BY ts_ms, process_id
HAVING max(device_id != 'host' AND vram_max_bytes IS NULL AND gtt_max_bytes IS NULL) = 0
"""
_DEVICE_TENS = """
INSERT OR REPLACE INTO device_tens
SELECT ts_ms - ts_ms % 600000, device_id, max(used_max_bytes)
FROM device_minutes WHERE ts_ms >= ? AND ts_ms < ?
GROUP BY ts_ms - ts_ms % 600000, device_id
"""
_SERVER_TENS = """
INSERT OR REPLACE INTO server_tens
SELECT ts_ms - ts_ms % 600000, process_id, max(used_max_bytes)
FROM server_minutes WHERE ts_ms >= ? AND ts_ms < ?
GROUP BY ts_ms - ts_ms % 600000, process_id
"""


def roll_up(conn: sqlite3.Connection, start_ms: int, end_ms: int) -> dict[str, int]:
    """Recompute the history rollups from the per-minute ones from ``start_ms`` (rounded
    down to ten minutes) to ``end_ms`` (the per-minute rollups' end, exclusive); the last
    ten minutes may be partial and are recomputed by the next call. Rows written."""
    start = start_ms - start_ms % TEN_MS
    counts = {
        "server_minutes": conn.execute(_SERVER_MINUTES, (start, end_ms)).rowcount,
        "device_tens": conn.execute(_DEVICE_TENS, (start, end_ms)).rowcount,
        "server_tens": conn.execute(_SERVER_TENS, (start, end_ms)).rowcount,
    }
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (HISTORY_KEY, str(end_ms)))
    return counts


def history_rolled_up_to_ms(db: object) -> int:
    """Where the history rollups end (0: none written, read the per-minute ones)."""
    try:
        row = db.execute(  # type: ignore[attr-defined]
            "SELECT value FROM meta WHERE key = ?", (HISTORY_KEY,)
        ).fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(row[0]) if row else 0
