"""What each tracked llama-server reports about its own run-time growth, for /metrics.

llama-server grows at run time by host buffers it fills with use: the prompt cache
(``--cache-ram``, 8192 MiB by default) and its slots' context checkpoints (estimation.md
1c; monitor/analysis/growth.py). The estimate at load cannot know how full they are; the
server's log can. For every tracked llama.cpp server started with ``--log-file``, the
daemon follows that log (monitor/logs/server_cache.py: a bounded tail, never through a
symlink, only numbers kept) once per tick, off the scrape, and ``/metrics`` exports what it
says as ``vramscope_process_reported_growth_bytes{pid,model,cause}`` (cause
``prompt_cache`` / ``checkpoints``). A server without a log, or whose log has not said yet,
has no series: unknown, never 0. ``VramscopeServerOverEstimate`` compares what a server
holds with its estimate at load plus this growth (issue 29 point 3).
"""

from __future__ import annotations

import threading

from collectors.base import Snapshot
from monitor.analysis.growth import CHECKPOINTS, PROMPT_CACHE
from monitor.logs.server_cache import ServerCacheReport, ServerLogFollower, log_file_of

GROWTH_CAUSES = (PROMPT_CACHE, CHECKPOINTS)


def reported_growth(report: ServerCacheReport) -> dict[str, int]:
    """cause -> bytes the log says the buffer holds now; a cause it says nothing of is
    left out (unknown)."""
    out: dict[str, int] = {}
    if report.cache_bytes is not None:
        out[PROMPT_CACHE] = report.cache_bytes
    elif report.cache_disabled:
        out[PROMPT_CACHE] = 0
    if report.checkpoint_lines or report.checkpoints:
        out[CHECKPOINTS] = report.checkpoint_bytes
    return out


class GrowthLogs:
    """One follower per live llama.cpp server with a ``--log-file``; :meth:`on_tick` runs
    on the sampling thread, :meth:`rows` on the HTTP threads."""

    def __init__(self) -> None:
        self._followers: dict[tuple[int, int], ServerLogFollower] = {}
        self._rows: dict[int, dict[str, int]] = {}
        self._lock = threading.Lock()

    def on_tick(self, snap: Snapshot) -> None:
        live: dict[tuple[int, int], ServerLogFollower] = {}
        for p in snap.processes:
            if p.engine != "llama.cpp":
                continue
            key = (p.pid, p.start_ticks)
            follower = self._followers.pop(key, None)
            if follower is None:
                path = log_file_of(p.argv, p.cwd)
                if path is None:
                    continue
                follower = ServerLogFollower(path, p.uid)
            live[key] = follower
        for gone in self._followers.values():
            gone.close()
        self._followers = live
        rows: dict[int, dict[str, int]] = {}
        for (pid, _), follower in live.items():
            report = follower.read()
            if report is not None and (found := reported_growth(report)):
                rows[pid] = found
        with self._lock:
            self._rows = rows

    def rows(self) -> dict[int, dict[str, int]]:
        """pid -> cause -> bytes, as of the last tick."""
        with self._lock:
            return dict(self._rows)

    def close(self) -> None:
        for follower in self._followers.values():
            follower.close()
        self._followers = {}
