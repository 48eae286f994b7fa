"""Every read query of the database but a whole tick's (monitor/store/moment.py), one
named function each, returning typed rows.

Each function takes an open connection (:func:`~monitor.store.database.open_readonly`'s,
or the writer's own ``Store.db``) and runs one query; SQLite's errors pass through
unchanged, and :func:`reading` turns them into one :class:`StoreError` line for a reader
that shows them (the TUI). The schema is monitor/store/migrations.py; the writer is
:class:`~monitor.store.database.Store`. Nothing outside monitor/store/ holds SQL
(tests/test_sql_location.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.store.database import StoreError
from monitor.store.rollups import TEN_MS, history_rolled_up_to_ms


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """A failed read (a locked, damaged or half-migrated file) as one StoreError line."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None


def _argv(text: str | None) -> tuple[str, ...]:
    argv = json.loads(text or "[]")
    return tuple(str(a) for a in argv) if isinstance(argv, list) else ()


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One row of ``events``; ``data`` is its JSON object ({} when none was stored)."""

    id: int
    ts_ms: int
    kind: str
    severity: str
    subject: str | None
    message: str
    data: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """The event as ``events --json``, ``/api/v1/events`` and the post-mortem show it."""
        return {
            "id": self.id,
            "ts_ms": self.ts_ms,
            "kind": self.kind,
            "severity": self.severity,
            "subject": self.subject,
            "message": self.message,
            "data": self.data,
        }


def _events(db: Any, where: str, params: Sequence[Any]) -> list[StoredEvent]:
    rows = db.execute(
        f"SELECT id, ts_ms, kind, severity, subject, message, data FROM events WHERE {where}",
        tuple(params),
    ).fetchall()
    return [
        StoredEvent(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]) if r[6] else {})
        for r in rows
    ]


def device_names(db: Any) -> list[tuple[str, str | None]]:
    """Every device the database has seen, as ``(id, name)`` (the ``devices`` table)."""
    return [(r[0], r[1]) for r in db.execute("SELECT id, name FROM devices")]


def events_of_kinds(db: Any, kinds: Sequence[str]) -> list[StoredEvent]:
    """Every event of these kinds, oldest first."""
    marks = ",".join("?" for _ in kinds)
    return _events(db, f"kind IN ({marks}) ORDER BY ts_ms", kinds)


def events_between(db: Any, start_ms: int, end_ms: int) -> list[StoredEvent]:
    """The events from ``start_ms`` to ``end_ms`` (both included), oldest first."""
    return _events(db, "ts_ms BETWEEN ? AND ? ORDER BY ts_ms", (start_ms, end_ms))


def events_since(
    db: Any, since_ms: int, kinds: Sequence[str] = (), limit: int | None = None
) -> list[StoredEvent]:
    """Events from ``since_ms`` in time order, at most ``limit``: the limit is SQL's, read
    along the ``events_ts`` index, so a long history is never loaded whole."""
    where, params = "ts_ms >= ?", list[Any]([since_ms])
    if kinds:
        where += f" AND kind IN ({','.join('?' for _ in kinds)})"
        params += list(kinds)
    where += " ORDER BY ts_ms, id"
    if limit is not None:
        where += " LIMIT ?"
        params.append(limit)
    return _events(db, where, params)


def last_daemon_mark(db: Any) -> str | None:
    """The kind of the daemon's last ``daemon_started`` / ``daemon_stopped`` event."""
    rows = db.execute(
        "SELECT kind FROM events WHERE kind IN ('daemon_started', 'daemon_stopped')"
        " AND subject = 'daemon' ORDER BY id DESC LIMIT 1"
    ).fetchall()
    return rows[0][0] if rows else None


