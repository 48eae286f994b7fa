"""Time to OOM: how long a memory pool lasts at the rate it is filling now.

A pool is host RAM (held = total - MemAvailable: page cache is room), a dedicated GPU
(held = used), or a tracked server's memory cgroup (held = the charge it cannot reclaim,
``memory.current`` less clean page cache; the kernel OOM-kills inside it at
``memory.max``). Its forecast is ``(limit - held) / rate`` where the rate is the slope of
the held bytes over the last five minutes (at least one), by least squares, and only when
the filling is steady: each third of that window must rise at a quarter of its pace or more
(a model load is a step: steep in one third, flat in the others, so no forecast, during
the load or after it), and the pool must have grown by at least ``MIN_GROWTH_BYTES``
(noise is not growth). A prompt
cache filling as prompts arrive is steady growth of anonymous memory: the forecast says
when it reaches the limit, long before the pool is 92 % full.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from collectors.base import Snapshot

if TYPE_CHECKING:
    from collectors.base_rare import OomForecast

WINDOW_S = 300.0  # the slope is taken over (at most) this long
MIN_SPAN_S = 60.0  # and over at least this long
MIN_POINTS = 10
MIN_GROWTH_BYTES = 64 * 1024 * 1024
AGREE = 0.25  # each third of the window rises at least at this share of its slope


@dataclass(frozen=True, slots=True)
class PoolPoint:
    ts_ms: int
    held_bytes: int
    limit_bytes: int


def slope(points: Sequence[PoolPoint]) -> float | None:
    """Least-squares bytes per second of ``points``; None with fewer than two distinct times."""
    if len(points) < 2:
        return None
    t0 = points[0].ts_ms
    xs = [(p.ts_ms - t0) / 1000.0 for p in points]
    ys = [float(p.held_bytes) for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var <= 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def _thirds(window: Sequence[PoolPoint]) -> list[list[PoolPoint]]:
    """The window cut into three spans of equal time."""
    start, span = window[0].ts_ms, window[-1].ts_ms - window[0].ts_ms
    parts: list[list[PoolPoint]] = [[], [], []]
    for p in window:
        parts[min(2, 3 * (p.ts_ms - start) // max(1, span))].append(p)
    return parts


def forecast(pool: str, points: Sequence[PoolPoint]) -> OomForecast | None:
    """The pool's time to OOM from its recent points (oldest first), or None when it is
    not filling steadily: flat, shrinking, noise, too short a history, or a step (a load:
    some third of the window does not rise at the window's pace)."""
    if len(points) < MIN_POINTS:
        return None
    last = points[-1]
    window = [p for p in points if last.ts_ms - p.ts_ms <= WINDOW_S * 1000]
    if len(window) < MIN_POINTS or last.ts_ms - window[0].ts_ms < MIN_SPAN_S * 1000:
        return None
    # the cheap test first: on the sampling tick most pools are flat, and this one is
    # all most of them cost
    if last.held_bytes - min(p.held_bytes for p in window) < MIN_GROWTH_BYTES:
        return None
    rate = slope(window)
    if rate is None or rate <= 0:
        return None
    for part in _thirds(window):
        pace = slope(part)
        if pace is None or pace < AGREE * rate:
            return None
    room = max(0, last.limit_bytes - last.held_bytes)
    from collectors.base_rare import OomForecast  # seldom: issue 32 item 4

    return OomForecast(pool, last.held_bytes, last.limit_bytes, rate, room / rate)


def pool_points(snap: Snapshot) -> Iterable[tuple[str, PoolPoint]]:
    """Each pool of a snapshot with its held bytes and limit (see the module doc)."""
    for dev in snap.devices:
        if dev.total_bytes is None:
            continue
        if dev.memory_kind == "host" or dev.device_id == "host":
            if dev.available_bytes is not None:
                held = dev.total_bytes - dev.available_bytes
                yield "host", PoolPoint(snap.ts_ms, held, dev.total_bytes)
        elif dev.memory_kind == "dedicated" and dev.used_bytes is not None:
            limit = dev.total_bytes - (dev.reserved_bytes or 0)
            yield dev.device_id, PoolPoint(snap.ts_ms, dev.used_bytes, limit)
    seen = set()
    for c in snap.cgroups:
        g = c.cgroup
        if g.path in seen or g.memory_max_bytes is None or g.unreclaimable_bytes is None:
            continue
        seen.add(g.path)
        yield f"cgroup {g.path}", PoolPoint(snap.ts_ms, g.unreclaimable_bytes, g.memory_max_bytes)


class OomClock:
    """The recent points of every pool, kept across ticks (bounded: the window, at most
    ``max_points`` a pool), and the forecasts of the latest tick.

    Each pool also keeps its window's ascending minima (a monotonic deque), so the
    forecast's first tests (enough points, span and growth over the window's lowest held
    bytes) cost O(1) a tick: a flat pool, most of them, is never copied or scanned (issue
    32 item 3: ~0.2 ms a tick at 1 Hz with the 300 points of a host pool's window)."""

    def __init__(self, max_points: int = 2048) -> None:
        self.max_points = max_points
        self._points: dict[str, deque[PoolPoint]] = {}
        self._lows: dict[str, deque[PoolPoint]] = {}

    def tick(self, snap: Snapshot) -> tuple[OomForecast, ...]:
        now = dict(pool_points(snap))
        for pool in list(self._points):
            if pool not in now:
                del self._points[pool]  # gone (a server stopped): its history with it
                self._lows.pop(pool, None)
        out = []
        for pool, point in now.items():
            points = self._points.setdefault(pool, deque(maxlen=self.max_points))
            if points and point.ts_ms <= points[-1].ts_ms:
                continue  # a repeated or older tick
            points.append(point)
            while points and point.ts_ms - points[0].ts_ms > WINDOW_S * 1000:
                points.popleft()
            if not self._may_grow(pool, points):
                continue  # what forecast() would answer None at its first tests
            found = forecast(pool, list(points))
            if found is not None:
                out.append(found)
        return tuple(out)

    def _may_grow(self, pool: str, points: deque[PoolPoint]) -> bool:
        """forecast()'s cheap tests on ``points`` (its whole window: trimmed above) with
        the window's minimum kept incrementally: at least ``MIN_POINTS`` over
        ``MIN_SPAN_S``, grown by ``MIN_GROWTH_BYTES`` from its lowest point."""
        last = points[-1]
        lows = self._lows.setdefault(pool, deque())
        while lows and lows[-1].held_bytes >= last.held_bytes:
            lows.pop()
        lows.append(last)
        while lows[0].ts_ms < points[0].ts_ms:  # left the window (or the maxlen)
            lows.popleft()
        return (
            len(points) >= MIN_POINTS
            and last.ts_ms - points[0].ts_ms >= MIN_SPAN_S * 1000
            and last.held_bytes - lows[0].held_bytes >= MIN_GROWTH_BYTES
        )
