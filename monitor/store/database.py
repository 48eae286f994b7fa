"""SQLite storage: one transaction per tick, retention with per-minute downsampling.

The schema lives in monitor/store/migrations.py. The file is created 0640 and runs in WAL mode
with ``synchronous=NORMAL``: a killed daemon loses at most the tick in flight (WAL
survives process death; only power loss can drop the last commits). Readers (``status``,
the TUI) open it read-only and never block the writer.

:func:`classify` tells what a path holds without touching it; every reader goes through
:func:`open_readonly`, which names the problem in one line (no file, an empty file,
another application's SQLite file, not SQLite at all). The daemon creates a missing or
0-byte file, and refuses (never modifies, never renames) a file that is not vramscope's.
Only a vramscope database that fails ``PRAGMA quick_check`` is moved aside as
``<name>.corrupt-<UTC time>`` (with its -wal/-shm) and a new database is started; the move
is logged, recorded as a ``database_recovered`` event in the new one, and listed by
``vramscope doctor``. So is a file the running daemon found corrupt (its periodic check,
monitor/store/integrity.py, left ``<name>.corrupt-found`` naming that very file), even when
its header or schema is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from collectors.base import DeviceSample, ExitedProcess, ProcessInfo, ProcessMemory, Snapshot
from monitor.errors import DatabaseError
from monitor.store import integrity
from monitor.store.migrations import DEVICE_SAMPLE_FIELDS, PROCESS_SAMPLE_FIELDS, migrations
from monitor.store.prune import KEEP_AFTER_MS as KEEP_AFTER_MS  # the post-mortem's window
from monitor.store.prune import KEEP_BEFORE_MS as KEEP_BEFORE_MS
from monitor.store.prune import LATE_MS as LATE_MS
from monitor.store.prune import MINUTE_MS as MINUTE_MS
from monitor.store.prune import prune as prune_tables
from monitor.store.records import ExitJudge, ProcessRow
from monitor.store.retention import Retention

log = logging.getLogger(__name__)

_DEVICE_STATIC = (
    "collector", "vendor", "name", "memory_kind", "pci_bus_id", "total_bytes",
    "vram_total_bytes", "vis_vram_total_bytes", "gtt_total_bytes",
    "hugepages_total_bytes", "swap_total_bytes", "mig_enabled",
)  # fmt: skip


_PKey = tuple[int, int, int | None]  # (pid, start_ticks, started_at_ms)


class StoreError(DatabaseError):
    """The database cannot be used (unwritable directory, locked by a writer, ...)."""


@dataclass(frozen=True, slots=True)
class WriterHealth:
    """The daemon's writer as ``/healthz``, ``/metrics`` and ``doctor`` show it: whether its
    last write attempt succeeded, why not, since when (epoch ms), the ticks waiting in
    memory and those dropped because the backlog was full."""

    write_ok: bool
    error: str | None
    since_ms: int | None
    backlog_ticks: int
    dropped_ticks: int
    integrity_ok: bool | None = None  # the last PRAGMA quick_check (monitor/store/integrity.py)
    integrity_problem: str | None = None
    integrity_checked_ms: int | None = None


def content_key(
    ts_ms: int,
    kind: str,
    severity: str,
    subject: str | None,
    message: str,
    data: dict[str, Any] | None,
) -> str:
    """An event written from a tick, named by its content: the same event written twice
    (a backlog replayed again after a kill -9 during its replay, issue 28) has the same
    key, and the events table keeps one (m009)."""
    doc = [ts_ms, kind, severity, subject, message, data or {}]
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _create_private(path: Path) -> None:
    """Create the file 0640 before SQLite does (it would use 0644 minus the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o640)
        os.close(fd)
        os.chmod(path, 0o640)


def _connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        uri = f"file:{path}?mode=ro"
        return sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=5.0)
    return sqlite3.connect(path, check_same_thread=False, timeout=5.0)


_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}


