"""Memory cgroups: the limit that binds a process before host RAM does.

A process in a memory cgroup (systemd ``MemoryMax=``/``MemoryHigh=``, a container, a
llama-swap unit) is OOM-killed when its cgroup's charge reaches the limit, whatever
``MemAvailable`` says. The charge (``memory.current``; v1 ``memory.usage_in_bytes``)
counts anonymous memory *and* the page cache of files it read or mapped, so an mmap'd
model's pages count. Every ancestor's limit applies too: the room left is the smallest
``max - current`` on the path from the cgroup up to the root.

- cgroup v2: ``/sys/fs/cgroup`` (or ``/sys/fs/cgroup/unified`` on a hybrid box, when the
  memory controller lives there), files ``memory.max`` / ``memory.high`` ("max" =
  unlimited) and ``memory.current``; a process's path is the ``0::PATH`` line of
  ``/proc/PID/cgroup``. Its clean page cache (``memory.stat`` ``active_file +
  inactive_file - file_dirty - file_writeback``) is reclaimed before an OOM kill, so the
  room is ``max - (current - reclaimable)``.
- cgroup v1: ``/sys/fs/cgroup/memory``, files ``memory.limit_in_bytes`` (unlimited is
  PAGE_COUNTER_MAX pages, ~2^63) and ``memory.usage_in_bytes``; no ``memory.high``; the
  path is the ``N:memory:PATH`` line; the reclaimable cache is memory.stat's
  hierarchical ``total_active_file + total_inactive_file - total_dirty - total_writeback``.

Everything is read through :mod:`collectors._fs` under :class:`Roots`, so a recorded tree
answers like the live one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from collectors import _fs
from collectors.base import CgroupMemory, Roots

_UNLIMITED_V1 = 1 << 62  # anything above is "no limit" (PAGE_COUNTER_MAX * page size)
_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where the memory controller is mounted (under ``Roots.sys``) and its version."""

    mount: Path
    version: int  # 1 or 2


def memory_hierarchy(roots: Roots) -> Hierarchy | None:
    """The mounted memory controller: pure v2, hybrid v2 (``unified``), or v1."""
    base = roots.sys / "fs" / "cgroup"
    for mount in (base, base / "unified"):
        controllers = _fs.try_read_text(mount / "cgroup.controllers")
        if controllers is not None and "memory" in controllers.split():
            return Hierarchy(mount, 2)
    if _fs.exists(base / "memory" / "memory.limit_in_bytes"):
        return Hierarchy(base / "memory", 1)
    return None


def parse_proc_cgroup(data: bytes, version: int) -> str | None:
    """The memory cgroup path from ``/proc/PID/cgroup`` (``0::/a/b`` or ``4:memory:/a/b``)."""
    for line in data[:65536].decode("utf-8", "replace").splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if version == 2 and hier == "0" and controllers == "":
            return path or "/"
        if version == 1 and "memory" in controllers.split(","):
            return path or "/"
    return None


def _clean(path: str) -> str | None:
    """A cgroup path as ``/a/b``; None for one that climbs (``..``) or is not absolute."""
    p = PurePosixPath("/" + path.strip().lstrip("/"))
    if any(part in ("..", ".") for part in p.parts):
        return None
    return str(p)


def _limit(raw: str | None, version: int) -> int | None:
    if raw is None:
        return None
    raw = raw.strip()
    if raw == "max" or not raw.isdigit():
        return None
    value = int(raw)
    return None if version == 1 and value >= _UNLIMITED_V1 else value


def _node(h: Hierarchy, path: str) -> CgroupMemory | None:
    """One limited cgroup's own figures; None when it sets no limit (``max`` and ``high``
    unset or unreadable) or its directory is not there. An unlimited cgroup can never be
    the binding one (:func:`_tighter`), so its charge and ``memory.stat`` are not read:
    those were ~2/3 of the daemon's per-tick cgroup cost on a box with no limit at all
    (issue 32 item 3; ``/`` and each ancestor of a server's cgroup, every tick)."""
    # a string, not a Path: this runs for each ancestor of each server's cgroup every tick
    d = f"{h.mount}{path}" if path != "/" else str(h.mount)
    if h.version == 2:
        max_ = _limit(_fs.try_read_text(f"{d}/memory.max"), 2)
        high = _limit(_fs.try_read_text(f"{d}/memory.high"), 2)
    else:
        max_ = _limit(_fs.try_read_text(f"{d}/memory.limit_in_bytes"), 1)
        high = None
    if max_ is None and high is None:
        return None
    current = _fs.try_read_int(
        f"{d}/memory.current" if h.version == 2 else f"{d}/memory.usage_in_bytes"
    )
    stat = _fs.try_read_bytes(f"{d}/memory.stat")
    reclaim = None if stat is None else reclaimable_from_stat(stat, h.version)
    return CgroupMemory(path, max_, high, current, reclaim)