def daemon_last_write(db: Any) -> tuple[int | None, float | None]:
    """(the latest tick written or daemon start, epoch ms; the daemon's interval_s from its
    last ``daemon_started`` event), None where unknown: ``doctor`` tells a daemon that
    writes nothing from one that is only between ticks."""
    (tick_ms,) = db.execute("SELECT MAX(ts_ms) FROM collector_runs").fetchone()
    row = db.execute(
        "SELECT ts_ms, json_extract(data, '$.interval_s') FROM events"
        " WHERE kind = 'daemon_started' AND subject = 'daemon' ORDER BY id DESC LIMIT 1"
    ).fetchone()
    start_ms, interval_s = (row[0], row[1]) if row else (None, None)
    known = [t for t in (tick_ms, start_ms) if isinstance(t, int)]
    interval = float(interval_s) if isinstance(interval_s, int | float) else None
    return (max(known) if known else None), interval


# --------------------------------------------------------------------------- ticks


def sample_span(db: Any) -> tuple[int | None, int | None]:
    """(first, last) full-resolution tick, epoch ms; (None, None) when there is none."""
    first, last = db.execute("SELECT min(ts_ms), max(ts_ms) FROM device_samples").fetchone()
    return first, last


def record_span(db: Any) -> tuple[int | None, int | None]:
    """(first, last) moment the database records anything: a tick or an event."""
    first, last = db.execute(
        "SELECT min(t), max(t) FROM (SELECT min(ts_ms) AS t FROM device_samples"
        " UNION ALL SELECT max(ts_ms) FROM device_samples UNION ALL"
        " SELECT min(ts_ms) FROM events UNION ALL SELECT max(ts_ms) FROM events)"
    ).fetchone()
    return first, last


