"""A real memory cgroup for tests (cgroup v1 ``memory`` or a hybrid box's v2 ``unified``
with the memory controller); the test skips where this machine does not allow one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup/unified")


def make_cgroup(limit_bytes: int) -> tuple[Path, Path]:
    """(cgroup dir, its procs file); skips when this machine does not allow it."""
    if os.geteuid() != 0:
        pytest.skip("creating a memory cgroup needs root")
    name = f"vramscope-test-{uuid.uuid4().hex[:8]}"
    if (V1 / "memory.limit_in_bytes").exists():
        group = V1 / name
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        return group, group / "cgroup.procs"
    if V2.exists() and "memory" in (V2 / "cgroup.controllers").read_text():
        group = V2 / name
        group.mkdir()
        (group / "memory.max").write_text(str(limit_bytes))
        return group, group / "cgroup.procs"
    pytest.skip("no memory cgroup controller here")