# memory.stat keys of the clean, reclaimable page cache: the file LRU lists (shmem lives on
# the anon lists: not reclaimable without swap) minus what is dirty or under writeback.
# v1 reports a cgroup's own pages and, prefixed total_, its subtree's: usage_in_bytes is
# hierarchical, so the total_ ones (Documentation/admin-guide/cgroup-v1/memory.rst 5.2).
_STAT_KEYS = {
    2: (("active_file", "inactive_file"), ("file_dirty", "file_writeback")),
    1: (("total_active_file", "total_inactive_file"), ("total_dirty", "total_writeback")),
}


def reclaimable_from_stat(data: bytes, version: int) -> int | None:
    """Clean page cache in a memory.stat (v1 or v2); None when its file keys are missing."""
    fields: dict[str, int] = {}
    for line in data[:65536].decode("ascii", "replace").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            fields[key] = int(value)
    plus, minus = _STAT_KEYS[version]
    if not all(k in fields for k in plus):
        return None
    return max(0, sum(fields[k] for k in plus) - sum(fields.get(k, 0) for k in minus))


def _tighter(got: CgroupMemory, best: CgroupMemory | None) -> bool:
    """A limit with less room than ``best``; with no ``max`` anywhere, the first ``high``."""
    if got.room_bytes is not None:
        return best is None or best.room_bytes is None or got.room_bytes < best.room_bytes
    return best is None and got.memory_high_bytes is not None


def read_limit(h: Hierarchy, path: str) -> CgroupMemory | None:
    """The binding memory limit for a process in cgroup ``path``: of the cgroup and its
    ancestors, the one with the least room (``max - current``; ``high`` where no ``max``);
    None when none is limited or the path is unreadable."""
    clean = _clean(path)
    if clean is None:
        return None
    best: CgroupMemory | None = None
    node = clean  # "/a/b", then "/a", then "/" (no Path objects: issue 32 item 3)
    for _ in range(_MAX_DEPTH):
        got = _node(h, node)
        if got is not None and _tighter(got, best):
            best = got
        if node == "/":
            break
        node = node.rpartition("/")[0] or "/"
    return best


def pid_cgroup(roots: Roots, h: Hierarchy, pid: int | str) -> str | None:
    """The memory cgroup path of ``pid`` (or ``"self"``)."""
    data = _fs.try_read_bytes(f"{roots.proc}/{pid}/cgroup")
    return None if data is None else parse_proc_cgroup(data, h.version)


def pid_limit(roots: Roots, h: Hierarchy | None, pid: int | str) -> CgroupMemory | None:
    if h is None:
        return None
    path = pid_cgroup(roots, h, pid)
    return None if path is None else read_limit(h, path)


def resolve(roots: Roots, given: str, named: str | None = None) -> tuple[Hierarchy, str]:
    """``--cgroup PATH`` (``/sys/fs/cgroup/...``, or a cgroup path like
    ``/system.slice/x.service``) -> (hierarchy, cgroup path). ValueError when there is
    no memory controller, the path climbs out, or the cgroup does not exist; ``named``:
    how the error names what was asked (default ``--cgroup GIVEN``)."""
    named = named or f"--cgroup {given}"
    h = memory_hierarchy(roots)
    if h is None:
        raise ValueError("no memory cgroup controller is mounted under /sys/fs/cgroup")
    path = given
    real_mount = "/sys/" + str(h.mount.relative_to(roots.sys))  # as the user names it
    if path == real_mount or path.startswith(real_mount + "/"):
        path = path[len(real_mount) :] or "/"
    elif path.startswith("/sys/fs/cgroup"):
        raise ValueError(f"{named}: not under the memory controller's mount ({real_mount})")
    clean = _clean(path)
    if clean is None or not _fs.exists(h.mount / clean.lstrip("/")):
        raise ValueError(f"{named}: no such cgroup under {real_mount}")
    return h, clean
