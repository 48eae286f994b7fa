"""Ticks the database refused at shutdown, kept in a side file until the next start.

``<db>.backlog.jsonl`` beside the database, one Snapshot per line as JSON, mode 0600. It
is written to a new temporary name (``O_CREAT|O_EXCL|O_NOFOLLOW``, relative to the
folder's descriptor: never through a link, never over a file we did not create) and
renamed into place, so a previous backlog the new one includes is replaced in one step.
The next daemon start queues its ticks ahead of the first sample and removes the file once
they are all in the database.

When the database's own filesystem refuses the file too (a full disk, read-only), it goes
to a private runtime folder (:func:`runtime_dir`: systemd's ``$RUNTIME_DIRECTORY``, else
``$XDG_RUNTIME_DIR/vramscope``, else a 0700 folder beside the database), never under a
predictable name in a world-writable folder such as ``/dev/shm`` (issue 28: anyone could
plant a FIFO there and hang every start). The folder must be ours and 0700.

Every file read here is opened ``O_RDONLY|O_NONBLOCK|O_NOFOLLOW`` and its descriptor must
be a regular file of this user that nobody else can write; anything else is refused with
one line and left alone. Reading is bounded (issue 28): at most :data:`MAX_READ_BYTES`
in all, lines of at most :data:`MAX_LINE_BYTES`, JSON nested at most :data:`MAX_DEPTH`
deep; a line over a bound is skipped and counted, never an exception.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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

MAX_LINE_BYTES = 1 << 20  # one tick of 64 tracked processes is a few KiB
MAX_READ_BYTES = 64 << 20  # all backlog files together, per start
MAX_DEPTH = 32  # a Snapshot line nests 5 deep; an event's data a little more
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


@dataclass(frozen=True, slots=True)
class Loaded:
    """What :func:`load` found: the ticks in time order, the lines skipped (unparsable,
    over a bound), the files read, one line per file refused, and whether the read
    stopped at :data:`MAX_READ_BYTES` with more left."""

    snaps: tuple[Snapshot, ...]
    bad: int
    files: tuple[Path, ...]
    refused: tuple[str, ...]
    truncated: bool


def backlog_path(db_path: Path) -> Path:
    return db_path.with_name(f"{db_path.name}.backlog.jsonl")


def runtime_dir(db_path: Path) -> Path:
    """The private folder for runtime files: ``$RUNTIME_DIRECTORY`` (systemd's
    ``RuntimeDirectory=vramscope``, 0700; the first when it lists several), else
    ``$XDG_RUNTIME_DIR/vramscope``, else ``<db>.runtime`` beside the database."""
    systemd = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "vramscope"
    return db_path.with_name(f"{db_path.name}.runtime")


def fallback_path(db_path: Path) -> Path:
    """Off the database's filesystem where the runtime folder is, for when that one is
    full or read-only; named by a hash of the database's path (one folder, many
    databases)."""
    key = hashlib.sha256(str(db_path.resolve()).encode()).hexdigest()[:16]
    return runtime_dir(db_path) / f"backlog-{key}.jsonl"


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
        return _save(backlog_path(db_path), snaps, private=False)
    except OSError:
        return _save(fallback_path(db_path), snaps, private=True)


def _folder(folder: Path, private: bool, create: bool) -> int:
    """A descriptor of ``folder``; a private one must be ours and 0700 (created so when
    ``create``)."""
    if private and create:
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    st = os.fstat(dfd)
    if private and (st.st_uid != os.geteuid() or st.st_mode & 0o077):
        os.close(dfd)
        raise OSError(
            errno.EPERM,
            f"{folder} is not a private folder of uid {os.geteuid()} "
            f"(mode {stat.S_IMODE(st.st_mode):04o}, owner {st.st_uid})",
        )
    return dfd


def _save(final: Path, snaps: list[Snapshot], private: bool) -> Path:
    dfd = _folder(final.parent, private, create=True)
    tmp = f"{final.name}.{os.getpid()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(os.stat(tmp, dir_fd=dfd, follow_symlinks=False).st_mode):
                os.unlink(tmp, dir_fd=dfd)  # our own leftover of a previous attempt (same pid)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                for snap in snaps:
                    handle.write(json.dumps(to_json(snap), separators=(",", ":")) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, final.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)
    return final


@dataclass(slots=True)
class _Budget:
    left: int = MAX_READ_BYTES
    truncated: bool = False


def load(db_path: Path) -> Loaded:
    """The backlog files (beside the database, and the fallback), bounded. A file that is
    a link, not a regular file, not this user's, or writable by others is not read: it is
    named in ``refused`` and left alone."""
    snaps: dict[int, Snapshot] = {}
    bad, found, refused = 0, [], []
    budget = _Budget()
    for path, private in ((backlog_path(db_path), False), (fallback_path(db_path), True)):
        try:
            got, unreadable = _load(path, private, budget)
        except FileNotFoundError:
            continue
        except OSError as exc:
            refused.append(f"the backlog {path} is not read: {exc.strerror or exc}")
            continue
        found.append(path)
        bad += unreadable
        for snap in got:
            snaps.setdefault(snap.ts_ms, snap)
    ordered = tuple(snaps[ts] for ts in sorted(snaps))
    return Loaded(ordered, bad, tuple(found), tuple(refused), budget.truncated)


def _open_own_file(path: Path, private: bool) -> int:
    """``path`` opened ``O_NONBLOCK|O_NOFOLLOW`` under its folder's descriptor; OSError
    unless it is a regular file of ours that nobody else can write."""
    dfd = _folder(path.parent, private, create=False)
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path.name, flags, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "it is a symbolic link; not followed") from None
        raise
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = "it is not a regular file"
    elif st.st_uid != os.geteuid() or st.st_mode & 0o022:
        why = f"it is not a private file of uid {os.geteuid()}"
    if why is not None:
        os.close(fd)
        raise OSError(errno.EPERM, why)
    return fd


def _load(path: Path, private: bool, budget: _Budget) -> tuple[list[Snapshot], int]:
    fd = _open_own_file(path, private)
    snaps, bad = [], 0
    with os.fdopen(fd, "rb") as handle:
        for line in _lines(handle, budget):
            snap = None if line is None else parse_line(line)
            if snap is None:
                bad += 1
            else:
                snaps.append(snap)
    snaps.sort(key=lambda s: s.ts_ms)
    return snaps, bad


def _lines(handle: IO[bytes], budget: _Budget) -> Iterator[bytes | None]:
    """Each line of at most MAX_LINE_BYTES; None for one over it (read to its end and
    dropped, never held whole) or one cut by the budget."""
    while budget.left > 0:
        line = handle.readline(min(MAX_LINE_BYTES + 1, budget.left))
        if not line:
            return
        budget.left -= len(line)
        if len(line) <= MAX_LINE_BYTES and (line.endswith(b"\n") or budget.left > 0):
            yield line
            continue
        while not line.endswith(b"\n") and budget.left > 0:  # skip the rest of it
            line = handle.readline(min(MAX_LINE_BYTES, budget.left))
            if not line:
                break
            budget.left -= len(line)
        yield None
    if handle.read(1):
        budget.truncated = True


def parse_line(line: bytes) -> Snapshot | None:
    """One backlog line as a Snapshot; None when it is not one (bad JSON, nested deeper
    than MAX_DEPTH, not a tick)."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):  # the C decoder stops at the recursion limit
        return None
    if not isinstance(doc, dict) or not _within_depth(doc, MAX_DEPTH):
        return None
    try:
        return from_json(doc)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _within_depth(doc: Any, limit: int) -> bool:
    """Whether ``doc`` nests at most ``limit`` containers deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True