def _healthy(conn: sqlite3.Connection, path: Path) -> str | None:
    """``None`` when the file is a sound SQLite database, else why it is corrupt.

    Only corruption counts: a locked or unreadable database raises StoreError instead, so
    that a healthy history is never moved aside because another process held a lock.
    """
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", None) in _CORRUPT:
            return str(exc)
        raise StoreError(f"cannot read the database {path}: {exc}") from None
    if rows != [("ok",)]:
        return "; ".join(str(r[0]) for r in rows[:3])
    return None


_INT64 = (-(2**63), 2**63 - 1)


def _sql_value(value: Any) -> Any:
    """SQLite integers are signed 64-bit: a wrapped u64 counter is unknown, not a crash."""
    if type(value) is int and not _INT64[0] <= value <= _INT64[1]:
        return None
    return value


def move_aside(path: Path) -> Path:
    """Rename a bad database (and its -wal/-shm) out of the way; return the new name."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            src.rename(Path(f"{target}{suffix}"))
    return target


def _move_flagged(path: Path) -> tuple[Path, str] | None:
    """The file a running daemon found corrupt (``<db>.corrupt-found`` names its device
    and inode) moved aside before anything reads it: (where to, why). Its header or
    schema may be gone, so it is not classified first; a marker naming another file is
    stale and removed."""
    if not integrity.marker_path(path).exists():
        return None
    problem = integrity.read_marker(path)
    integrity.clear_marker(path)
    if problem is None:
        return None
    moved = move_aside(path)
    log.error(
        "database %s was found corrupt while the daemon ran (%s); moved it to %s and "
        "started a new one",
        path,
        problem,
        moved,
    )
    return moved, problem


SQLITE_HEADER = b"SQLite format 3\x00"
# vramscope's own bytes: its schema text, or a row of its migration table (the record's
# text fields lie side by side: migration_set then name, "vramscope" + "m001_initial").
_MARKERS = re.compile(rb"CREATE TABLE device_samples|vramscopem\d{3}_")
_MARKER_SCAN_BYTES = 4 << 20


def _has_our_markers(path: Path) -> bool:
    """Tells our own damaged database from someone else's when SQLite cannot read the
    schema: only a file that carries vramscope's bytes is ever moved aside."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_MARKER_SCAN_BYTES)
    except OSError:
        return False
    return _MARKERS.search(head) is not None


def classify(path: Path) -> tuple[str, str]:
    """What is at ``path``, without creating or changing anything: ``(kind, detail)``.

    kind is ``missing``, ``empty`` (0 bytes, or SQLite with no tables), ``vramscope``
    (vramscope's migration rows are there), ``foreign`` (SQLite tables of another
    application), ``not_sqlite``, ``damaged`` (a SQLite header, schema unreadable),
    ``unreadable`` (permissions, a lock), or ``directory``.
    """
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return "missing", ""
    except OSError as exc:
        return "unreadable", exc.strerror or str(exc)
    if path.is_dir():
        return "directory", ""
    if st.st_size == 0:
        return "empty", "an empty file"
    try:
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        return "unreadable", exc.strerror or str(exc)
    if header != SQLITE_HEADER:
        return "not_sqlite", "not a SQLite file"
    try:
        conn = _connect(path, readonly=True)
    except sqlite3.Error as exc:
        return "unreadable", str(exc)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        if not names:
            return "empty", "a SQLite file with no tables"
        if migrations.migrations_table not in names:
            return "foreign", "no vramscope tables; it has " + ", ".join(sorted(names)[:5])
        sets = {
            r[0]
            for r in conn.execute(
                f"SELECT DISTINCT migration_set FROM {migrations.migrations_table}"
            )
        }
        if migrations.name not in sets:
            return "foreign", "no vramscope tables; its migrations are " + ", ".join(
                sorted(str(s) for s in sets)[:5]
            )
        return "vramscope", ""
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", None) in _CORRUPT:
            return "damaged", str(exc)
        return "unreadable", str(exc)
    finally:
        conn.close()


