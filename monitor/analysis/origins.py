"""The origins of a box state other than a live sample (monitor/analysis/state.py):
a recorded status document, the daemon's database at a moment, a remote daemon, and the
daemon's own latest tick. Kept apart from state.py so that the commands that only sample
live (``vramscope status``, a cold ``predict``) do not build these classes at import
(issue 32 item 4); ``monitor.analysis.state`` still names each of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.base import Snapshot
from monitor.analysis.picture import load_state, snapshot_from_status_json
from monitor.analysis.state import Live, StatusSource


@dataclass(frozen=True, slots=True)
class StatusFile:
    path: Path


@dataclass(frozen=True, slots=True)
class DatabaseMoment:
    """``db`` None: open ``db_path`` read-only and take the last tick at or before
    ``ts_ms``; an open connection: ``ts_ms`` is a tick it holds, read as it is."""

    db_path: Path | None
    ts_ms: int
    db: Any = None


@dataclass(frozen=True, slots=True)
class Remote:
    client: StatusSource


@dataclass(frozen=True, slots=True)
class Daemon:
    """The daemon's latest tick, as its sampling thread swapped it in."""

    snapshot: Snapshot


Origin = Live | StatusFile | DatabaseMoment | Remote | Daemon


def snapshot_of(origin: object) -> tuple[Snapshot, str, str]:
    """The snapshot of a non-live origin, its kind and where it came from."""
    if isinstance(origin, Daemon):
        return origin.snapshot, "daemon", "this daemon"
    if isinstance(origin, StatusFile):
        return load_state(origin.path), "file", str(origin.path)
    if isinstance(origin, DatabaseMoment):
        from monitor.store.moment import snapshot_at, snapshot_in

        if origin.db is not None:
            return snapshot_in(origin.db, origin.ts_ms), "database", str(origin.db_path)
        if origin.db_path is None:
            raise ValueError("a database moment needs the database's path")
        return snapshot_at(origin.db_path, origin.ts_ms), "database", str(origin.db_path)
    if isinstance(origin, Remote):
        client = origin.client
        return snapshot_from_status_json(client.status_doc()), "remote", client.url
    raise TypeError(f"not an origin of the box state: {origin!r}")
