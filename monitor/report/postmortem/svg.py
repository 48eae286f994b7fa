"""The post-mortem's memory chart as one ``<svg>`` element (well-formed XML, no scripts):
the layers of monitor/report/postmortem/chart.py drawn onto a time x bytes frame, from
the jinja2 template ``templates/chart.svg.j2`` (autoescaped; this module writes the
numbers, the template escapes the labels)."""

from __future__ import annotations

import math
from typing import Any

from monitor.analysis.postmortem_doc import PostMortem, as_postmortem
from monitor.report.postmortem.chart import (
    LIMIT_COLOR,
    LIMIT_OFF_SCALE,
    MAX_SVG_POINTS,
    Chart,
    chart_of,
    thin,
)
from monitor.report.postmortem.common import (
    Point,
    clean,
    fmt_bytes,
    fmt_hms,
    fmt_ts,
    series,
    x_range,
)
from monitor.report.postmortem.jinja import render
from monitor.units import GIB

# SVG geometry (user units of the viewBox).
SVG_W = 960
PLOT_LEFT = 78
PLOT_RIGHT = SVG_W - 24
PLOT_TOP = 28
PLOT_BOTTOM = 358
LEGEND_TOP = PLOT_BOTTOM + 52
LEGEND_ROW = 18
LEGEND_COLS = 2
VICTIM_COLOR = "#d62728"
DEVICE_COLOR = "#333333"
PALETTE = (
    "#1f77b4",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
    "#393b79",
    "#637939",
    "#843c39",
)


def downsample(points: list[Point], limit: int = MAX_SVG_POINTS) -> list[Point]:
    """At most ``limit`` points: per bucket of consecutive points, its minimum and maximum in
    time order, so peaks and troughs survive."""
    if len(points) <= limit:
        return list(points)
    buckets = max(limit // 2, 1)
    size = math.ceil(len(points) / buckets)
    out: list[Point] = []
    for i in range(0, len(points), size):
        chunk = points[i : i + size]
        lo = min(range(len(chunk)), key=lambda j: chunk[j][1])
        hi = max(range(len(chunk)), key=lambda j: chunk[j][1])
        for j in sorted({lo, hi}):
            out.append(chunk[j])
    return out


def _nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


TIME_STEPS_S = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
)


def _time_ticks(start: float, end: float, target: int = 8) -> list[float]:
    span_s = (end - start) / 1000
    step = next((s for s in TIME_STEPS_S if span_s / s <= target), None)
    step_ms = (step or math.ceil(span_s / target / 86400) * 86400) * 1000
    first = math.ceil(start / step_ms) * step_ms
    ticks: list[float] = []
    t = first
    while t <= end and len(ticks) < 100:
        ticks.append(t)
        t += step_ms
    return ticks


def _f(x: float) -> str:
    s = f"{x:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _legend_label(text: str, limit: int = 62) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Frame:
    """The plot's scales: time ``x0..x1`` and bytes ``0..ymax`` onto the plot area."""

    __slots__ = ("x0", "x1", "ymax")

    def __init__(self, x0: float, x1: float, ymax: float) -> None:
        self.x0, self.x1, self.ymax = x0, x1, ymax

    def sx(self, t: float) -> float:
        return PLOT_LEFT + (t - self.x0) / (self.x1 - self.x0) * (PLOT_RIGHT - PLOT_LEFT)

    def sy(self, v: float) -> float:
        return PLOT_BOTTOM - min(max(v / self.ymax, 0.0), 1.0) * (PLOT_BOTTOM - PLOT_TOP)


def _axes(f: _Frame, chart: Chart, xr: tuple[float, float] | None) -> dict[str, Any]:
    """The y axis in GiB (nice steps from 0 up to the top) and the x axis in HH:MM:SS UTC."""
    step = _nice_step(f.ymax / GIB, 5)
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    y_ticks = []
    k = 0
    while k * step * GIB <= f.ymax * (1 + 1e-9) and k < 50:
        y = f.sy(k * step * GIB)
        y_ticks.append((_f(y), _f(y + 4), f"{k * step:.{decimals}f}"))
        k += 1
    x_ticks = [(_f(f.sx(t)), fmt_hms(t)) for t in _time_ticks(f.x0, f.x1)] if xr else []
    return {
        "y_ticks": y_ticks,
        "y_title": None if xr is None else clean(chart.device_id) if chart.device_id else "",
        "x_ticks": x_ticks,
        "x_title": None if xr is None else fmt_ts(f.x0)[:10],
    }


def _bands(f: _Frame, chart: Chart, colors: dict[str, str]) -> list[tuple[str, int, str, str, str]]:
    """The others, stacked: each band from the one below's top to its own top."""
    keep = thin(chart.times, chart.bands[-1][1]) if chart.bands else []
    below = [0.0] * len(chart.times)
    out = []
    for rank, (s, top) in enumerate(chart.bands):
        upper = [f"{_f(f.sx(chart.times[j]))},{_f(f.sy(top[j]))}" for j in keep]
        lower = [f"{_f(f.sx(chart.times[j]))},{_f(f.sy(below[j]))}" for j in reversed(keep)]
        out.append((s.key, rank, colors[s.key], " ".join(upper + lower), s.label))
        below = top
    return out


def _lines(f: _Frame, chart: Chart) -> list[tuple[bool, str, str, str]]:
    """The device's total in use (dashed), then the victim on top of everything."""
    out = []
    for line in (chart.device, chart.victim):
        if line is None or not line.points:
            continue
        pts = downsample(line.points)
        if len(pts) == 1:
            pts = pts * 2
        coords = " ".join(f"{_f(f.sx(t))},{_f(f.sy(v))}" for t, v in pts)
        out.append((line.victim, line.key, coords, line.label))
    return out


