"""The live TUI's rule for short-lived servers, the daemon's rule (issue 32 item 3).

A busy box starts several short-lived ``llama-server``s a second (test harnesses,
health probes). The daemon defers a server's assessment to its second tick unless it
holds GPU memory (monitor/daemon/assessor.py) and gives a process gone before its second
tick no row, only a count (monitor/store/database.py, ``meta.short_lived_processes``),
unless its exit alerts. Live, the TUI does the same here: a server seen in one tick only
and not on a GPU gets no row (so no estimate and no table rebuild), and its exit no event
line unless the exit is a warning or worse (a crash, an OOM kill: monitor/exits.py); it
is counted in ``short_lived``. A server that lives on shows from its second tick (one
refresh later); a GPU holder, and every server already running at the TUI's first tick,
from the first. ``ChurnGate.tick`` takes them out of the live tick's snapshot before the
frame is built (tui/source.py, LiveSource), so nothing downstream sees them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

HOST = "host"  # monitor.estimate.model.HOST: host RAM, not a GPU

Key = tuple[int, int]  # (pid, start_ticks): one process, never a reused pid


@dataclass(slots=True)
class ChurnGate:
    """The processes of the last two live ticks, and what they hid."""

    previous: frozenset[Key] | None = None  # the last tick's processes (None: no tick yet)
    before: frozenset[Key] | None = None  # the tick before that
    previous_holders: frozenset[int] = frozenset()  # pids on a GPU at the last tick
    short_lived: int = 0  # servers' exits hidden so far (gone before their second tick)

    def tick(self, state: Any) -> Any:
        """``state`` (a live BoxState) without this tick's first-tick servers off the GPUs
        and without the quiet exits of those seen in the last tick only; then move on."""
        from monitor.api import classify_legacy

        snap = state.snapshot
        holders = holders_of(snap)
        procs = [p for p in snap.processes if not self.first_tick(p, holders)]
        exits = [x for x in snap.exited if not self.hides_exit(x, classify_legacy(x)[1])]
        self.before = self.previous
        self.previous = frozenset((p.pid, p.start_ticks) for p in snap.processes)
        self.previous_holders = holders
        if len(procs) == len(snap.processes) and len(exits) == len(snap.exited):
            return state
        return replace(state, snapshot=replace(snap, processes=tuple(procs), exited=tuple(exits)))

    def first_tick(self, info: Any, holders: frozenset[int]) -> bool:
        """Whether ``info`` (a ProcessInfo) is a server new this tick and not on a GPU, and
        so waits a tick before it is shown or assessed."""
        if self.previous is None or info.engine is None or info.pid in holders:
            return False
        return (info.pid, info.start_ticks) not in self.previous

    def hides_exit(self, gone: Any, severity: str) -> bool:
        """Whether ``gone`` (an ExitedProcess this tick) was seen in the last tick only,
        not on a GPU, and exited without a warning: counted, no event."""
        key = (gone.pid, gone.start_ticks)
        if self.previous is None or self.before is None or severity not in ("info", "ok"):
            return False
        hidden = key in self.previous and key not in self.before
        hidden = hidden and gone.pid not in self.previous_holders
        self.short_lived += hidden
        return hidden


def holders_of(snap: Any) -> frozenset[int]:
    """The pids holding memory on a GPU in ``snap`` (its per-process memory samples)."""
    return frozenset(m.pid for m in snap.memory if m.device_id != HOST)
