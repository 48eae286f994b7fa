"""The one place that reads ``/proc`` and ``/sys``: small files, listings, links.

procfs and sysfs files are generated on read; one ``os.read`` of 64 KiB returns the whole
of every file we read except a long command line, for which we loop. Functions named
``try_*`` return ``None`` for a file that is missing, unreadable or whose process is gone.

Because every read passes here, :func:`recording` can capture exactly what the collectors
read (``vramscope capture``, monitor/cli/capture.py): each file's bytes, each listing, each
link, and each failure, in the order they happened.

A tree given as ``--proc-root``/``--sys-root`` (a capture someone sent) is hostile input:
:func:`contain` marks it, and reads under it resolve links and refuse any that lead outside
it (links inside it, as sysfs ``device`` links, are followed), never follow a link as the
last step, and open regular files only (a FIFO would block, ``/dev/zero`` never ends). The
kernel's own /proc and /sys are read as they are.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_CHUNK = 65536
GONE = (FileNotFoundError, ProcessLookupError, NotADirectoryError)

Recorder = Callable[[str, str, object], None]
"""(kind: "file" | "dir" | "link" | "exists", path, bytes / names / target / bool / OSError)"""
_recorder: Recorder | None = None
_recorder_lock = threading.Lock()
_contained: set[str] = set()
_KERNEL_ROOTS = ("/proc", "/sys")
_MAX_TREE_FILE_BYTES = 16 << 20


@contextmanager
def recording(recorder: Recorder) -> Iterator[None]:
    """Call ``recorder`` for every read while the block runs (one recorder at a time;
    collectors run in worker threads, so it is called under a lock)."""
    global _recorder

    def locked(kind: str, path: str, result: object) -> None:
        with _recorder_lock:
            recorder(kind, path, result)

    if _recorder is not None:
        raise RuntimeError("a recording is already running")
    _recorder = locked
    try:
        yield
    finally:
        _recorder = None


def is_recording() -> bool:
    """Whether a recorder is on (:func:`recording`'s block is running)."""
    return _recorder is not None


def _note(kind: str, path: str | os.PathLike[str], result: object) -> None:
    recorder = _recorder
    if recorder is not None:
        recorder(kind, os.fspath(path), result)


def _traced(kind: str, path: str | os.PathLike[str], call: Callable[[Any], Any]) -> Any:
    """``call(path)``, its result or its OSError shown to the recorder when one is on."""
    try:
        result = call(path)
    except OSError as exc:
        _note(kind, path, exc)
        raise
    _note(kind, path, result)
    return result


def contain(root: str | os.PathLike[str]) -> None:
    """Keep every read under ``root`` inside it (a no-op for the kernel's /proc and /sys)."""
    path = os.fspath(root).rstrip("/")
    if path and os.path.realpath(path) not in _KERNEL_ROOTS:
        _contained.add(path)


def _root_of(path: str) -> str | None:
    """The contained root ``path`` lies under, if any (checked for each ancestor)."""
    end = len(path)
    while end > 0:
        if path[:end] in _contained:
            return path[:end]
        end = path.rfind("/", 0, end)
    return None


def _inside(path: str | os.PathLike[str], *, last: bool = True) -> str | None:
    """``None`` outside a contained root; else ``path`` with its links resolved (the last
    component too when ``last``), raising OSError(EXDEV) if that leaves the root."""
    text = os.fspath(path)
    root = _root_of(text) if _contained else None
    if root is None:
        return None
    if last:
        real = os.path.realpath(text)
    else:
        head, name = os.path.split(text)
        real = os.path.join(os.path.realpath(head), name)
    real_root = os.path.realpath(root)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise OSError(errno.EXDEV, f"a link leads outside {root}", text)
    return real


def _read_whole(path: str | os.PathLike[str]) -> bytes:
    real = _inside(path)
    if real is None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    else:
        fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_TREE_FILE_BYTES:
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file of at most 16 MiB", os.fspath(path))
    try:
        data = os.read(fd, _CHUNK)
        if len(data) < _CHUNK:
            return data
        chunks = [data]
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The whole file; raises OSError (FileNotFoundError, PermissionError, ...)."""
    return _traced("file", path, _read_whole)


def read_unrecorded(path: str | os.PathLike[str]) -> bytes:
    """As :func:`read_bytes`, kept inside a --proc-root tree the same way, but never
    recorded by ``vramscope capture``: for /proc/PID/environ, which no capture holds."""
    return _read_whole(path)


def listdir(path: str | os.PathLike[str]) -> list[str]:
    """``os.listdir``; raises OSError."""
    return _traced("dir", path, lambda p: os.listdir(_inside(p) or p))


def readlink(path: str | os.PathLike[str]) -> str:
    """``os.readlink``; raises OSError."""
    return _traced("link", path, lambda p: os.readlink(_inside(p, last=False) or p))


def exists(path: str | os.PathLike[str]) -> bool:
    try:
        found = os.path.exists(_inside(path) or path)
    except OSError:
        found = False
    _note("exists", path, found)
    return found


def note_listing(path: str | os.PathLike[str], names: list[str]) -> None:
    """A listing read another way (``os.scandir`` for its inode numbers: proctable.py)."""
    _note("dir", path, names)


def try_read_bytes(path: str | os.PathLike[str]) -> bytes | None:
    try:
        return read_bytes(path)
    except OSError:
        return None


def try_read_text(path: str | os.PathLike[str]) -> str | None:
    data = try_read_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def try_read_int(path: str | os.PathLike[str]) -> int | None:
    """A file holding one decimal integer (sysfs style); ``None`` if absent or not a number."""
    data = try_read_bytes(path)
    if data is None:
        return None
    try:
        return int(data.strip())
    except ValueError:
        return None


def parse_kv(data: bytes, sep: bytes = b":") -> dict[str, bytes]:
    """``key: value`` lines into a dict of stripped values (``/proc/meminfo``, status, fdinfo)."""
    out: dict[str, bytes] = {}
    for line in data.splitlines():
        key, found, value = line.partition(sep)
        if found:
            out[key.strip().decode("ascii", "replace")] = value.strip()
    return out


def pick_kv(data: bytes, keys: tuple[bytes, ...]) -> dict[str, bytes]:
    """:func:`parse_kv` of only ``keys``, each found by a search for ``\\nKEY:`` (its last
    line, as parse_kv keeps) instead of splitting every line: a ``/proc/PID/status`` has
    ~55 lines of which the collector wants 8, ``/proc/meminfo`` ~50 of which 11 (3x
    cheaper, a parse every tick per tracked process: issue 32 item 3). The kernel writes
    each key at the start of its line, as matched here; a key indented in a hostile tree
    is not found (unknown), where parse_kv would strip it."""
    out: dict[str, bytes] = {}
    for key in keys:
        at = data.rfind(b"\n" + key + b":")
        if at >= 0:
            start = at + len(key) + 2
        elif data.startswith(key + b":"):
            start = len(key) + 1
        else:
            continue
        end = data.find(b"\n", start)
        value = data[start:end] if end >= 0 else data[start:]
        out[key.decode("ascii")] = value.strip()
    return out


def kib_field(fields: dict[str, bytes], key: str) -> int | None:
    """A ``NNN kB`` value (meminfo, status) in bytes; ``None`` if absent or malformed."""
    raw = fields.get(key)
    if raw is None:
        return None
    number = raw.split(None, 1)[0] if raw else b""
    try:
        return int(number) * 1024
    except ValueError:
        return None