def open_readonly(path: Path) -> Database:
    """Open an existing vramscope database for reading (every reader: ``events``,
    ``postmortem``, ``--at``, the TUI); never creates or changes the file. Raises
    StoreError with one line naming the problem."""
    kind, detail = classify(path)
    if kind == "missing":
        raise StoreError(
            f"no database at {path}: start `vramscope daemon` first (or pass --db FILE)"
        )
    if kind == "directory":
        raise StoreError(f"the database path {path} is a directory")
    if kind in ("empty", "not_sqlite", "foreign"):
        raise StoreError(f"{path} is not a vramscope database ({detail})")
    if kind in ("damaged", "unreadable"):
        raise StoreError(f"{path} is not a readable vramscope database: {detail}")
    conn = _connect(path, readonly=True)
    return Database(conn)


class Store:
    """The daemon's writer. Not thread-safe: the daemon has exactly one worker thread."""

    def __init__(
        self,
        db: Database,
        path: Path | None,
        recovered_from: str | None = None,
        exit_judge: ExitJudge | None = None,
    ):
        self.db = db
        # what to record about each exit (monitor/analysis/exits_judged.py, handed in by
        # the daemon): the store decides nothing; without one it cannot write exits
        self.exit_judge = exit_judge
        self.path = path
        self.recovered_from = recovered_from
        # (pid, start_ticks, started_at_ms) -> processes.id. started_at_ms (boot time +
        # start ticks) tells apart two processes with one pid and start tick in two boots.
        self._process_ids: dict[tuple[int, int, int | None], int] = {}
        # processes seen on one tick so far (issue 32 item 3): no ``processes`` row until
        # their second tick (then written with that first tick's samples), so a churn of
        # short-lived ones costs one ``meta.short_lived_processes`` count each, not a row.
        # key -> (first tick's ts_ms, info, that tick's memory rows)
        self._pending: dict[_PKey, tuple[int, ProcessInfo, list[ProcessMemory]]] = {}
        self._writes = 0  # the first write defers nothing: a restarted daemon's processes
        self.short_lived = 0  # processes dropped unwritten by this Store
        self._devices: dict[str, tuple[Any, ...]] = {}
        self._wal_ino: int | None = None  # the -wal file we write (see wal_lost)

    @classmethod
    def open(cls, path: Path, exit_judge: ExitJudge | None = None) -> Store:
        flagged = _move_flagged(path)
        kind, detail = classify(path)
        if kind == "directory":
            raise StoreError(f"the database path {path} is a directory")
        if kind in ("not_sqlite", "foreign"):
            raise StoreError(
                f"{path} is not a vramscope database ({detail}); refusing to "
                "touch it: pass --db a new path"
            )
        if kind == "damaged" and not _has_our_markers(path):
            raise StoreError(
                f"{path} is a damaged SQLite file that is not recognisably "
                f"vramscope's ({detail}); refusing to touch it"
            )
        if kind == "unreadable":
            raise StoreError(f"cannot read the database {path}: {detail}")
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise StoreError(
                f"the database {path} is not writable by this user (uid "
                f"{os.getuid()}): make it writable, or pass --db a writable path"
            )
        try:
            _create_private(path)
            conn = _connect(path)
        except (OSError, sqlite3.Error) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else exc
            raise StoreError(f"cannot create the database {path}: {reason}") from exc
        recovered_from = None
        moved, problem = flagged if flagged is not None else (None, None)
        if moved is not None:
            recovered_from = f"{moved} ({problem})"
        try:
            problem = problem if moved is not None else _healthy(conn, path)
        except StoreError:
            conn.close()
            raise
        if moved is None and problem is not None:
            conn.close()
            problem = integrity.one_line(problem)
            moved = move_aside(path)
            log.error(
                "database %s is corrupt (%s); moved it to %s and started a new one",
                path,
                problem,
                moved,
            )
            recovered_from = f"{moved} ({problem})"
            _create_private(path)
            conn = _connect(path)
        db = Database(conn)
        try:
            migrations.apply(db)
            db.enable_wal()
            db.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot prepare the database {path}: {exc}") from exc
        store = cls(db, path, recovered_from, exit_judge)
        store.note_wal()
        if moved is not None:
            store.add_event(
                "database_recovered",
                "warning",
                str(path),
                f"the previous database was corrupt and was moved to {moved}",
                {"moved_to": str(moved), "problem": problem},
            )
        return store

    def close(self) -> None:
        self.db.close()

    def wal_lost(self) -> bool:
        """True when our -wal file is gone from its path or is another file: someone
        deleted it while we run. Its committed transactions live on in the file SQLite
        still holds open, unseen by any new reader and lost at the next start."""
        if self.path is None:
            return False
        try:
            st = os.stat(f"{self.path}-wal")
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if self._wal_ino is None:
            self._wal_ino = st.st_ino
        return st.st_ino != self._wal_ino

    def note_wal(self) -> None:
        """Open a read so SQLite creates the -wal now (switching to WAL mode does not), and
        remember which file it is: a fresh database's first tick must not read as a
        deleted -wal."""
        with contextlib.suppress(sqlite3.Error, OSError):
            self.db.execute("SELECT count(*) FROM sqlite_master").fetchall()
            self.wal_lost()

    def recover_wal(self) -> None:
        """Checkpoint the lost -wal (through SQLite's open descriptor of it) into the
        database, then reopen: SQLite starts a new -wal at the path."""
        assert self.path is not None
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.close()
        conn = _connect(self.path)
        self.db = Database(conn)
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._wal_ino = None
        self.note_wal()

    def set_busy_timeout(self, seconds: float) -> None:
        """How long a write waits for another writer's lock before it fails (and the tick
        waits in memory): short, so a locked database never stalls sampling."""
        self.db.conn.execute(f"PRAGMA busy_timeout = {max(0, int(seconds * 1000))}")

    # -- writing ------------------------------------------------------------------

    def write(self, snap: Snapshot) -> None:
        """Everything of one tick in one transaction."""
        conn = self.db.conn
        saved = (dict(self._process_ids), dict(self._devices), dict(self._pending))
        counts = (self._writes, self.short_lived)
        try:
            self._write(conn, snap)
        except BaseException:
            # the transaction was rolled back
            self._process_ids, self._devices, self._pending = saved
            self._writes, self.short_lived = counts
            raise
        self._writes += 1

    def _write(self, conn: sqlite3.Connection, snap: Snapshot) -> None:
        with self.db.atomic():
            self._write_devices(conn, snap)
            ids, waiting = self._process_rows(conn, snap)
            rows = self._pending_samples(ids)
            for m in snap.memory:
                pid_key = ids.get(m.pid)
                if pid_key is None:
                    if m.pid in waiting:
                        waiting[m.pid].append(m)
                    continue  # a GPU client beyond max_tracked or gone: counted in the device
                rows.append(
                    (
                        snap.ts_ms,
                        pid_key,
                        m.device_id,
                        *(_sql_value(getattr(m, f)) for f in PROCESS_SAMPLE_FIELDS),
                    )
                )
            conn.executemany(_PROCESS_SAMPLE_SQL, rows)
            conn.executemany(
                "INSERT OR REPLACE INTO process_cgroups VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        snap.ts_ms,
                        ids[c.pid],
                        c.cgroup.path,
                        _sql_value(c.cgroup.memory_max_bytes),
                        _sql_value(c.cgroup.memory_current_bytes),
                        _sql_value(c.cgroup.reclaimable_bytes),
                    )
                    for c in snap.cgroups
                    if c.pid in ids
                ],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO hidden_samples VALUES (?, ?, ?, ?, ?)",
                [
                    (snap.ts_ms, h.pid, h.device_id, _sql_value(h.used_bytes), h.reason)
                    for h in snap.hidden
                    if h.device_id is not None
                ],
            )
            for ev in snap.events:
                self._insert_event(
                    conn,
                    ev.ts_ms,
                    ev.kind,
                    ev.severity,
                    ev.device_id,
                    ev.message,
                    dict(ev.data),
                    keyed=True,
                )
            for gone in snap.exited:
                self._record_exit(conn, snap.ts_ms, gone)
            conn.executemany(
                "INSERT OR REPLACE INTO collector_runs VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (r.ts_ms, r.collector, r.duration_s, r.cpu_s, r.status, r.error)
                    for r in snap.runs
                ],
            )

    def _write_devices(self, conn: sqlite3.Connection, snap: Snapshot) -> None:
        for d in snap.devices:
            static = tuple(_sql_value(getattr(d, f)) for f in _DEVICE_STATIC)
            if self._devices.get(d.device_id) != static:
                self._upsert_device(conn, d, static, snap.ts_ms)
                self._devices[d.device_id] = static
        conn.executemany(
            _DEVICE_SAMPLE_SQL,
            [
                (
                    snap.ts_ms,
                    d.device_id,
                    *(_sql_value(getattr(d, f)) for f in DEVICE_SAMPLE_FIELDS),
                )
                for d in snap.devices
            ],
        )

    def _upsert_device(
        self, conn: sqlite3.Connection, d: DeviceSample, static: tuple[Any, ...], ts_ms: int
    ) -> None:
        cols = ", ".join(_DEVICE_STATIC)
        marks = ", ".join("?" for _ in _DEVICE_STATIC)
        updates = ", ".join(f"{c}=excluded.{c}" for c in _DEVICE_STATIC)
        conn.execute(
            f"INSERT INTO devices (id, {cols}, first_seen_ms, last_seen_ms) "
            f"VALUES (?, {marks}, ?, ?) ON CONFLICT(id) DO UPDATE SET {updates}, "
            "last_seen_ms=excluded.last_seen_ms",
            (d.device_id, *static, ts_ms, ts_ms),
        )

    def _process_rows(
        self, conn: sqlite3.Connection, snap: Snapshot
    ) -> tuple[dict[int, int], dict[int, list[ProcessMemory]]]:
        """pid -> processes.id for this tick, inserting processes seen on their second
        tick (or at once: GPU holders, alerting exits, processes a warning or critical event
        of this tick names, the Store's first write); and pid ->
        the memory-row list of each process seen for the first time (filled by the caller,
        written if it is seen again)."""
        ts_ms = snap.ts_ms
        holders = {m.pid for m in snap.memory if m.device_id != "host"}
        holders |= {g.pid for g in snap.exited if self._exit_judge().keeps_record(g)}
        holders |= {  # a warning or critical event names it (oom_predicted at its first tick)
            pid
            for e in snap.events
            if e.severity != "info" and isinstance(pid := e.data.get("pid"), int)
        }
        ids: dict[int, int] = {}
        waiting: dict[int, list[ProcessMemory]] = {}
        seen: set[_PKey] = set()
        for p in snap.processes:
            key = (p.pid, p.start_ticks, p.started_at_ms)
            seen.add(key)
            row_id = self._process_ids.get(key)
            if row_id is None:
                first = self._pending.get(key)
                if first is None and self._writes and p.pid not in holders:
                    waiting[p.pid] = []
                    self._pending[key] = (ts_ms, p, waiting[p.pid])
                    continue
                row_id = self._process_id(conn, p, first[0] if first else ts_ms)
                self._process_ids[key] = row_id
            ids[p.pid] = row_id
        for g in snap.exited:  # a crash or OOM kill keeps its record, however short
            for key in [k for k in self._pending if k[:2] == (g.pid, g.start_ticks)]:
                if key not in seen and self._exit_judge().keeps_record(g):
                    first_ts, info, _ = self._pending[key]
                    self._process_ids[key] = self._process_id(conn, info, first_ts)
        gone = [
            k
            for k, (t, _, _) in self._pending.items()
            if k not in seen and t < ts_ms and k not in self._process_ids
        ]
        if gone:
            for k in gone:
                del self._pending[k]
            self.short_lived += len(gone)
            conn.execute(
                "INSERT INTO meta VALUES ('short_lived_processes', ?) ON CONFLICT(key)"
                " DO UPDATE SET value = CAST(value AS INTEGER) + excluded.value",
                (str(len(gone)),),
            )
        conn.executemany(
            "UPDATE processes SET last_seen_ms = ? WHERE id = ?",
            [(ts_ms, row_id) for row_id in ids.values()],
        )
        return ids, waiting

    def _pending_samples(self, ids: Mapping[int, int]) -> list[tuple[Any, ...]]:
        """The first tick's memory rows of the processes written this tick for the first
        time after a tick of waiting."""
        rows = []
        for key in [k for k in self._pending if k in self._process_ids]:
            ts_ms, _, memory = self._pending.pop(key)
            row_id = self._process_ids[key]
            for m in memory:
                rows.append(
                    (
                        ts_ms,
                        row_id,
                        m.device_id,
                        *(_sql_value(getattr(m, f)) for f in PROCESS_SAMPLE_FIELDS),
                    )
                )
        return rows

    def _process_id(self, conn: sqlite3.Connection, p: ProcessInfo, ts_ms: int) -> int:
        conn.execute(
            "INSERT INTO processes (pid, start_ticks, started_at_ms, ppid, uid, comm, argv,"
            " engine, reasons, first_seen_ms, last_seen_ms, cwd)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT(pid, start_ticks, started_at_ms) DO UPDATE SET"
            " engine=excluded.engine, reasons=excluded.reasons, exited_ms=NULL",
            (
                p.pid,
                p.start_ticks,
                p.started_at_ms,
                p.ppid,
                p.uid,
                p.comm,
                json.dumps(list(p.argv)),
                p.engine,
                ",".join(p.reasons),
                ts_ms,
                ts_ms,
                p.cwd,
            ),
        )
        row = conn.execute(
            "SELECT id FROM processes WHERE pid = ? AND start_ticks = ?"
            " AND started_at_ms IS ? ORDER BY id DESC",
            (p.pid, p.start_ticks, p.started_at_ms),
        ).fetchone()
        return int(row[0])

    def _record_exit(self, conn: sqlite3.Connection, ts_ms: int, gone: ExitedProcess) -> None:
        """Mark the process row exited with its status and cause, and write the events the
        exit judge (monitor/store/records.py) decided, with or without a row."""
        pid, start_ticks = gone.pid, gone.start_ticks
        for key in [k for k in self._process_ids if k[:2] == (pid, start_ticks)]:
            del self._process_ids[key]
        found = conn.execute(
            "SELECT id, comm, engine, argv, first_seen_ms FROM processes WHERE pid = ?"
            " AND start_ticks = ? AND exited_ms IS NULL ORDER BY id DESC",
            (pid, start_ticks),
        ).fetchone()
        row = None if found is None else ProcessRow(*found)
        record = self._exit_judge().judge(gone, row, ts_ms)
        if row is not None:
            core = None if gone.core_dumped is None else int(gone.core_dumped)
            conn.execute(
                "UPDATE processes SET exited_ms = ?, exit_code = ?, exit_signal = ?,"
                " core_dumped = ?, exit_cause = ?, exit_source = ? WHERE id = ?",
                (
                    ts_ms,
                    gone.exit_code,
                    gone.exit_signal,
                    core,
                    record.cause,
                    gone.exit_source,
                    row.id,
                ),
            )
        for ev in record.events:
            self._insert_event(
                conn, ev.ts_ms, ev.kind, ev.severity, ev.subject, ev.message, ev.data, keyed=True
            )

    def _exit_judge(self) -> ExitJudge:
        if self.exit_judge is None:
            raise RuntimeError("this Store was opened without an exit judge: it cannot write exits")
        return self.exit_judge

    def add_event(
        self,
        kind: str,
        severity: str,
        subject: str | None,
        message: str,
        data: dict[str, Any] | None = None,
        ts_ms: int | None = None,
    ) -> None:
        with self.db.atomic():
            self._insert_event(
                self.db.conn,
                ts_ms or int(time.time() * 1000),
                kind,
                severity,
                subject,
                message,
                data,
            )

    @staticmethod
    def _insert_event(
        conn: sqlite3.Connection,
        ts_ms: int,
        kind: str,
        severity: str,
        subject: str | None,
        message: str,
        data: dict[str, Any] | None,
        keyed: bool = False,
    ) -> None:
        """One event row. ``keyed``: an event of a tick (its own, or an exit it records),
        stored under its :func:`content_key` and not added again when that key is."""
        key = content_key(ts_ms, kind, severity, subject, message, data) if keyed else None
        conn.execute(
            "INSERT OR IGNORE INTO events (ts_ms, kind, severity, subject, message, data,"
            " event_key) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (ts_ms, kind, severity, subject, message, json.dumps(data) if data else None, key),
        )

    def add_slot_usage(self, ts_ms: int, model: str, slots: list[Any]) -> None:
        """One /slots poll of one server (monitor/integrations/slots.py SlotSample rows)."""
        with self.db.atomic():
            self.db.conn.executemany(
                "INSERT OR REPLACE INTO slot_usage VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (ts_ms, model, s.slot_id, s.tokens, int(s.busy), s.n_ctx)
                    for s in slots
                    if s.exact
                ],
            )

    def add_assessment(self, doc: dict[str, Any], started_at_ms: int | None) -> bool:
        """Store one server's assessment, as its document (monitor/analysis/assess.py
        ``to_json``); False while its process row is not written yet (its tick waits for
        the database): try again."""
        from monitor.store import estimates

        with self.db.atomic():
            process_id = estimates.process_row(
                self.db.conn, doc["pid"], doc["start_ticks"], started_at_ms
            )
            if process_id is None:
                return False
            estimates.insert(self.db.conn, process_id, doc)
        return True

    def stored_assessment(
        self, pid: int, start_ticks: int, started_at_ms: int | None, key: str, version: int
    ) -> dict[str, Any] | None:
        """The document of the assessment stored for this process and launch, or None
        (monitor/analysis/stored.py parses it)."""
        from monitor.store import estimates

        process_id = estimates.process_row(self.db.conn, pid, start_ticks, started_at_ms)
        if process_id is None:
            return None
        return estimates.stored(self.db.conn, process_id, key, version)

    # -- retention ----------------------------------------------------------------

    def prune(self, now_ms: int, retention: Retention) -> dict[str, int]:
        """Roll raw samples up per minute, then drop what retention no longer keeps, in one
        transaction (monitor/store/prune.py); the counts of rows rolled up and deleted."""
        with self.db.atomic():
            return prune_tables(self.db.conn, now_ms, retention)


_DEVICE_SAMPLE_SQL = (
    f"INSERT OR REPLACE INTO device_samples (ts_ms, device_id, {', '.join(DEVICE_SAMPLE_FIELDS)})"
    f" VALUES ({', '.join('?' for _ in range(len(DEVICE_SAMPLE_FIELDS) + 2))})"
)
_PROCESS_SAMPLE_SQL = (
    "INSERT OR REPLACE INTO process_samples (ts_ms, process_id, device_id, "
    f"{', '.join(PROCESS_SAMPLE_FIELDS)})"
    f" VALUES ({', '.join('?' for _ in range(len(PROCESS_SAMPLE_FIELDS) + 3))})"
)
