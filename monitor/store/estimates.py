"""The ``estimates`` table (migration m007): the daemon's assessment of each server, written
once per launch, read by every non-live view (the TUI's database source, ``--at``).

Rows hold the document of monitor/analysis/assess.py ``to_json`` split into columns, and
are read back as that document: the store stores; monitor/analysis/stored.py parses them
into assessments. A row whose JSON no longer reads (hand-edited, a newer writer) is
skipped here, one that no longer parses there, never shown as a guess.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

log = logging.getLogger(__name__)

AssessmentDoc = dict[str, Any]
"""A ``vramscope.assessment/1`` document (monitor/analysis/assess.py ``to_json``)."""


def insert(conn: sqlite3.Connection, process_id: int, doc: AssessmentDoc) -> None:
    est, launch = doc["estimate"], doc["launch"]
    conn.execute(
        "INSERT INTO estimates (process_id, ts_ms, launch_key, estimator_version, engine,"
        " model, total_bytes, launch, estimate, findings, error)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            process_id,
            doc["ts_ms"],
            doc["launch_key"],
            doc["estimator_version"],
            launch["engine"],
            launch["model"],
            est["total_bytes"] if est is not None else None,
            json.dumps(launch),
            json.dumps(est) if est is not None else None,
            json.dumps(doc["findings"]),
            doc["error"],
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


def _document(row: tuple[Any, ...]) -> AssessmentDoc | None:
    ts, key, version, launch, estimate, findings, error, pid, start_ticks = row
    try:
        return {
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
    except (ValueError, TypeError, RecursionError) as exc:
        log.debug("estimates row of pid %s skipped: %s", pid, exc)
        return None


def stored(
    conn: sqlite3.Connection, process_id: int, key: str, version: int
) -> AssessmentDoc | None:
    """The newest assessment of this process for this launch by this estimator version
    (a restarted daemon takes it up instead of reading the model again)."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM estimates e JOIN processes p ON p.id = e.process_id"
        " WHERE e.process_id = ? AND e.launch_key = ? AND e.estimator_version = ?"
        " ORDER BY e.id DESC LIMIT 1",
        (process_id, key, version),
    ).fetchone()
    return _document(row) if row else None


def at(conn: Any, ts_ms: int) -> dict[tuple[int, int], AssessmentDoc]:
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
        doc = _document(row)
        if doc is not None:
            out[(doc["pid"], doc["start_ticks"])] = doc
    return out


def has_table(conn: Any) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'estimates'"
        ).fetchone()
        is not None
    )
