"""collectors/cgroup.py read_limit: the binding limit among a cgroup and its ancestors,
read on real files (a cgroup tree under an injected ``Roots.sys``), with its reads counted
through ``_fs.recording`` (issue 32 item 3: an unlimited cgroup's charge and memory.stat
were read and parsed every tick for nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cgroup_tree import MIB, tree

from collectors import _fs
from collectors.base import Roots
from collectors.cgroup import memory_hierarchy, read_limit


def counted_read(roots: Roots, path: str) -> tuple[object, list[str]]:
    """read_limit's answer and the base names of the files it read."""
    h = memory_hierarchy(roots)
    assert h is not None
    names: list[str] = []
    with _fs.recording(lambda kind, p, _r: names.append(Path(p).name)):
        got = read_limit(h, path)
    return got, names


@pytest.mark.parametrize("version", [1, 2])
def test_no_limit_anywhere_reads_no_charge_and_no_memory_stat(tmp_path: Path, version: int) -> None:
    """Noise case: nothing limited, so nothing binds and only the limit files are read
    (before: each of the three cgroups' charge and memory.stat too, 3 stat parses)."""
    roots, _ = tree(tmp_path, version)
    got, names = counted_read(roots, "/a/b")
    assert got is None
    assert names.count("memory.stat") == 0
    assert "memory.current" not in names and "memory.usage_in_bytes" not in names
    limit_files = ("memory.max", "memory.high") if version == 2 else ("memory.limit_in_bytes",)
    assert sorted(names) == sorted(limit_files * 3)


@pytest.mark.parametrize("version", [1, 2])
def test_a_limited_ancestor_is_read_whole_and_binds(tmp_path: Path, version: int) -> None:
    """Signal case: the limited ancestor's charge and memory.stat are read (its clean page
    cache counts as room, as memcg reclaim drops it before an OOM kill); only its."""
    roots, mount = tree(tmp_path, version)
    limit_file = "memory.max" if version == 2 else "memory.limit_in_bytes"
    (mount / "a" / limit_file).write_text(f"{1024 * MIB}\n")
    got, names = counted_read(roots, "/a/b")
    assert got is not None
    assert got.path == "/a"
    assert got.memory_max_bytes == 1024 * MIB
    assert got.reclaimable_bytes == 100 * MIB
    assert got.room_bytes == 1024 * MIB - 200 * MIB
    assert names.count("memory.stat") == 1


def test_a_limit_set_between_two_reads_is_seen_at_the_next(tmp_path: Path) -> None:
    """A limit set on the cgroup itself later (systemctl set-property) binds at the next
    read; memory.high alone binds where no max is set."""
    roots, mount = tree(tmp_path, 2)
    assert counted_read(roots, "/a/b")[0] is None
    (mount / "a" / "b" / "memory.high").write_text(f"{512 * MIB}\n")
    got, names = counted_read(roots, "/a/b")
    assert got is not None and got.path == "/a/b"
    assert got.memory_high_bytes == 512 * MIB and got.memory_max_bytes is None
    assert names.count("memory.stat") == 1
