"""collectors/cgroup.py read_limit's walk up a server's cgroup, every tick per distinct
server cgroup: the same files as before, at the same paths (root included, v1 and v2), with
no ``Path`` joins on the way (issue 32 item 3). Counted through ``_fs.recording`` and a
counting ``PurePath.__truediv__``, never timed; on real files under an injected root."""

from __future__ import annotations

import pathlib
from pathlib import Path

import pytest
from cgroup_tree import MIB, tree

from collectors import _fs
from collectors.cgroup import memory_hierarchy, read_limit


@pytest.mark.parametrize("version", [1, 2])
def test_the_walk_reads_each_level_by_its_full_path(
    tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots, mount = tree(tmp_path, version)
    limit = "memory.max" if version == 2 else "memory.limit_in_bytes"
    (mount / "a" / limit).write_text(f"{1024 * MIB}\n")  # /a binds: read whole
    h = memory_hierarchy(roots)
    assert h is not None
    joins: list[str] = []
    real = pathlib.PurePath.__truediv__

    def counted(self: pathlib.PurePath, key: str) -> pathlib.PurePath:
        joins.append(str(key))
        return real(self, key)

    monkeypatch.setattr(pathlib.PurePath, "__truediv__", counted)
    read: list[str] = []
    with _fs.recording(lambda _kind, p, _r: read.append(p)):
        got = read_limit(h, "/a/b")
    assert joins == []  # main: a join per level and per file (10 for v2 here)
    assert got is not None and got.path == "/a" and got.memory_max_bytes == 1024 * MIB
    expected_limits = [f"{mount}/a/b/{limit}", f"{mount}/a/{limit}", f"{mount}/{limit}"]
    assert [p for p in read if p.endswith(limit)] == expected_limits
    charge = "memory.current" if version == 2 else "memory.usage_in_bytes"
    assert f"{mount}/a/{charge}" in read and f"{mount}/a/memory.stat" in read
    assert not any("//" in p for p in read)


def test_a_climbing_path_is_refused(tmp_path: Path) -> None:
    roots, _ = tree(tmp_path, 2)
    h = memory_hierarchy(roots)
    assert h is not None
    assert read_limit(h, "/a/../../etc") is None