def latest_tick(db: Any) -> int | None:
    row = db.execute("SELECT max(ts_ms) FROM device_samples").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def tick_at_or_before(db: Any, ts_ms: int) -> int | None:
    row = db.execute("SELECT max(ts_ms) FROM device_samples WHERE ts_ms <= ?", (ts_ms,)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def ticks_between(db: Any, since_ms: int, until_ms: int) -> list[int]:
    rows = db.execute(
        "SELECT DISTINCT ts_ms FROM device_samples WHERE ts_ms BETWEEN ? AND ? ORDER BY ts_ms",
        (since_ms, until_ms),
    ).fetchall()
    return [int(r[0]) for r in rows]


# --------------------------------------------------------------------------- series


@dataclass(frozen=True, slots=True)
class DevicePoint:
    """One device's use at one tick, named from ``devices`` (its static total when the
    tick has none)."""

    ts_ms: int
    device_id: str
    name: str
    used_bytes: int | None
    total_bytes: int | None


def device_points(db: Any, start_ms: int, end_ms: int) -> list[DevicePoint]:
    """Every device sample from ``start_ms`` to ``end_ms``, oldest first."""
    names = {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, name, total_bytes FROM devices")}
    out = []
    for ts, device_id, used, total in db.execute(
        "SELECT ts_ms, device_id, used_bytes, total_bytes FROM device_samples"
        " WHERE ts_ms BETWEEN ? AND ? ORDER BY ts_ms",
        (start_ms, end_ms),
    ):
        name, static_total = names.get(device_id, (device_id, None))
        out.append(DevicePoint(ts, device_id, name, used, total or static_total))
    return out


@dataclass(frozen=True, slots=True)
class ProcessPoint:
    """One tracked process's memory on one device at one tick, with its ``processes`` row
    (``process_id`` tells two lives of one pid apart)."""

    ts_ms: int
    device_id: str
    process_id: int
    pid: int
    comm: str
    argv: tuple[str, ...]
    engine: str | None
    vram_bytes: int | None
    gtt_bytes: int | None
    rss_anon_bytes: int | None
    rss_file_bytes: int | None
    rss_shmem_bytes: int | None
    hwm_bytes: int | None
    started_at_ms: int | None
    exited_ms: int | None


def process_points(db: Any, start_ms: int, end_ms: int) -> list[ProcessPoint]:
    """Every process sample from ``start_ms`` to ``end_ms``, oldest first."""
    rows = db.execute(
        "SELECT s.ts_ms, s.device_id, p.id, p.pid, p.comm, p.argv, p.engine,"
        " s.vram_bytes, s.gtt_bytes, s.rss_anon_bytes, s.rss_file_bytes, s.rss_shmem_bytes,"
        " s.hwm_bytes, p.started_at_ms, p.exited_ms FROM process_samples s"
        " JOIN processes p ON p.id = s.process_id WHERE s.ts_ms BETWEEN ? AND ?"
        " ORDER BY s.ts_ms",
        (start_ms, end_ms),
    )
    return [
        ProcessPoint(
            ts_ms=r[0],
            device_id=r[1],
            process_id=r[2],
            pid=r[3],
            comm=r[4],
            argv=_argv(r[5]),
            engine=r[6],
            vram_bytes=r[7],
            gtt_bytes=r[8],
            rss_anon_bytes=r[9],
            rss_file_bytes=r[10],
            rss_shmem_bytes=r[11],
            hwm_bytes=r[12],
            started_at_ms=r[13],
            exited_ms=r[14],
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """A ``processes`` row: one life of one pid."""

    pid: int
    comm: str
    argv: tuple[str, ...]
    engine: str | None
    started_at_ms: int | None
    exited_ms: int | None


_PROCESS = "SELECT pid, comm, argv, engine, started_at_ms, exited_ms FROM processes"


def _record(row: Any) -> ProcessRecord | None:
    return None if row is None else ProcessRecord(row[0], row[1], _argv(row[2]), *row[3:])


def last_process(db: Any, pid: int) -> ProcessRecord | None:
    """The latest life of ``pid`` the database knows."""
    return _record(db.execute(f"{_PROCESS} WHERE pid = ? ORDER BY id DESC", (pid,)).fetchone())


def process_seen_by(db: Any, pid: int, ts_ms: int) -> ProcessRecord | None:
    """The latest life of ``pid`` first seen at or before ``ts_ms``."""
    return _record(
        db.execute(
            f"{_PROCESS} WHERE pid = ? AND first_seen_ms <= ? ORDER BY id DESC", (pid, ts_ms)
        ).fetchone()
    )


@dataclass(frozen=True, slots=True)
class Peak:
    """The largest value of one series in one time bucket, and when it was."""

    ts_ms: int
    used_bytes: int


def rolled_up_to_ms(db: Any) -> int:
    """Where the per-minute rollups end (``meta.rolled_up_to_ms``; 0 before the first
    prune): raw samples from there on are not in them yet (the daemon rolls up every
    ``prune_interval_s``, 10 minutes by default)."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key='rolled_up_to_ms'").fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(row[0]) if row else 0


def _tiers(
    db: Any, since_ms: int, until_ms: int, minutes: bool, width_ms: int, history: bool
) -> tuple[list[tuple[str, int, int]], bool]:
    """([(tier, first_ms, last_ms)], whether the history rollups are read): the parts a
    read of ``since_ms``..``until_ms`` covers, oldest first, both ends included. With
    ``minutes``: ``tens`` (the 10-minute history rollups, monitor/store/rollups.py, for
    buckets of 10 minutes or more) up to their last whole block, ``minutes`` up to where
    the rollups end (``meta.rolled_up_to_ms``), ``raw`` only from there on. ``history``:
    the caller can read the history rollups, used only where they end where the minutes
    do (the same prune wrote both). Each part is one ``BETWEEN`` on the tables' leading
    ``ts_ms`` key: a second lower bound (``ts_ms BETWEEN since AND until AND ts_ms >=
    cut``) let SQLite range over every raw sample since ``since`` (issue 32)."""
    if not minutes:
        return [("raw", since_ms, until_ms)], False
    cut = rolled_up_to_ms(db)
    history = history and cut > 0 and history_rolled_up_to_ms(db) == cut
    tens_end = cut - cut % TEN_MS if history and width_ms >= TEN_MS else 0
    parts = [
        ("tens", since_ms, min(until_ms, tens_end - 1)),
        ("minutes", max(since_ms, tens_end), min(until_ms, cut - 1)),
        ("raw", max(since_ms, cut), until_ms),
    ]
    return [(tier, a, b) for tier, a, b in parts if a <= b], history


def device_peaks(
    db: Any, device_id: str | None, since_ms: int, until_ms: int, buckets: int, minutes: bool
) -> dict[str, list[Peak]]:
    """Used memory per device, the window cut into ``buckets`` and each keeping its peak,
    in SQL (a bare column beside ``max()`` comes from the max row: SQLite's documented
    rule); ``minutes``: from the per-minute rollups up to where they end, and the raw
    samples after that (the last minutes are not rolled up yet: without them a long window
    missed its newest peak and showed a stale "now")."""
    width = max(1, (until_ms - since_ms) // buckets + 1)
    where, args = "ts_ms BETWEEN ? AND ?", list[Any]()
    if device_id is not None:
        where += " AND device_id = ?"
        args.append(device_id)
    tiers, _ = _tiers(db, since_ms, until_ms, minutes, width, True)
    parts, source_args = [], list[Any]()
    for tier, first, last in tiers:
        table, col = _DEVICE_TIERS[tier]
        parts.append(f"SELECT device_id, {col} AS used, ts_ms FROM {table}")
        source_args += [first, last, *args]
    if not parts:
        return {}
    source = " UNION ALL ".join(f"{part} WHERE {where}" for part in parts)
    out: dict[str, list[Peak]] = {}
    for dev, used, ts in db.execute(
        f"SELECT device_id, max(used), ts_ms FROM ({source}) WHERE used IS NOT NULL"
        " GROUP BY device_id, (ts_ms - ?) / ? ORDER BY ts_ms",
        (*source_args, since_ms, width),
    ).fetchall():
        out.setdefault(dev, []).append(Peak(int(ts), int(used)))
    return out


_DEVICE_TIERS = {
    "tens": ("device_tens", "used_max_bytes"),
    "minutes": ("device_minutes", "used_max_bytes"),
    "raw": ("device_samples", "used_bytes"),
}


def last_tick_ms(db: Any, until_ms: int) -> int | None:
    """The newest tick with device samples at or before ``until_ms`` (a window's "now")."""
    row = db.execute(
        "SELECT max(ts_ms) FROM device_samples WHERE ts_ms <= ?", (until_ms,)
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


@dataclass(frozen=True, slots=True)
class ServerPeak:
    """An inference server's largest measured total in one time bucket."""

    ts_ms: int
    used_bytes: int
    pid: int
    argv: tuple[str, ...]
    comm: str


_RAW_PARTS = ("vram_bytes", "gtt_bytes", "rss_anon_bytes", "rss_file_bytes")
_MINUTE_PARTS = ("vram_max_bytes", "gtt_max_bytes", "rss_anon_max_bytes", "rss_file_max_bytes")


def _server_totals(table: str, parts: tuple[str, ...], where: str) -> str:
    """Each server's measured total per timestamp of ``table`` (unknown ticks left out)."""
    vram, gtt, anon, file = parts
    return (
        f"SELECT ts_ms AS ts, process_id, sum(coalesce({vram}, 0) + coalesce({gtt}, 0)"
        f"  + coalesce({anon}, 0) + coalesce({file}, 0)) AS used"
        f" FROM {table} WHERE {where}"
        "  AND process_id IN (SELECT id FROM processes WHERE engine IS NOT NULL)"
        f" GROUP BY ts_ms, process_id"
        f" HAVING max(device_id != 'host' AND {vram} IS NULL AND {gtt} IS NULL) = 0"
    )


def server_peaks(
    db: Any, device_id: str | None, since_ms: int, until_ms: int, buckets: int, minutes: bool
) -> list[ServerPeak]:
    """Each inference server's measured total (monitor/analysis/measured.py: VRAM+GTT +
    RssAnon + RssFile; per minute, the sum of each part's maximum), bucketed like
    :func:`device_peaks` (rollups, then the raw samples not rolled up yet), oldest first.
    A tick where a GPU lists it without its memory is unknown and left out, never
    counted as 0."""
    width = max(1, (until_ms - since_ms) // buckets + 1)
    where, args = "ts_ms BETWEEN ? AND ?", list[Any]()
    if device_id is not None:
        where += " AND device_id = ?"
        args.append(device_id)
    tiers, history = _tiers(db, since_ms, until_ms, minutes, width, device_id is None)
    parts, source_args = [], list[Any]()
    for tier, first, last in tiers:
        if tier == "raw":
            parts.append(_server_totals("process_samples", _RAW_PARTS, where))
        elif history:  # per server already (monitor/store/rollups.py): no device filter
            table = "server_tens" if tier == "tens" else "server_minutes"
            parts.append(
                f"SELECT ts_ms AS ts, process_id, used_max_bytes AS used FROM {table}"
                " WHERE ts_ms BETWEEN ? AND ?"
            )
            source_args += [first, last]
            continue
        else:
            parts.append(_server_totals("process_minutes", _MINUTE_PARTS, where))
        source_args += [first, last, *args]
    if not parts:
        return []
    source = " UNION ALL ".join(parts)
    rows = db.execute(
        "SELECT max(t.used), t.ts, p.pid, p.argv, p.comm FROM ("
        f"{source}"
        ") t JOIN processes p ON p.id = t.process_id"
        " GROUP BY t.process_id, (t.ts - ?) / ? ORDER BY t.ts",
        (*source_args, since_ms, width),
    ).fetchall()
    return [
        ServerPeak(int(ts), int(peak), pid, _argv(argv), comm) for peak, ts, pid, argv, comm in rows
    ]


# --------------------------------------------------------------------------- slot usage


@dataclass(frozen=True, slots=True)
class SlotUse:
    """One llama-server slot as one ``/slots`` poll saw it."""

    ts_ms: int
    slot_id: int
    tokens: int
    busy: bool
    n_ctx: int | None


def slot_usage(db: Any, model_path: str, window_ms: int) -> list[SlotUse]:
    """The recorded ``/slots`` polls of one model over the last ``window_ms`` the table
    holds, oldest first."""
    rows = db.execute(
        "SELECT ts_ms, slot_id, tokens, busy, n_ctx FROM slot_usage WHERE model = ?"
        " AND ts_ms >= (SELECT max(ts_ms) FROM slot_usage) - ? ORDER BY ts_ms",
        (model_path, window_ms),
    ).fetchall()
    return [SlotUse(ts, slot, tokens, bool(busy), n_ctx) for ts, slot, tokens, busy, n_ctx in rows]


@dataclass(frozen=True, slots=True)
class CgroupSample:
    """A tracked process's binding memory cgroup as last sampled (migration m010)."""

    ts_ms: int
    process_id: int
    pid: int
    comm: str
    argv: tuple[str, ...]
    path: str
    max_bytes: int | None
    current_bytes: int | None


def last_cgroups(db: Any, start_ms: int, at_ms: int) -> list[CgroupSample]:
    """Per process sampled from ``start_ms`` to ``at_ms``, its last sampled cgroup; empty
    for a database from before m010."""
    if "process_cgroups" not in db.table_names():
        return []
    rows = db.execute(
        "SELECT c.ts_ms, c.process_id, p.pid, p.comm, p.argv, c.path, c.max_bytes,"
        " c.current_bytes FROM process_cgroups c JOIN processes p ON p.id = c.process_id"
        " WHERE c.ts_ms BETWEEN ? AND ? AND c.ts_ms = (SELECT max(ts_ms) FROM"
        " process_cgroups l WHERE l.process_id = c.process_id AND l.ts_ms BETWEEN ? AND ?)"
        " ORDER BY c.process_id",
        (start_ms, at_ms, start_ms, at_ms),
    )
    return [CgroupSample(r[0], r[1], r[2], r[3], _argv(r[4]), *r[5:]) for r in rows]


def process_owner(db: Any, pid: int, ts_ms: int) -> tuple[int | None, str | None]:
    """(uid, cwd) of the latest life of ``pid`` first seen by ``ts_ms``."""
    row = db.execute(
        "SELECT uid, cwd FROM processes WHERE pid = ? AND first_seen_ms <= ? ORDER BY id DESC",
        (pid, ts_ms),
    ).fetchone()
    return (None, None) if row is None else (row[0], row[1])
