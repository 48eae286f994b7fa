"""The history series the TUI draws (one list of ``(ts_ms, bytes)`` points per label),
kept to what a sparkline can show: each bucket's peak, and the newest sample itself."""

from __future__ import annotations

Series = dict[str, list[tuple[int, int]]]

HISTORY_POINTS = 240  # a sparkline's worth: wider than any terminal


def ending_at(points: list[tuple[int, int]], last: tuple[int, int]) -> list[tuple[int, int]]:
    """Bucket peaks, then the newest sample itself (unless it is the last point already)."""
    return points if points and points[-1][0] >= last[0] else [*points, last]


def add_point(out: Series, label: str, point: tuple[int, int], ending: bool) -> None:
    points = out.setdefault(label, [])
    if not ending or not points or point[0] > points[-1][0]:
        points.append(point)


def downsample(
    points: list[tuple[int, int]],
    buckets: int = HISTORY_POINTS,
) -> list[tuple[int, int]]:
    """At most ``buckets`` points, keeping each bucket's maximum (peaks matter here)."""
    if len(points) <= buckets:
        return points
    t0, t1 = points[0][0], points[-1][0]
    width = max(1, (t1 - t0) // buckets + 1)
    out: dict[int, tuple[int, int]] = {}
    for ts, value in points:
        b = (ts - t0) // width
        if b not in out or value > out[b][1]:
            out[b] = (ts, value)
    return [out[b] for b in sorted(out)]
