"""How long a test waits for a daemon it started to stop: a hang guard, never a timing.

After SIGTERM the daemon finishes the tick in flight, flushes its backlog and closes the
store, the HTTP server and its threads; on a box at load 12-25 that took over 30 s (issue
34), and a test that gave it 30 s failed although nothing was wrong. Only a daemon that
never stops should fail a test: :data:`STOP_GUARD_S` is far beyond any slow stop.
"""

from __future__ import annotations

STOP_GUARD_S = 300.0
