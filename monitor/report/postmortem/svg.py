"""The post-mortem's memory chart as one ``<svg>`` element (well-formed XML, no scripts):
the layers of monitor/report/postmortem/chart.py drawn onto a time x bytes frame."""

from __future__ import annotations

import math
from html import escape

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


def _svg_axes(f: _Frame, chart: Chart, xr: tuple[float, float] | None) -> list[str]:
    """The y axis in GiB (nice steps from 0) and the x axis in HH:MM:SS UTC."""
    out: list[str] = []
    # y axis: GiB, nice steps from 0 up to the top of the axis
    step = _nice_step(f.ymax / GIB, 5)
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    out.append('<g class="y-axis" fill="#333" stroke="none">')
    k = 0
    while k * step * GIB <= f.ymax * (1 + 1e-9) and k < 50:
        y = f.sy(k * step * GIB)
        out.append(
            f'<line x1="{PLOT_LEFT}" y1="{_f(y)}" x2="{PLOT_RIGHT}" y2="{_f(y)}" '
            'stroke="#e3e3e3" stroke-width="1"/>'
        )
        out.append(
            f'<text x="{PLOT_LEFT - 6}" y="{_f(y + 4)}" text-anchor="end">'
            f"{k * step:.{decimals}f}</text>"
        )
        k += 1
    dev = f" on {escape(clean(chart.device_id))}" if chart.device_id else ""
    out.append(f'<text x="6" y="{PLOT_TOP - 10}" text-anchor="start">GiB{dev}</text>' if xr else "")
    out.append("</g>")

    # x axis: HH:MM:SS UTC
    out.append('<g class="x-axis" fill="#333" stroke="none">')
    if xr is not None:
        for t in _time_ticks(f.x0, f.x1):
            x = f.sx(t)
            out.append(
                f'<line x1="{_f(x)}" y1="{PLOT_BOTTOM}" x2="{_f(x)}" '
                f'y2="{PLOT_BOTTOM + 5}" stroke="#999"/>'
            )
            out.append(
                f'<text x="{_f(x)}" y="{PLOT_BOTTOM + 18}" text-anchor="middle">{fmt_hms(t)}</text>'
            )
        out.append(
            f'<text x="{(PLOT_LEFT + PLOT_RIGHT) / 2}" y="{PLOT_BOTTOM + 36}" '
            f'text-anchor="middle">time (UTC, {escape(fmt_ts(f.x0)[:10])})</text>'
        )
    out.append("</g>")

    return out


def _svg_marks(
    f: _Frame,
    chart: Chart,
    xr: tuple[float, float] | None,
    band_colors: dict[str, str],
    limit_drawn: bool,
    death: float | None,
) -> list[str]:
    """The stacked bands, the device total and the victim, the limit, the death marker."""
    out: list[str] = []
    # the others, stacked: each band from the one below's top to its own top
    out.append('<g class="bands" stroke-width="0.8">')
    keep = thin(chart.times, chart.bands[-1][1]) if chart.bands else []
    below = [0.0] * len(chart.times)
    for rank, (s, top) in enumerate(chart.bands):
        upper = [f"{_f(f.sx(chart.times[j]))},{_f(f.sy(top[j]))}" for j in keep]
        lower = [f"{_f(f.sx(chart.times[j]))},{_f(f.sy(below[j]))}" for j in reversed(keep)]
        out.append(
            f'<polygon class="band" data-series="{s.key}" data-rank="{rank}" '
            f'fill="{band_colors[s.key]}" fill-opacity="0.55" '
            f'stroke="{band_colors[s.key]}" points="{" ".join(upper + lower)}">'
            f"<title>{escape(s.label)}</title></polygon>"
        )
        below = top
    out.append("</g>")

    # the device's total in use (dashed), then the victim on top of everything
    out.append('<g class="series-group" fill="none">')
    for line in (chart.device, chart.victim):
        if line is None or not line.points:
            continue
        pts = downsample(line.points)
        if len(pts) == 1:
            pts = pts * 2
        coords = " ".join(f"{_f(f.sx(t))},{_f(f.sy(v))}" for t, v in pts)
        style = (
            f'stroke="{VICTIM_COLOR}" stroke-width="3"'
            if line.victim
            else f'stroke="{DEVICE_COLOR}" stroke-width="1.5" stroke-dasharray="7 4"'
        )
        cls = "series process victim" if line.victim else "series device"
        out.append(
            f'<polyline class="{cls}" data-series="{line.key}" {style} '
            f'stroke-linejoin="round" stroke-linecap="round" points="{coords}">'
            f"<title>{escape(line.label)}</title></polyline>"
        )
    out.append("</g>")

    # the limit: a labelled horizontal line, or a note when it is far above the data
    if chart.limit_bytes and xr is not None:
        label = escape(f"{chart.limit_label}: {fmt_bytes(chart.limit_bytes)}")
        if limit_drawn:
            limit_y = _f(f.sy(chart.limit_bytes))
            out.append(
                f'<g class="limit"><line x1="{PLOT_LEFT}" y1="{limit_y}" x2="{PLOT_RIGHT}" '
                f'y2="{limit_y}" stroke="{LIMIT_COLOR}" stroke-width="2"/>'
                f'<text x="{PLOT_LEFT + 6}" y="{_f(f.sy(chart.limit_bytes) - 5)}" '
                f'fill="{LIMIT_COLOR}" font-weight="bold" stroke="#fff" stroke-width="3" '
                f'paint-order="stroke">{label}</text></g>'
            )
        else:
            out.append(
                f'<g class="limit off-scale"><text x="{PLOT_LEFT + 6}" '
                f'y="{PLOT_TOP + 16}" fill="{LIMIT_COLOR}">{label} '
                "(far above, not to scale)</text></g>"
            )

    # death marker
    if death is not None and xr is not None:
        death_x = _f(f.sx(death))
        out.append(
            f'<g class="death-marker"><line x1="{death_x}" y1="{PLOT_TOP}" x2="{death_x}" '
            f'y2="{PLOT_BOTTOM}" stroke="#000" stroke-width="1.5" '
            'stroke-dasharray="3 3"/>'
            f'<text x="{death_x}" y="{PLOT_TOP - 10}" text-anchor="end" fill="#000">'
            f"died {fmt_hms(death)}</text></g>"
        )

    return out


