"""The daemon's locks: an exclusive ``flock`` on ``<db>.lock`` (one daemon per database) and
on the database file itself (no second writer through a hard link), and who holds them
(``/proc/locks``), for the TUI's header and a clear "already running" line."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from monitor.store.database import StoreError


class DaemonLocked(StoreError):
    """Another daemon already writes this database."""


def acquire_lock(db_path: Path) -> IO[str]:
    """Hold ``<db>.lock`` for the daemon's life; raise DaemonLocked naming the holder."""
    lock_path = Path(f"{db_path}.lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        handle = open(fd, "a+", encoding="ascii")  # noqa: SIM115 - held until exit
    except OSError as exc:
        raise StoreError(
            f"cannot create the database {db_path}: {exc.strerror or exc} ({exc.filename})"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise DaemonLocked(
            f"another vramscope daemon (pid {holder}) is already writing {db_path}"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def lock_database_file(db_path: Path) -> IO[bytes]:
    """Hold an exclusive ``flock`` on the database file itself for the daemon's life.

    ``<db>.lock`` is found by path: a hard link (or a bind mount) names the same file by
    another path and would get a lock file of its own. This lock is on the inode, so two
    daemons never write one file. (SQLite's own locks are POSIX byte-range locks, which
    flock does not touch on Linux.) A missing file is created 0640 and empty.
    """
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(db_path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o640)
    except OSError as exc:
        raise StoreError(f"cannot create the database {db_path}: {exc.strerror or exc}") from None
    handle = os.fdopen(fd, "rb")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        st = os.fstat(handle.fileno())
        handle.close()
        pid = _flock_holder(st.st_dev, st.st_ino)
        raise DaemonLocked(
            f"another vramscope daemon (pid {pid if pid is not None else 'unknown'}) is "
            f"already writing {db_path} (the same file, by another name: a link)"
        ) from None
    return handle


def _flock_holder(dev: int, ino: int) -> int | None:
    """The pid holding a flock on (dev, ino), from /proc/locks."""
    want = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    try:
        text = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if (
            "->" not in parts
            and len(parts) >= 6
            and parts[1] == "FLOCK"
            and parts[5] == want
            and parts[4].isdigit()
        ):
            return int(parts[4])
    return None


def lock_holder(db_path: Path) -> int | None:
    """PID of the daemon writing ``db_path``, or None when no daemon holds it."""
    lock_path = Path(f"{db_path}.lock")
    try:
        with open(lock_path, encoding="ascii") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = handle.read().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None
    except OSError:
        return None
