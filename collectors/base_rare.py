"""The parts of a collector's :class:`~collectors.base.Reading` and of a
:class:`~collectors.base.Snapshot` that a tick has only sometimes: a process it cannot
see, one that exited, a device event, a cgroup limit, a pool filling towards OOM.

Kept apart from collectors/base.py so that a one-shot command (``vramscope status``, a
cold ``predict``) that meets none of them does not build these classes at import (issue
32 item 4: each frozen dataclass costs about 1 ms there); ``collectors.base`` still names
every one of them (imported on first use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collectors.base import CgroupMemory, EventValue, Severity


@dataclass(frozen=True, slots=True)
class ProcessCgroup:
    """A tracked server's memory cgroup limit, sampled each tick."""

    pid: int
    cgroup: CgroupMemory


@dataclass(frozen=True, slots=True)
class HiddenProcess:
    """A process we cannot see (no ``/proc`` entry here, or denied), with the reason and
    the fix. ``used_bytes`` is what the device still reports it holding (NVML's per-process
    figure for a pid outside our PID namespace): counted as attributed on ``device_id``."""

    pid: int
    reason: str
    device_id: str | None = None
    comm: str | None = None
    hint: str | None = None
    used_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ExitedProcess:
    """A tracked process that was present on the previous tick and is gone now, or that
    has exited but is still listed because its parent has not reaped it (a zombie:
    ``state`` "Z", with the exit status ``/proc/PID/stat`` field 52 gives when readable:
    ``exit_code`` for a normal exit, ``exit_signal`` for a kill)."""

    pid: int
    start_ticks: int
    last_seen_ms: int
    how: str | None = None  # "killed by the kernel OOM killer" (the daemon), ...
    comm: str | None = None
    state: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    core_dumped: bool | None = None
    exit_source: str | None = None  # "connector" | "zombie" | "kernel log": status from where
    # monitor/exits.py: "exited", "stopped", "crashed", "oom_killed", ...
    cause: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    """Something a device reported, such as an NVIDIA Xid; stored in the events table."""

    ts_ms: int
    device_id: str
    kind: str
    severity: Severity
    message: str
    data: dict[str, EventValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OomForecast:
    """A memory pool's time to OOM at the rate it is steadily filling
    (monitor/analysis/time_to_oom.py): ``pool`` is "host", a GPU's device id, or
    "cgroup /path"; ``seconds`` until ``held_bytes`` reaches ``limit_bytes``."""

    pool: str
    held_bytes: int
    limit_bytes: int
    rate_bytes_per_s: float
    seconds: float
