"""Counts the daemon keeps for /metrics: tracked exits by class and log records by kind.

A scrape sees only the latest tick, and an exit is reported on one tick only: counting
here, on every tick, means no exit between two scrapes is lost. The label values are
fixed sets (every exit class of monitor/analysis/exits.py, every record kind of
monitor/logs/kmsg.py), each present from the start at 0 so ``increase()`` sees the first
one; a value outside the set counts as ``unknown`` / is not counted, so the series stay
bounded however many processes come and go.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from collectors.base import DeviceEvent, ExitedProcess

EXIT_CAUSES = (
    "exited",
    "exited_error",
    "stopped",
    "stopped_during_load",
    "killed",
    "crashed",
    "oom_killed",
    "cgroup_oom_killed",
    "oomd_killed",
    "engine_oom",
    "signalled",
    "unknown",
)
LOG_KINDS = (
    "oom_kill",
    "oomd_kill",
    "oom_invoked",
    "xid",
    "amdgpu_error",
    "app_oom",
    "engine_oom",
)


@dataclass(frozen=True, slots=True)
class CountTotals:
    """A copy of the counts at one instant (safe to read from any thread)."""

    exits: dict[str, int]
    log_events: dict[str, int]


@dataclass
class EventCounts:
    """Totals since the daemon started; :meth:`observe` runs on the sampling thread,
    :meth:`totals` on the HTTP threads."""

    exits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EXIT_CAUSES, 0))
    log_events: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LOG_KINDS, 0))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, exited: Iterable[ExitedProcess], events: Iterable[DeviceEvent]) -> None:
        with self._lock:
            for gone in exited:
                cause = gone.cause if gone.cause in self.exits else "unknown"
                self.exits[cause] += 1
            for ev in events:
                if ev.kind in self.log_events:
                    self.log_events[ev.kind] += 1

    def totals(self) -> CountTotals:
        with self._lock:
            return CountTotals(dict(self.exits), dict(self.log_events))
