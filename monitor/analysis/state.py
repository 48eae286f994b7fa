"""The state of the box: one snapshot, its memory picture, where it came from and when.

Every view of "the box now, or then" is made by :func:`box_state`, from one of these
origins:

- :class:`Live`: a tick sampled on this machine (by a Sampler made for it and closed, or
  the caller's own Sampler, which keeps its per-process state between ticks);
- :class:`StatusFile`: a recorded ``vramscope status --json`` document (``--state FILE``);
- :class:`DatabaseMoment`: the daemon's database at a moment (``--at TIME``): the last
  tick at or before it, refused outside what the database covers; or, on an open
  connection, one tick it holds (the post-mortem's last look at its victim);
- :class:`Remote`: a daemon's ``/api/v1/snapshot`` (``tui --remote URL``), shape-checked;
- :class:`Daemon`: the daemon's own latest tick (its HTTP API).

``predict``, ``diagnose``, ``postmortem``, the HTTP API and every TUI source go through
it. A failure is what each origin has always raised: ValueError for an unreadable state
file or a moment the database does not cover, StoreError for a database that cannot be
opened, RemoteError for a daemon that cannot be read.

The origins other than :class:`Live` are in monitor/analysis/origins.py, imported on first
use (``state.StatusFile`` and the others still work): ``vramscope status`` and a cold
``predict`` sample live and need none of them (issue 32 item 4: each frozen dataclass
costs about 1 ms to build at import).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from collectors.base import CgroupMemory, Roots, Snapshot
from monitor.analysis.picture import (
    DEFAULT_MARGIN_BYTES,
    Picture,
    picture_from_snapshot,
)

if TYPE_CHECKING:
    from monitor.analysis.origins import Daemon as Daemon
    from monitor.analysis.origins import DatabaseMoment as DatabaseMoment
    from monitor.analysis.origins import Origin as Origin
    from monitor.analysis.origins import Remote as Remote
    from monitor.analysis.origins import StatusFile as StatusFile

_ORIGINS = ("StatusFile", "DatabaseMoment", "Remote", "Daemon", "Origin")


def __getattr__(name: str) -> Any:
    """The origins moved to monitor/analysis/origins.py, imported when first named."""
    if name in _ORIGINS:
        from monitor.analysis import origins

        return getattr(origins, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Sampling(Protocol):
    """What samples this machine: the daemon's Sampler (monitor/daemon/sampler.py, kept
    open between ticks) or a command's one tick (monitor/daemon/oneshot.py). The edge
    that samples makes it: the judgements below the daemon never start collectors."""

    def sample(self) -> Snapshot: ...


class StatusSource(Protocol):
    """A daemon's status document, shape-checked: monitor/http/client.py ``DaemonClient``
    (the edge that talks to the daemon makes it)."""

    url: str

    def status_doc(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Live:
    """Sample this machine now with ``sampler`` (the caller's: the TUI's and the daemon's
    keep theirs open for the next tick; a command's samples once, OneShotSampler). None:
    :func:`box_state` refuses it (TypeError): sampling is the edge's to start."""

    roots: Roots = field(default_factory=Roots)
    enabled: Iterable[str] | None = None
    sampler: Sampling | None = None


@dataclass(frozen=True, slots=True, eq=False)
class BoxState:
    """The box at one moment: its snapshot and that snapshot's memory picture (with
    ``margin_bytes``), where it came from (``origin``: live, file, database, remote or
    daemon; ``where``: the path or URL, for a header) and when (``ts_ms``).

    Two states are equal when the box is: the moment, its devices, processes, their
    memory, hidden processes and cgroup limits, and the picture. Where a state came from,
    the order its origin listed things in, and what happened during the tick (its events,
    exits and collector runs, which only a live tick carries) are not part of it."""

    snapshot: Snapshot
    picture: Picture
    origin: str
    where: str
    margin_bytes: int = DEFAULT_MARGIN_BYTES

    @property
    def ts_ms(self) -> int:
        return self.snapshot.ts_ms

    @property
    def live(self) -> bool:
        """Sampled here and now (the only origin whose processes can be asked for more:
        their environment, predict's own cgroup)."""
        return self.origin == "live"

    def picture_for(self, margin_bytes: int, cgroup: CgroupMemory | None = None) -> Picture:
        """The picture with another margin, or for a launch under a cgroup limit."""
        if margin_bytes == self.margin_bytes and cgroup is None:
            return self.picture
        return picture_from_snapshot(self.snapshot, margin_bytes, cgroup)

    def _key(self) -> tuple[Any, ...]:
        s = self.snapshot
        box = replace(
            s,
            devices=tuple(sorted(s.devices, key=lambda d: d.device_id)),
            processes=tuple(sorted(s.processes, key=lambda p: p.pid)),
            memory=tuple(sorted(s.memory, key=lambda m: (m.pid, m.device_id))),
            hidden=tuple(sorted(s.hidden, key=lambda h: (h.pid, h.device_id or ""))),
            cgroups=tuple(sorted(s.cgroups, key=lambda c: c.pid)),
            exited=(),
            runs=(),
            events=(),
        )
        picture = {
            k: replace(d, processes=tuple(sorted(d.processes, key=lambda u: u.pid)))
            for k, d in self.picture.devices.items()
        }
        return box, self.picture.ts_ms, picture

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BoxState):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]


def box_state(origin: Origin, margin_bytes: int = DEFAULT_MARGIN_BYTES) -> BoxState:
    """The state of the box from ``origin``, its picture with ``margin_bytes``."""
    snap, kind, where = _snapshot(origin)
    return BoxState(snap, picture_from_snapshot(snap, margin_bytes), kind, where, margin_bytes)


def _snapshot(origin: Origin) -> tuple[Snapshot, str, str]:
    if isinstance(origin, Live):
        if origin.sampler is None:
            raise TypeError("a live origin needs its sampler (monitor/daemon/oneshot.py)")
        return origin.sampler.sample(), "live", "this machine"
    from monitor.analysis.origins import snapshot_of

    return snapshot_of(origin)


def chosen_origin(
    roots: Roots,
    enabled: Iterable[str] | None,
    db_path: Path,
    state: Path | None = None,
    at: str | None = None,
    sampler: Sampling | None = None,
) -> Origin:
    """The origin a command's options name: ``--state FILE``, else ``--at TIME`` (in
    ``db_path``), else live (sampled by ``sampler``, which the command makes: it is not
    started unless the origin is live). A time that cannot be read is a ValueError."""
    if state is not None:
        from monitor.analysis.origins import StatusFile

        return StatusFile(state)
    if at is not None:
        from monitor.analysis.origins import DatabaseMoment
        from monitor.store.moment import parse_time

        return DatabaseMoment(db_path, parse_time(at))
    return Live(roots, enabled, sampler)