def _svg_legend(entries: list[tuple[str, str, str, str]], note: str, rows: int) -> list[str]:
    """Victim, device total, the bands from the bottom up, the limit; then the note."""
    out: list[str] = []
    # legend: victim, device total, the bands from the bottom up, the limit
    out.append('<g class="legend">')
    colw = (SVG_W - PLOT_LEFT) / LEGEND_COLS
    for i, (key, label, color, kind) in enumerate(entries):
        r, c = divmod(i, LEGEND_COLS)
        lx = PLOT_LEFT // 2 + c * colw
        ly = LEGEND_TOP + r * LEGEND_ROW
        if kind == "band":
            swatch = (
                f'<rect x="{_f(lx)}" y="{ly - 6}" width="24" height="12" fill="{color}" '
                f'fill-opacity="0.55" stroke="{color}"/>'
            )
        else:
            style = {
                "victim": 'stroke-width="3"',
                "device": 'stroke-width="1.5" stroke-dasharray="7 4"',
                "limit": 'stroke-width="2"',
            }[kind]
            swatch = (
                f'<line x1="{_f(lx)}" y1="{ly}" x2="{_f(lx + 24)}" y2="{ly}" '
                f'stroke="{color}" {style}/>'
            )
        weight = ' font-weight="bold"' if kind in ("victim", "limit") else ""
        out.append(
            f'<g class="legend-entry {kind}" data-series="{key}">{swatch}'
            f'<text x="{_f(lx + 30)}" y="{ly + 4}" fill="#222"{weight}>'
            f"{escape(_legend_label(label))}</text></g>"
        )
    if note:
        ly = LEGEND_TOP + (rows - 1) * LEGEND_ROW
        out.append(
            f'<text class="not-charted" x="{PLOT_LEFT // 2}" y="{ly + 4}" fill="#666">'
            f"{escape(_legend_label(note, 120))}</text>"
        )
    return out


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
    entries: list[tuple[str, str, str, str]] = []  # key, label, colour, swatch kind
    if chart.victim is not None:
        entries.append((chart.victim.key, chart.victim.label, VICTIM_COLOR, "victim"))
    if chart.device is not None:
        entries.append((chart.device.key, chart.device.label, DEVICE_COLOR, "device"))
    band_colors = {
        s.key: ("#b0b0b0" if s.key == "proc-others" else PALETTE[i % len(PALETTE)])
        for i, (s, _) in enumerate(chart.bands)
    }
    for s, _ in chart.bands:
        entries.append((s.key, s.label, band_colors[s.key], "band"))
    if chart.limit_bytes:
        entries.append(
            ("limit", f"{chart.limit_label}: {fmt_bytes(chart.limit_bytes)}", LIMIT_COLOR, "limit")
        )
    note = (
        "not charted (other devices, see the table): " + ", ".join(chart.not_charted)
        if chart.not_charted
        else ""
    )
    rows = max(math.ceil(len(entries) / LEGEND_COLS), 1) + (1 if note else 0)
    height = LEGEND_TOP + rows * LEGEND_ROW + 8
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {SVG_W} '
        f'{height}" width="100%" role="img" aria-label="memory over time" '
        f'font-family="sans-serif" font-size="13">',
        "<title>Memory over time (GiB, UTC)</title>",
        f'<rect class="plot-area" x="{PLOT_LEFT}" y="{PLOT_TOP}" '
        f'width="{PLOT_RIGHT - PLOT_LEFT}" height="{PLOT_BOTTOM - PLOT_TOP}" '
        'fill="#fcfcfc" stroke="#999" stroke-width="1"/>',
    ]
    lines = [s for s in (chart.victim, chart.device) if s is not None and s.points]
    data_max = max(
        [v for s in lines for _, v in s.points]
        + [max(top, default=0.0) for _, top in chart.bands[-1:]],
        default=0.0,
    )
    limit_drawn = (
        chart.limit_bytes is not None
        and chart.limit_bytes > 0
        and (data_max <= 0 or chart.limit_bytes <= data_max * LIMIT_OFF_SCALE)
    )
    ymax = max(data_max, chart.limit_bytes if limit_drawn and chart.limit_bytes else 0.0)
    if xr is None or not (lines or chart.bands):
        parts.append(
            f'<text x="{(PLOT_LEFT + PLOT_RIGHT) / 2}" y="{(PLOT_TOP + PLOT_BOTTOM) / 2}"'
            ' text-anchor="middle" fill="#666">no samples in the window</text>'
        )
    if ymax <= 0:
        ymax = GIB
    ymax *= 1.04  # headroom so the top line and its label stay inside the plot
    x0, x1 = xr if xr else (0.0, 1.0)
    f = _Frame(x0, x1, ymax)
    parts += _svg_axes(f, chart, xr)
    parts += _svg_marks(f, chart, xr, band_colors, limit_drawn, death)
    parts += _svg_legend(entries, note, rows)
    parts.append("</g></svg>")
    return "".join(p for p in parts if p)
