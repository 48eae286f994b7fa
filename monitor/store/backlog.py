"""Ticks the database refused at shutdown, kept in a side file until the next start.

``<db>.backlog.jsonl`` beside the database, one Snapshot per line as JSON, mode 0600. It
is written to a new temporary name (``O_CREAT|O_EXCL|O_NOFOLLOW``: never through a link,
never over a file we did not create) and renamed into place, so a previous backlog the
new one includes is replaced in one step. The next daemon start queues its ticks ahead of
the first sample and removes the file once they are all in the database.

When the database's own filesystem refuses the file too (a full disk, read-only), it goes
to memory-backed ``$XDG_RUNTIME_DIR`` or ``/dev/shm`` as ``vramscope-<hash of the db
path>.backlog.jsonl``; there it is read back only when it belongs to this user and nobody
else can write it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from collectors.base import (
    CollectorRun,
    DeviceEvent,
    DeviceSample,
    ExitedProcess,
    HiddenProcess,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
)

MAX_LINE_BYTES = 4 << 20  # one tick of 64 tracked processes is a few KiB
MAX_FILE_BYTES = 1 << 30
_PARTS: dict[str, type] = {
    "devices": DeviceSample,
    "processes": ProcessInfo,
    "memory": ProcessMemory,
    "hidden": HiddenProcess,
    "exited": ExitedProcess,
    "runs": CollectorRun,
    "events": DeviceEvent,
}
_TUPLE_FIELDS = {"argv", "reasons"}  # ProcessInfo's tuples (JSON gives lists)


def backlog_path(db_path: Path) -> Path:
    return db_path.with_name(f"{db_path.name}.backlog.jsonl")


def fallback_path(db_path: Path) -> Path:
    """Off the database's filesystem, for when that one is full or read-only."""
    key = hashlib.sha256(str(db_path.resolve()).encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or "/dev/shm")
    return base / f"vramscope-{key}.backlog.jsonl"


def paths(db_path: Path) -> list[Path]:
    return [backlog_path(db_path), fallback_path(db_path)]


def to_json(snap: Snapshot) -> dict[str, Any]:
    doc: dict[str, Any] = {"ts_ms": snap.ts_ms}
    for name in _PARTS:
        doc[name] = [dataclasses.asdict(part) for part in getattr(snap, name)]
    return doc


def from_json(doc: dict[str, Any]) -> Snapshot:
    """A Snapshot from :func:`to_json`; raises ValueError/TypeError/KeyError when the line
    is not one."""
    parts: dict[str, Any] = {}
    for name, cls in _PARTS.items():
        items = []
        for item in doc.get(name, ()):
            if not isinstance(item, dict):
                raise ValueError(f"{name}: not an object")
            fields = {
                k: tuple(v) if k in _TUPLE_FIELDS and isinstance(v, list) else v
                for k, v in item.items()
            }
            items.append(cls(**fields))
        parts[name] = tuple(items)
    ts_ms = doc["ts_ms"]
    if type(ts_ms) is not int:
        raise ValueError("ts_ms is not an integer")
    return Snapshot(ts_ms=ts_ms, **parts)


def save(db_path: Path, snaps: list[Snapshot]) -> Path:
    """Write ``snaps`` to the backlog file beside the database, else to the fallback;
    returns the path written. Raises OSError when neither can be written."""
    try:
        return _save(backlog_path(db_path), snaps)
    except OSError:
        return _save(fallback_path(db_path), snaps)


def _save(final: Path, snaps: list[Snapshot]) -> Path:
    tmp = final.with_name(f"{final.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISREG(tmp.lstat().st_mode):
            tmp.unlink()  # our own leftover of a previous attempt (same pid)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for snap in snaps:
                handle.write(json.dumps(to_json(snap), separators=(",", ":")) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return final


def load(db_path: Path) -> tuple[list[Snapshot], int, list[Path]]:
    """(ticks in time order, unreadable lines, files read) of the backlog files (beside
    the database, and the fallback). A link, a non-regular file, or a fallback file of
    another user or writable by others is not read (OSError)."""
    snaps: dict[int, Snapshot] = {}
    bad, found = 0, []
    for path in paths(db_path):
        got, unreadable, where = _load(path, private=path != backlog_path(db_path))
        if where is not None:
            found.append(where)
            bad += unreadable
            for snap in got:
                snaps.setdefault(snap.ts_ms, snap)
    return [snaps[ts] for ts in sorted(snaps)], bad, found


def _load(path: Path, private: bool) -> tuple[list[Snapshot], int, Path | None]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return [], 0, None
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read the backlog {path}: {exc.strerror}") from None
    snaps, bad = [], 0
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"the backlog {path} is not a regular file")
        if private and (st.st_uid != os.geteuid() or st.st_mode & 0o022):
            raise OSError(f"the backlog {path} is not this user's private file")
        read = 0
        while read < MAX_FILE_BYTES:
            line = handle.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            read += len(line)
            try:
                snaps.append(from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError):
                bad += 1
    snaps.sort(key=lambda s: s.ts_ms)
    return snaps, bad, path
