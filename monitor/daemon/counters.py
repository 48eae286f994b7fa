"""Counts the daemon keeps for /metrics: tracked exits by class and model, log records by kind.

A scrape sees only the latest tick, and an exit is reported on one tick only: counting
here, on every tick, means no exit between two scrapes is lost. The cause label is a fixed
set (every exit class of monitor/exits.py; a value outside it counts as
``unknown``), and so is the log record kind (monitor/logs/kmsg.py). Every series is present
at 0 before its first exit, so ``increase()`` sees the first one.

The model label (issue 29: two crashes of two models are two alerts, each naming its
model) is the model file's base name or the engine's model id, at most
``MAX_MODEL_CHARS`` characters, ``""`` for a process that serves no model. Its series stay
bounded: at most ``MODEL_SLOTS`` models have series of their own. A model takes a slot when
a tracked server first serves it (all causes at 0 from then on) and keeps it while any of
its servers lives and ``MODEL_HOLD_MS`` after the last one was seen or exited (longer than
any alert's ``increase()`` window); only then may a new model take its place (its series
then vanish). While every slot is held, a new model's exits count under
``model="other"``. So a daemon exports at most 12 causes x (``MODEL_SLOTS`` + 2) series.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from collectors.base import DeviceEvent, ExitedProcess, ProcessInfo

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
MODEL_SLOTS = 16
MODEL_HOLD_MS = 3_600_000
MAX_MODEL_CHARS = 64
NO_MODEL = ""
OTHER_MODEL = "other"


def _process_model(p: ProcessInfo) -> str:
    from monitor.servers.label import model_label

    return model_label(p.argv, MAX_MODEL_CHARS) if p.engine or p.argv else NO_MODEL


@dataclass(frozen=True, slots=True)
class CountTotals:
    """A copy of the counts at one instant (safe to read from any thread)."""

    exits: dict[str, int]  # by cause, every model summed
    log_events: dict[str, int]
    exits_by_model: dict[tuple[str, str], int] = field(default_factory=dict)  # (cause, model)


def _zeros(model: str) -> dict[tuple[str, str], int]:
    return {(cause, model): 0 for cause in EXIT_CAUSES}


@dataclass
class EventCounts:
    """Totals since the daemon started; :meth:`observe` runs on the sampling thread,
    :meth:`totals` on the HTTP threads."""

    label: Callable[[ProcessInfo], str] = _process_model
    exits: dict[tuple[str, str], int] = field(
        default_factory=lambda: _zeros(NO_MODEL) | _zeros(OTHER_MODEL)
    )
    log_events: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LOG_KINDS, 0))
    _models: dict[tuple[int, int], str] = field(default_factory=dict)  # live: (pid, start)
    _slots: dict[str, int] = field(default_factory=dict)  # model -> last seen or exited (ms)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(
        self,
        exited: Iterable[ExitedProcess],
        events: Iterable[DeviceEvent],
        processes: Iterable[ProcessInfo] = (),
        now_ms: int = 0,
    ) -> None:
        """Count one tick: ``exited`` are named by the model their process served when it
        was last seen in ``processes`` (the tracked processes of earlier ticks)."""
        with self._lock:
            for gone in exited:
                cause = gone.cause if gone.cause in EXIT_CAUSES else "unknown"
                model = self._slot(self._models.pop((gone.pid, gone.start_ticks), ""), now_ms)
                self.exits[(cause, model)] = self.exits.get((cause, model), 0) + 1
            for ev in events:
                if ev.kind in self.log_events:  # a merged event counts the lines it stands for
                    lines = ev.data.get("lines")
                    self.log_events[ev.kind] += 1 + (lines if isinstance(lines, int) else 0)
            live: dict[tuple[int, int], str] = {}
            for p in processes:
                key = (p.pid, p.start_ticks)
                live[key] = self._models[key] if key in self._models else self.label(p)
                self._slot(live[key], now_ms)
            self._models = live

    def _slot(self, model: str, now_ms: int) -> str:
        """The model label ``model``'s exits count under, its slot touched at ``now_ms``."""
        if not model or model in (NO_MODEL, OTHER_MODEL):
            return model
        if model not in self._slots:
            if len(self._slots) >= MODEL_SLOTS and not self._free_a_slot(now_ms):
                return OTHER_MODEL
            self.exits.update(_zeros(model))
        self._slots[model] = now_ms
        return model

    def _free_a_slot(self, now_ms: int) -> bool:
        """Drop the slot least recently touched, if that was ``MODEL_HOLD_MS`` ago."""
        oldest = min(self._slots, key=lambda m: self._slots[m])
        if now_ms - self._slots[oldest] < MODEL_HOLD_MS:
            return False
        del self._slots[oldest]
        for cause in EXIT_CAUSES:
            self.exits.pop((cause, oldest), None)
        return True

    def totals(self) -> CountTotals:
        with self._lock:
            by_cause = dict.fromkeys(EXIT_CAUSES, 0)
            for (cause, _), n in self.exits.items():
                by_cause[cause] += n
            return CountTotals(by_cause, dict(self.log_events), dict(self.exits))
