"""A memory cgroup tree on disk for tests of collectors/cgroup.py: ``/``, ``/a`` and
``/a/b`` under an injected ``Roots.sys``, none limited, each charged 300 MiB with 50 MiB
active and 50 MiB inactive clean file pages in its memory.stat (v1: the ``total_`` keys,
an unlimited ``limit_in_bytes`` as the kernel prints it; v2: ``max``)."""

from __future__ import annotations

from pathlib import Path

from collectors.base import Roots

MIB = 1024**2
STAT_V2 = "anon 100\nactive_file {a}\ninactive_file {i}\nfile_dirty 0\nfile_writeback 0\n"
STAT_V1 = "total_active_file {a}\ntotal_inactive_file {i}\ntotal_dirty 0\ntotal_writeback 0\n"
V1_UNLIMITED = "9223372036854771712"  # PAGE_COUNTER_MAX pages, as v1 prints "no limit"


def tree(tmp: Path, version: int) -> tuple[Roots, Path]:
    """The tree under ``tmp``: the roots to inject and the memory controller's mount."""
    base = tmp / "sys" / "fs" / "cgroup"
    mount = base if version == 2 else base / "memory"
    for d in (mount, mount / "a", mount / "a" / "b"):
        d.mkdir(parents=True)
        if version == 2:
            (d / "memory.current").write_text(f"{300 * MIB}\n")
            (d / "memory.max").write_text("max\n")
            (d / "memory.high").write_text("max\n")
            (d / "memory.stat").write_text(STAT_V2.format(a=50 * MIB, i=50 * MIB))
        else:
            (d / "memory.usage_in_bytes").write_text(f"{300 * MIB}\n")
            (d / "memory.limit_in_bytes").write_text(f"{V1_UNLIMITED}\n")
            (d / "memory.stat").write_text(STAT_V1.format(a=50 * MIB, i=50 * MIB))
    if version == 2:
        (base / "cgroup.controllers").write_text("cpu io memory pids\n")
    return Roots(proc=tmp / "proc", sys=tmp / "sys"), mount
