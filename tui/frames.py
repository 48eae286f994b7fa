"""What a live or remote source keeps of the frames it built, in a fixed memory budget.

An hour of whole frames (the old ``deque(maxlen=3600)`` of :class:`~tui.source.Frame`:
each one the whole snapshot, every process's row, the picture, the assessments) grew
the live TUI by 15 MiB in 7.5 minutes on a quiet box and 70 MiB in 10 on a busy one
(issue 32). The history screen and the sparklines only plot one number per series and
tick, so :class:`FrameStore` keeps:

- ``keep_ticks`` compact :class:`Tick` records (default 3,600: an hour at 1 s): the tick's
  time, its series labels (``device:<id>``, ``model:<name> (pid N)``: one tuple shared by
  every tick whose labels did not change, each string shared with the tick before) and
  their values in one
  ``array('q')``; at most ``MAX_SERIES`` series a tick (devices first, then the largest
  servers), so a box running hundreds of servers cannot grow a tick without end;
- the last ``keep_frames`` whole frames (default 60: a minute at 1 s) for replay
  (``at``/``ticks``): live replay steps back through the last minute, a daemon's database
  through everything it keeps.

``BUDGET_BYTES`` is the tick ring's budget for ``keep_ticks`` ticks of up to 16 series
(tests/tui/test_frames.py feeds it 7,200 ticks of a realistic frame and measures it with
``tracemalloc``); the whole frames add ``keep_frames`` times one frame's size.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui.source import Frame

MAX_SERIES = 64
"""Series kept per tick: devices first, then servers by their measured bytes."""
BUDGET_BYTES = 2 * 2**20
"""The tick ring's budget for 3,600 ticks of up to 16 series (``Tick`` ~ 56 B, its
``array('q')`` ~ 80 B + 8 B a series; labels shared): ~0.5 MiB for 5 series, measured."""


@dataclass(frozen=True, slots=True)
class Tick:
    """One frame as the history screen plots it: ``values[i]`` is ``labels[i]``'s bytes."""

    ts_ms: int
    labels: tuple[str, ...]
    values: array[int]

    def points(self) -> Iterator[tuple[str, int]]:
        return zip(self.labels, self.values, strict=True)


def tick_of(frame: Frame) -> tuple[tuple[str, ...], list[int]]:
    """(labels, values) of one frame: each device's used bytes, each server's measured
    bytes (unknown ones left out, never 0), at most ``MAX_SERIES``."""
    devices = [
        (f"device:{pic.device_id}", pic.used_bytes)
        for pic in frame.picture.devices.values()
        if pic.used_bytes is not None
    ]
    servers = sorted(
        (
            (f"model:{row.model} (pid {row.pid})", row.measured_bytes)
            for row in frame.models
            if row.measured_bytes is not None
        ),
        key=lambda kv: -kv[1],
    )
    pairs = (devices + servers)[:MAX_SERIES]
    labels = tuple(label for label, _ in pairs)
    return labels, [value for _, value in pairs]


class FrameStore:
    """Compact ticks for history, a short ring of whole frames for replay. Not locked:
    the owning source holds its lock around every call."""

    def __init__(self, keep_ticks: int = 3600, keep_frames: int = 60) -> None:
        self._ticks: deque[Tick] = deque(maxlen=keep_ticks)
        self._frames: deque[Frame] = deque(maxlen=max(1, keep_frames))
        self._labels: tuple[str, ...] = ()

    def add(self, frame: Frame) -> None:
        labels, values = tick_of(frame)
        if labels == self._labels:
            labels = self._labels  # one tuple for every tick of an unchanged box
        else:  # one string per label while it lasts; no table that outlives the ring
            known = {label: label for label in self._labels}
            labels = tuple(known.get(label, label) for label in labels)
        self._labels = labels
        self._ticks.append(Tick(frame.ts_ms, labels, array("q", values)))
        self._frames.append(frame)

    def __len__(self) -> int:
        return len(self._ticks)

    def series(
        self, device_id: str | None, since_ms: int, until_ms: int
    ) -> dict[str, list[tuple[int, int]]]:
        """label -> [(ts_ms, bytes)] of the ticks from ``since_ms`` to ``until_ms``; with
        ``device_id``, that device's series only (and every server's)."""
        wanted = None if device_id is None else f"device:{device_id}"
        out: dict[str, list[tuple[int, int]]] = {}
        for tick in self._ticks:
            if not since_ms <= tick.ts_ms <= until_ms:
                continue
            for label, value in tick.points():
                if wanted is None or label == wanted or not label.startswith("device:"):
                    out.setdefault(label, []).append((tick.ts_ms, value))
        return out

    def at(self, ts_ms: int) -> Frame | None:
        """The last whole frame at or before ``ts_ms``, else the oldest kept; None if none."""
        before = [f for f in self._frames if f.ts_ms <= ts_ms]
        if before:
            return before[-1]
        return self._frames[0] if self._frames else None

    def ticks(self, since_ms: int, until_ms: int) -> list[int]:
        """The times of the whole frames kept (those ``at`` can show) in the range."""
        return [f.ts_ms for f in self._frames if since_ms <= f.ts_ms <= until_ms]
