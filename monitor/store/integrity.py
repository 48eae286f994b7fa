"""The database checked while the daemon runs (issue 28 item 15).

Bytes written into the file under a running daemon went unnoticed: ``/healthz`` said 200,
``doctor`` ok, and the next start refused the file. :class:`IntegrityWatch` runs
``PRAGMA quick_check`` (SQLite's own page and b-tree check, without the index cross-check
of ``integrity_check``) every ``[daemon] integrity_check_s`` seconds (hourly by default)
and at once after a write or prune fails with SQLITE_CORRUPT, on a read-only connection of
its own in a thread of its own: the tick never waits for it. A failed check is kept for
``/healthz`` (503), ``/metrics`` (``vramscope_db_integrity_ok``) and ``doctor``, and
written to ``<db>.corrupt-found`` naming the file (device and inode): the next start
moves exactly that file aside (monitor/store/database.py) and starts a new one, whatever
is left of its header or schema.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

INTEGRITY_CHECK_S = 3600.0  # quick_check reads every page: hourly is cheap enough
MARKER_SUFFIX = ".corrupt-found"
MARKER_MAX_BYTES = 4096
PROBLEM_MAX_CHARS = 200
_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}


@dataclass(frozen=True, slots=True)
class Integrity:
    """The last check: ``problem`` (the first line quick_check gave, bounded) when it
    failed, at ``checked_ms`` (epoch ms)."""

    ok: bool
    problem: str | None
    checked_ms: int


def one_line(text: str) -> str:
    """quick_check lists every damaged page, one per line: one line, bounded."""
    line = " ".join(text.split())
    return line if len(line) <= PROBLEM_MAX_CHARS else line[:PROBLEM_MAX_CHARS] + "..."


def is_corrupt_error(exc: BaseException) -> bool:
    return getattr(exc, "sqlite_errorname", None) in _CORRUPT


def quick_check(path: Path) -> str | None:
    """None when ``PRAGMA quick_check`` says ok, else its first problem (one line). A
    locked or unreadable file raises sqlite3.Error: that is not corruption."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = conn.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as exc:
        if is_corrupt_error(exc):
            return one_line(str(exc))
        raise
    finally:
        conn.close()
    if rows == [("ok",)]:
        return None
    return one_line(" ".join(str(r[0]) for r in rows))


def marker_path(db: Path) -> Path:
    return Path(f"{db}{MARKER_SUFFIX}")


def write_marker(db: Path, problem: str) -> None:
    """Say durably that the file now at ``db`` failed its check (device, inode, why). The
    marker is replaced in one rename, never removed first: a ``doctor`` reading it while a
    later check writes it again always finds one (it found none in that gap once)."""
    if read_marker(db) == one_line(problem):
        return  # already said, of this very file
    st = os.stat(db)
    doc = {"dev": st.st_dev, "ino": st.st_ino, "problem": problem, "ts_ms": now_ms()}
    path = marker_path(db)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(doc))
    os.replace(tmp, path)


def read_marker(db: Path) -> str | None:
    """The problem recorded for the file at ``db`` when the marker names that very file
    (same device and inode), else None. Never follows a link; bounded; never raises."""
    try:
        fd = os.open(marker_path(db), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        doc = json.loads(os.read(fd, MARKER_MAX_BYTES))
        st = os.stat(db, follow_symlinks=False)
        if not isinstance(doc, dict) or (doc.get("dev"), doc.get("ino")) != (
            st.st_dev,
            st.st_ino,
        ):
            return None
        return one_line(str(doc.get("problem") or "quick_check failed"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def clear_marker(db: Path) -> None:
    with contextlib.suppress(OSError):
        marker_path(db).unlink()


def now_ms() -> int:
    return int(time.time() * 1000)


class IntegrityWatch:
    """A thread that checks the database every ``every_s`` seconds, or at once when asked
    (:meth:`request`). The start's own check (Store.open) counts as the first one."""

    def __init__(self, db: Path, every_s: float = INTEGRITY_CHECK_S) -> None:
        self.db = db
        self.every_s = every_s
        self._result = Integrity(True, None, now_ms())
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="db-integrity", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def result(self) -> Integrity:
        return self._result

    def request(self) -> None:
        """Check now (a write or read said SQLITE_CORRUPT)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.every_s)
            self._wake.clear()
            if not self._closed:
                self.check()

    def check(self) -> Integrity | None:
        """One check; None when the file could not be read (locked: not corruption)."""
        try:
            problem = quick_check(self.db)
        except sqlite3.Error as exc:
            log.debug("integrity check of %s skipped: %s", self.db, exc)
            return None
        result = Integrity(problem is None, problem, now_ms())
        if problem is not None and self._result.ok:
            log.error(
                "database %s is corrupt (quick_check: %s); it will be moved aside and a "
                "new one started at the next start",
                self.db,
                problem,
            )
        if problem is not None:
            try:
                write_marker(self.db, problem)
            except OSError as exc:
                log.error("cannot record the corruption beside %s: %s", self.db, exc)
        elif not self._result.ok:
            clear_marker(self.db)
            log.info("database %s passes its integrity check again", self.db)
        self._result = result
        return result

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
