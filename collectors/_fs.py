"""The one place that reads small files from ``/proc`` and ``/sys``.

procfs and sysfs files are generated on read; one ``os.read`` of 64 KiB returns the whole
of every file we read except a long command line, for which we loop. Functions named
``try_*`` return ``None`` for a file that is missing, unreadable or whose process is gone.
"""

from __future__ import annotations

import os

_CHUNK = 65536
GONE = (FileNotFoundError, ProcessLookupError, NotADirectoryError)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The whole file; raises OSError (FileNotFoundError, PermissionError, ...)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
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
