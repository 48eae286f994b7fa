"""The daemon's locks: an exclusive ``flock`` on ``<db>.lock`` (one daemon per database) and
on the database file itself (no second writer through a hard link), and who holds them
(``/proc/locks``), for the TUI's header and a clear "already running" line."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import IO

from monitor.store.database import StoreError


class DaemonLocked(StoreError):
    """Another daemon already writes this database."""


def _folder_fd(db_path: Path) -> int:
    """A descriptor of the database's folder (created when missing), refused when another
    user could plant a link in it: writable by group or others, unless it is sticky and
    owned by us (issue 28: a root daemon must not follow ``<db>.lock`` into a file of
    root's through a link someone else put there)."""
    folder = db_path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoreError(
            f"cannot create the database {db_path}: {exc.strerror or exc} ({folder})"
        ) from None
    st = os.fstat(dfd)
    shared = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if shared and not (st.st_mode & stat.S_ISVTX and st.st_uid == os.geteuid()):
        os.close(dfd)
        raise StoreError(
            f"the database folder {folder} is writable by other users (mode "
            f"{stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}); refused: keep the "
            "database in a folder only its daemon's user can write"
        )
    return dfd


def _open_lock_file(db_path: Path, lock_path: Path) -> int:
    """``<db>.lock`` opened ``O_NOFOLLOW|O_CREAT|O_NONBLOCK`` relative to the folder's
    descriptor; a regular file of ours only (DESIGN.md, security stance)."""
    dfd = _folder_fd(db_path)
    try:
        fd = os.open(
            lock_path.name,
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            0o640,
            dir_fd=dfd,
        )
    except OSError as exc:
        why = "a symbolic link; not followed" if exc.errno == errno.ELOOP else exc.strerror
        raise StoreError(f"cannot use the lock file {lock_path}: {why}") from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise StoreError(
            f"cannot use the lock file {lock_path}: not a regular file of uid {os.geteuid()}"
        )
    return fd


def acquire_lock(db_path: Path) -> IO[str]:
    """Hold ``<db>.lock`` for the daemon's life; raise DaemonLocked naming the holder."""
    lock_path = Path(f"{db_path}.lock")
    fd = _open_lock_file(db_path, lock_path)
    handle = open(fd, "a+", encoding="ascii")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read(64).strip() or "unknown"
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
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, encoding="ascii", errors="replace") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = handle.read(64).strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None
    except OSError:
        return None
