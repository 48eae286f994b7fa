"""The ``estimates`` table (migration m007): the daemon's assessment of each server, written
once per launch, read by every non-live view (the TUI's database source, ``--at``).

Rows hold the JSON of monitor/analysis/assess.py ``to_json`` split into columns; a row that
no longer parses (hand-edited, a newer writer) is skipped, never shown as a guess.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

from monitor.analysis.assess import Assessment, from_json, to_json

log = logging.getLogger(__name__)


def insert(conn: sqlite3.Connection, process_id: int, a: Assessment) -> None:
    doc = to_json(a)
    est = a.estimate
    conn.execute(
        "INSERT INTO estimates (process_id, ts_ms, launch_key, estimator_version, engine,"
        " model, total_bytes, launch, estimate, findings, error)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            process_id,
            a.ts_ms,
            a.launch_key,
            a.estimator_version,
            a.launch.engine,
            a.launch.model,
            est.total_bytes() if est is not None else None,
            json.dumps(doc["launch"]),
            json.dumps(doc["estimate"]) if est is not None else None,
            json.dumps(doc["findings"]),
            a.error,
        ),
    )


def process_row(
    conn: sqlite3.Connection, pid: int, start_ticks: int, started_at_ms: int | None
) -> int | None:
    """The ``processes.id`` of a live process, or None while its first tick is unwritten."""
    row = conn.execute(
        "SELECT id FROM processes WHERE pid = ? AND start_ticks = ? AND started_at_ms IS ?"
        " ORDER BY id DESC LIMIT 1",
        (pid, start_ticks, started_at_ms),
    ).fetchone()
    return int(row[0]) if row else None


_COLUMNS = (
    "e.ts_ms, e.launch_key, e.estimator_version, e.launch, e.estimate, e.findings,"
    " e.error, p.pid, p.start_ticks"
)


def _assessment(row: tuple[Any, ...]) -> Assessment | None:
    ts, key, version, launch, estimate, findings, error, pid, start_ticks = row
    try:
        return from_json(
            {
                "schema": "vramscope.assessment/1",
                "pid": pid,
                "start_ticks": start_ticks,
                "ts_ms": ts,
                "launch_key": key,
                "estimator_version": version,
                "launch": json.loads(launch),
                "findings": json.loads(findings or "[]"),
                "estimate": json.loads(estimate) if estimate else None,
                "error": error,
            }
        )
    except (ValueError, TypeError, RecursionError) as exc:
        log.debug("estimates row of pid %s skipped: %s", pid, exc)
        return None


def stored(conn: sqlite3.Connection, process_id: int, key: str, version: int) -> Assessment | None:
    """The newest assessment of this process for this launch by this estimator version
    (a restarted daemon takes it up instead of reading the model again)."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM estimates e JOIN processes p ON p.id = e.process_id"
        " WHERE e.process_id = ? AND e.launch_key = ? AND e.estimator_version = ?"
        " ORDER BY e.id DESC LIMIT 1",
        (process_id, key, version),
    ).fetchone()
    return _assessment(row) if row else None


def at(conn: Any, ts_ms: int) -> dict[tuple[int, int], Assessment]:
    """Each process's newest assessment made at or before ``ts_ms``, by (pid,
    start_ticks); {} for a database written before the table existed."""
    try:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM estimates e JOIN processes p ON p.id = e.process_id"
            " WHERE e.id IN (SELECT max(id) FROM estimates WHERE ts_ms <= ?"
            " GROUP BY process_id)",
            (ts_ms,),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return {}
        raise
    out = {}
    for row in rows:
        a = _assessment(row)
        if a is not None:
            out[(a.pid, a.start_ticks)] = a
    return out


def has_table(conn: Any) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'estimates'"
        ).fetchone()
        is not None
    )