def _legend(entries: list[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
    """Victim, device total, the bands from the bottom up, the limit: two columns."""
    colw = (SVG_W - PLOT_LEFT) / LEGEND_COLS
    out = []
    for i, (key, label, color, kind) in enumerate(entries):
        r, c = divmod(i, LEGEND_COLS)
        lx = PLOT_LEFT // 2 + c * colw
        out.append(
            {
                "key": key,
                "kind": kind,
                "color": color,
                "x": _f(lx),
                "x_end": _f(lx + 24),
                "text_x": _f(lx + 30),
                "y": LEGEND_TOP + r * LEGEND_ROW,
                "bold": kind in ("victim", "limit"),
                "label": _legend_label(label),
            }
        )
    return out


def _entries(chart: Chart, colors: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """(key, label, colour, swatch kind) of each legend entry."""
    entries: list[tuple[str, str, str, str]] = []
    if chart.victim is not None:
        entries.append((chart.victim.key, chart.victim.label, VICTIM_COLOR, "victim"))
    if chart.device is not None:
        entries.append((chart.device.key, chart.device.label, DEVICE_COLOR, "device"))
    for s, _ in chart.bands:
        entries.append((s.key, s.label, colors[s.key], "band"))
    if chart.limit_bytes:
        label = f"{chart.limit_label}: {fmt_bytes(chart.limit_bytes)}"
        entries.append(("limit", label, LIMIT_COLOR, "limit"))
    return entries


def _scale(chart: Chart) -> tuple[float, bool]:
    """The top of the y axis and whether the limit is drawn to scale (not when it is
    more than ``LIMIT_OFF_SCALE`` times the data's peak)."""
    lines = [s for s in (chart.victim, chart.device) if s is not None and s.points]
    data_max = max(
        [v for s in lines for _, v in s.points]
        + [max(top, default=0.0) for _, top in chart.bands[-1:]],
        default=0.0,
    )
    limit = chart.limit_bytes
    drawn = (
        limit is not None and limit > 0 and (data_max <= 0 or limit <= data_max * LIMIT_OFF_SCALE)
    )
    ymax = max(data_max, limit if drawn and limit else 0.0)
    if ymax <= 0:
        ymax = GIB
    return ymax * 1.04, drawn  # headroom so the top line and its label stay inside the plot


def _death(f: _Frame, death: float) -> dict[str, str]:
    return {"x": _f(f.sx(death)), "label": fmt_hms(death)}


def render_svg(doc: PostMortem | object) -> str:
    """The memory chart of the victim's device as one ``<svg>`` element (well-formed XML):
    the other processes there as stacked bands (top five by peak, the rest as "others"),
    the victim as a bold red line drawn over them, the device's measured total dashed and
    the limit (the victim's cgroup limit from the kernel record, else the device's capacity)
    as a labelled horizontal line. Processes on other devices are named under the chart."""
    pm = as_postmortem(doc)
    xr = x_range(pm, series(pm))
    chart = chart_of(pm, xr)
    death = pm.death_ms
    colors = {
        s.key: ("#b0b0b0" if s.key == "proc-others" else PALETTE[i % len(PALETTE)])
        for i, (s, _) in enumerate(chart.bands)
    }
    entries = _entries(chart, colors)
    note = ""
    if chart.not_charted:
        note = "not charted (other devices, see the table): " + ", ".join(chart.not_charted)
    rows = max(math.ceil(len(entries) / LEGEND_COLS), 1) + (1 if note else 0)
    ymax, limit_drawn = _scale(chart)
    f = _Frame(*(xr if xr else (0.0, 1.0)), ymax)
    has_lines = any(s is not None and s.points for s in (chart.victim, chart.device))
    limit = None
    if chart.limit_bytes and xr is not None:
        limit = {
            "drawn": limit_drawn,
            "y": _f(f.sy(chart.limit_bytes)),
            "text_y": _f(f.sy(chart.limit_bytes) - 5),
            "label": f"{chart.limit_label}: {fmt_bytes(chart.limit_bytes)}",
        }
    values = {
        "width": SVG_W,
        "height": LEGEND_TOP + rows * LEGEND_ROW + 8,
        "left": PLOT_LEFT,
        "right": PLOT_RIGHT,
        "top": PLOT_TOP,
        "bottom": PLOT_BOTTOM,
        "plot_w": PLOT_RIGHT - PLOT_LEFT,
        "plot_h": PLOT_BOTTOM - PLOT_TOP,
        "mid_x": (PLOT_LEFT + PLOT_RIGHT) / 2,
        "mid_y": (PLOT_TOP + PLOT_BOTTOM) / 2,
        "no_samples": xr is None or not (has_lines or chart.bands),
        **_axes(f, chart, xr),
        "bands": _bands(f, chart, colors),
        "lines": _lines(f, chart),
        "limit": limit,
        "death": None
        if death is None or xr is None
        else {"x": _f(f.sx(death)), "label": fmt_hms(death)},
        "legend": _legend(entries),
        "note": _legend_label(note, 120) if note else "",
        "note_y": LEGEND_TOP + (rows - 1) * LEGEND_ROW + 4,
        "victim_color": VICTIM_COLOR,
        "device_color": DEVICE_COLOR,
        "limit_color": LIMIT_COLOR,
    }
    return render("chart.svg.j2", values).replace("\n", "")
