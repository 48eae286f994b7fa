"""What a frame derives from inputs that an idle box repeats every refresh, worked out
again only when those inputs change: the router links of the process table, and each
server's measured memory and verdict."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from collectors.base import Snapshot


class LinksMemo:
    """``snapshot_links(snap)`` (monitor/servers/router.py) of the last process table.

    The links come from the processes' command lines, parents and working folders and
    from the snapshot's recorded router environment, nothing else (no file is read), so
    an equal table (``snap.processes`` and ``snap.router_env`` equal to the last) has the
    same links. An idle box sends an equal table every refresh; parsing its servers'
    command lines again was ~0.5 ms of each refresh (bench/bench_tui_refresh.py).
    ``computed`` counts the real calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[tuple[Any, Any], Any] | None = None
        self.computed = 0

    def __call__(self, snap: Snapshot) -> Any:
        from monitor.api import snapshot_links

        key = (snap.processes, snap.router_env)
        with self._lock:
            last = self._last
        if last is not None and last[0] == key:
            return last[1]
        links = snapshot_links(snap)
        with self._lock:
            self._last = (key, links)
            self.computed += 1
        return links


class JudgedMemo:
    """``judged(a, memory, helpers)`` (monitor/analysis/assess.py) of each server's last
    frame, again only when it changes.

    A verdict is pure in the assessment, the memory rows of the server and its helpers
    (monitor/analysis/measured.py ``measure`` reads no others) and the helpers: the same
    assessment object (FrameBuilder keeps one per launch) with equal rows gives the same
    answer. Judging three idle servers again each refresh was the largest part of
    building a frame (py-spy of the idle TUI, bench/RESULTS.md). ``computed`` counts the
    real calls; ``keep`` forgets the servers that are gone."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[Any, tuple[Any, ...], tuple[int, ...], Any]] = {}
        self.computed = 0

    def __call__(self, a: Any, memory: Iterable[Any], helpers: Iterable[int] = ()) -> Any:
        from monitor.api import judged

        held = tuple(helpers)
        pids = {a.pid, *held}
        rows = tuple(m for m in memory if m.pid in pids)
        last = self._last.get(a.pid)
        if last is not None and last[0] is a and last[1] == rows and last[2] == held:
            return last[3]
        out = judged(a, rows, held)
        self._last[a.pid] = (a, rows, held, out)
        self.computed += 1
        return out

    def keep(self, pids: set[int]) -> None:
        """Forget every server but ``pids`` (the frame's): bounded by what runs."""
        if any(pid not in pids for pid in self._last):
            self._last = {pid: v for pid, v in self._last.items() if pid in pids}
