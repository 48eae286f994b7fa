"""The router links of a process table, worked out again only when the table changes."""

from __future__ import annotations

import threading
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
