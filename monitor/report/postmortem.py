"""Render a ``vramscope.postmortem/1`` document (an OOM, crash or exit post-mortem).

``render_text`` gives a report that fits an 80-100 column terminal; ``render_html`` gives one
self-contained HTML file (inline CSS, inline SVG chart of memory over time, no scripts, no
external resources) that reads offline and prints.

Every field of the document may be missing, null or of the wrong type; the renderers never
raise on such a document, they print "?" or leave the part out. Every string taken from the
document is treated as hostile: control characters (terminal escapes, NULs, lone surrogates)
are shown as ``\\xNN`` escapes in both outputs, and the HTML escapes everything it prints.
Stdlib only; this module must not import textual or rich.
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
import textwrap
from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape
from typing import Any

from monitor.textsafe import terminal_safe
from monitor.units import GIB, precise_bytes

SPARK_CHARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40
MAX_SVG_POINTS = 600  # per series, after downsampling

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


# --------------------------------------------------------------------------- small helpers


def _get(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]... or None when any level is missing or not a dict."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _dict(obj: Any) -> dict:
    return obj if isinstance(obj, dict) else {}


def _list(obj: Any) -> list:
    return obj if isinstance(obj, list) else []


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _clean(x: Any) -> str:
    """A string safe to print: control/format/surrogate characters become \\xNN escapes."""
    return terminal_safe(x)


EVENT_DATA_ROWS = 40
EVENT_DATA_VALUE_CHARS = 600


def _event_data_rows(data: dict) -> list[tuple[str, str]]:
    """An event's data as (key, text) rows: strings as themselves (their line breaks kept,
    every other control character a visible escape), numbers and booleans as written,
    anything nested as compact JSON; bounded in rows and characters."""
    rows = []
    for k, v in list(data.items())[:EVENT_DATA_ROWS]:
        if isinstance(v, str):
            text = "\n".join(_clean(line) for line in v[:EVENT_DATA_VALUE_CHARS].split("\n"))
        elif v is None:
            text = "unknown"
        elif isinstance(v, bool | int | float):
            text = str(v)
        else:
            text = _clean(json.dumps(v, default=str, ensure_ascii=False)[:EVENT_DATA_VALUE_CHARS])
        if len(v if isinstance(v, str) else text) > EVENT_DATA_VALUE_CHARS:
            text += " …"
        rows.append((_clean(k), text))
    if len(data) > EVENT_DATA_ROWS:
        rows.append(("…", f"{len(data) - EVENT_DATA_ROWS} more"))
    return rows


def _str(x: Any, default: str = "?") -> str:
    if x is None or (isinstance(x, str) and not x.strip()):
        return default
    return _clean(x)


def _h(x: Any, default: str = "?") -> str:
    """Cleaned and HTML-escaped."""
    return escape(_str(x, default), quote=True)


def fmt_bytes(n: Any) -> str:
    """A byte count from the JSON document (any type), written by :func:`precise_bytes`."""
    return precise_bytes(_num(n))


def _dt(ms: Any) -> datetime | None:
    v = _num(ms)
    if v is None:
        return None
    try:
        return datetime.fromtimestamp(v / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def fmt_ts(ms: Any) -> str:
    d = _dt(ms)
    return "?" if d is None else d.strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_hms(ms: Any) -> str:
    d = _dt(ms)
    return "?" if d is None else d.strftime("%H:%M:%S")


def fmt_dur(ms: Any) -> str:
    v = _num(ms)
    if v is None:
        return "?"
    sign = "-" if v < 0 else ""
    s = abs(v) / 1000
    if s < 60:
        return f"{sign}{s:.1f}s" if s < 10 else f"{sign}{s:.0f}s"
    m, s = divmod(int(round(s)), 60)
    if m < 60:
        return f"{sign}{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{sign}{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{sign}{d}d{h:02d}h"


def _death_ms(doc: dict) -> float | None:
    for v in (_get(doc, "event", "ts_ms"), _get(doc, "victim", "exited_ms")):
        if _num(v) is not None:
            return _num(v)
    return None


def _points(raw: Any) -> list[tuple[float, float]]:
    """Valid (t_ms, bytes) pairs, sorted by time; negative values read as 0."""
    out = []
    for p in _list(raw):
        if isinstance(p, list | tuple) and len(p) >= 2:
            t, v = _num(p[0]), _num(p[1])
            if t is not None and v is not None:
                out.append((t, max(v, 0)))
    out.sort(key=lambda tv: tv[0])
    return out


class _Series:
    __slots__ = ("key", "label", "kind", "victim", "points", "total", "pid")

    def __init__(
        self,
        key: str,
        label: str,
        kind: str,
        victim: bool,
        points: list[tuple[float, float]],
        total: float | None = None,
    ) -> None:
        self.key, self.label, self.kind, self.victim = key, label, kind, victim
        self.points, self.total = points, total
        self.pid: int | None = None


def _series(doc: dict) -> list[_Series]:
    """Processes first (the victim first among them), then devices."""
    victim_pid = _num(_get(doc, "victim", "pid"))
    timeline = _dict(_get(doc, "timeline"))
    procs: list[_Series] = []
    for i, p in enumerate(_list(timeline.get("processes"))):
        p = _dict(p)
        pid = _num(p.get("pid"))
        is_victim = pid is not None and pid == victim_pid
        dev = _str(p.get("device_id"))
        label = f"pid {_str(pid if pid is None else int(pid))} {_str(p.get('comm'))} on {dev}" + (
            " (victim)" if is_victim else ""
        )
        procs.append(_Series(f"proc-{i}", label, "process", is_victim, _points(p.get("points"))))
    procs = _top_processes(procs)
    devs: list[_Series] = []
    for i, d in enumerate(_list(timeline.get("devices"))):
        d = _dict(d)
        name = d.get("name")
        label = f"device {_str(d.get('device_id'))}" + (f" ({_str(name)})" if name else "")
        total = _num(d.get("total_bytes"))
        devs.append(_Series(f"dev-{i}", label, "device", False, _points(d.get("points")), total))
    return procs + devs


TOP_PROCESSES = 5


def _top_processes(procs: list[_Series]) -> list[_Series]:
    """The victim first, then the ``TOP_PROCESSES`` others with the highest peak; the rest
    summed per timestamp into one "others" line, so a box with many tracked processes
    still gives a readable chart."""
    victims = [s for s in procs if s.victim]
    rest = sorted(
        (s for s in procs if not s.victim),
        key=lambda s: -max((v for _, v in s.points), default=0.0),
    )
    shown, folded = rest[:TOP_PROCESSES], rest[TOP_PROCESSES:]
    if not folded:
        return victims + shown
    summed: dict[float, float] = {}
    for s in folded:
        for t, v in s.points:
            summed[t] = summed.get(t, 0.0) + v
    others = _Series(
        "proc-others",
        f"others ({len(folded)} processes, summed)",
        "process",
        False,
        sorted(summed.items()),
    )
    return victims + shown + [others]


def _x_range(doc: dict, series: list[_Series]) -> tuple[float, float] | None:
    start, end = _num(_get(doc, "window", "start_ms")), _num(_get(doc, "window", "end_ms"))
    ts = [t for s in series for t, _ in s.points]
    if start is None:
        start = min(ts) if ts else None
    if end is None:
        end = max(ts) if ts else None
    death = _death_ms(doc)
    if death is not None:
        start = death if start is None else min(start, death)
        end = death if end is None else max(end, death)
    if start is None or end is None:
        return None
    if end <= start:
        start, end = start - 30_000, end + 30_000
    return start, end


def _device_keys(doc: dict) -> list[str]:
    keys: list[str] = []
    for src in (
        _get(doc, "estimate", "by_device"),
        _get(doc, "estimate", "measured_at_death"),
        _get(doc, "victim", "at_death"),
        _get(doc, "victim", "last_measured"),
        _get(doc, "victim", "peak"),
        _get(doc, "ceiling"),
    ):
        for k in _dict(src):
            if k not in keys:
                keys.append(k)
    return keys


def _memory_rows(doc: dict) -> list[tuple[str, list[str]]]:
    est = _dict(_get(doc, "estimate", "by_device"))
    meas = _dict(_get(doc, "victim", "at_death") or _get(doc, "estimate", "measured_at_death"))
    last = _dict(_get(doc, "victim", "last_measured"))
    peak = _dict(_get(doc, "victim", "peak"))
    ceil = _dict(_get(doc, "ceiling"))
    return [
        (
            _clean(k),
            [
                fmt_bytes(src.get(k)) if src.get(k) is not None else "-"
                for src in (est, meas, last, peak, ceil)
            ],
        )
        for k in _device_keys(doc)
    ]


TITLES = ("OOM post-mortem", "crash post-mortem", "exit post-mortem")


def _title(doc: dict) -> str:
    """The document's title (by the real cause: monitor/analysis/postmortem.py); a document from
    before titles is an OOM post-mortem only when a kernel kill is in it."""
    title = doc.get("title")
    if title in TITLES:
        return str(title)
    kind = _get(doc, "event", "kind")
    if kind in ("oom_kill", "oomd_kill") or _get(doc, "victim", "kernel"):
        return "OOM post-mortem"
    return "crash post-mortem"


def measured_line(m: dict) -> str:
    """The victim's memory at death by the definition status, the TUI, diagnose and
    /metrics use (monitor/analysis/measured.py); unknown parts print as '-'."""

    def part(key: str) -> str:
        return "-" if _num(m.get(key)) is None else fmt_bytes(m.get(key))

    return (
        f"measured at its last tick: {part('total_bytes')} (GPU {part('device_bytes')}"
        f" + anon {part('host_anon_bytes')} + file {part('host_file_bytes')})"
    )


MEMORY_HEADS = ("estimate", "at death", "last seen", "peak", "ceiling")
KERNEL_FIELDS = (
    ("anon_rss_bytes", "anon RSS"),
    ("file_rss_bytes", "file RSS"),
    ("shmem_rss_bytes", "shmem RSS"),
)


def _argv_text(argv: Any) -> str | None:
    if isinstance(argv, list) and argv:
        s = shlex.join(_clean(a) for a in argv)
    elif isinstance(argv, str) and argv:
        s = _clean(argv)
    else:
        return None
    return s if len(s) <= 4000 else s[:4000] + " …"


def _stats(points: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    if not points:
        return None
    vals = [v for _, v in points]
    return min(vals), max(vals), points[-1][1]


def sparkline(
    points: list[tuple[float, float]], start: float, end: float, width: int = SPARK_WIDTH
) -> str:
    """Max per time column over [start, end], scaled 0..series max; empty columns are spaces."""
    if width <= 0 or end <= start:
        return ""
    cols: list[float | None] = [None] * width
    span = end - start
    for t, v in points:
        if t < start or t > end:
            continue
        i = min(int((t - start) / span * width), width - 1)
        prev = cols[i]
        cols[i] = v if prev is None else max(prev, v)
    top = max((c for c in cols if c is not None), default=0)
    out = []
    for c in cols:
        if c is None:
            out.append(" ")
        elif top <= 0:
            out.append(SPARK_CHARS[0])
        else:
            out.append(
                SPARK_CHARS[min(int(c / top * (len(SPARK_CHARS) - 1) + 0.5), len(SPARK_CHARS) - 1)]
            )
    return "".join(out)


def _member_lines(doc: dict) -> list[str]:
    """One line per member of the killed cgroup (monitor/analysis/cgroup_budget.py): its
    host memory split at the kill (anonymous, file, shmem) and its GPU memory."""
    out = []
    for m in _list(_get(doc, "cgroup_budget", "members")):
        m = _dict(m)
        pid = _num(m.get("pid"))
        parts = ", ".join(
            f"{label} {fmt_bytes(m.get(key))}"
            for key, label in (
                ("anon_bytes", "anon"),
                ("file_bytes", "file"),
                ("shmem_bytes", "shmem"),
                ("gpu_bytes", "GPU"),
            )
        )
        who = (
            f"pid {'?' if pid is None else int(pid)} {_str(m.get('name'))} ({_str(m.get('comm'))})"
        )
        out.append(f"{who}: {parts}" + (" (victim)" if m.get("victim") is True else ""))
    return out


# --------------------------------------------------------------------------- text


def _wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    rest = first if rest is None else rest
    lines = (
        textwrap.wrap(
            text,
            width=width,
            initial_indent=first,
            subsequent_indent=rest,
            break_long_words=True,
            break_on_hyphens=False,
        )
        if text
        else []
    )
    return lines or [first.rstrip()]


def _fit(line: str, width: int) -> str:
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def _labelled(label: str, value: str, width: int, pad: int = 11) -> list[str]:
    return _wrap(value, width, f"  {label:<{pad}}", " " * (pad + 2))


def _section(title: str, width: int) -> list[str]:
    return ["", title, "-" * min(len(title), width)]


def _head_text(doc: dict, width: int) -> list[str]:
    """The title and who died, when, how, by which event, on what command line."""
    victim, event = _dict(doc.get("victim")), _dict(doc.get("event"))
    pid = _num(victim.get("pid"))
    comm = _str(victim.get("comm"))
    out = _wrap(f"{_title(doc)}: {comm} (pid {'?' if pid is None else int(pid)}) died", width)
    out.append("=" * min(max(len(x) for x in out), width))
    out.extend(_labelled("when", fmt_ts(_death_ms(doc)), width))
    if victim.get("how"):
        out.extend(_labelled("how", _str(victim.get("how")), width))
    if event:
        kind = _str(event.get("kind"))
        msg = _str(event.get("message"), "")
        out.extend(_labelled("event", f"{kind}: {msg}" if msg else kind, width))
        data = _dict(event.get("data"))
        if data:
            pairs = " ".join(
                f"{_clean(k)}={_clean(json.dumps(v, default=str))}" for k, v in data.items()
            )
            out.extend(_labelled("", pairs if len(pairs) <= 600 else pairs[:600] + " …", width))
    engine = victim.get("engine")
    if engine:
        out.extend(_labelled("engine", _str(engine), width))
    started, exited = _num(victim.get("started_at_ms")), _num(victim.get("exited_ms"))
    if started is not None:
        ran = f" (ran {fmt_dur(exited - started)})" if exited is not None else ""
        out.extend(_labelled("started", fmt_ts(started) + ran, width))
    argv = _argv_text(victim.get("argv"))
    if argv:
        out.extend(_labelled("command", argv, width))
    return out


def _kernel_text(doc: dict, width: int) -> list[str]:
    kernel = _dict(_get(doc, "victim", "kernel"))
    out = _section("Kernel's record of the kill", width)
    if not kernel:
        return out + ["  (no kernel OOM record)"]
    for key, label in KERNEL_FIELDS:
        out.extend(_labelled(label, fmt_bytes(kernel.get(key)), width))
    if kernel.get("constraint"):
        out.extend(_labelled("constraint", _str(kernel.get("constraint")), width))
    if kernel.get("memcg"):
        out.extend(_labelled("memcg", _str(kernel.get("memcg")), width))
    return out


def _members_text(doc: dict, width: int) -> list[str]:
    members = _member_lines(doc)
    if not members:
        return []
    cgroup = _str(_get(doc, "cgroup_budget", "cgroup"))
    out = _section(f"Members of cgroup {cgroup} at the kill", width)
    for line in members:
        out.extend(_wrap(line, width, "  ", "    "))
    return out


def _memory_text(doc: dict, width: int) -> list[str]:
    out = _section("Memory at death (estimate vs measured)", width)
    rows = _memory_rows(doc)
    if rows:
        colw = 11
        devw = max(6, min(max(len(k) for k, _ in rows), width - 2 - colw * len(MEMORY_HEADS)))
        out.append("  " + "device".ljust(devw) + "".join(h.rjust(colw) for h in MEMORY_HEADS))
        for key, cells in rows:
            out.append("  " + _fit(key, devw).ljust(devw) + "".join(c.rjust(colw) for c in cells))
        out.extend(
            _wrap(
                "estimate: what the launch should need; at death: the victim as "
                "measured at death; last seen / peak: its last nonzero and highest samples; "
                "ceiling: the limit it ran under.",
                width,
                "  ",
            )
        )
    else:
        out.append("  (no estimate, measurement or ceiling)")
    measured = _dict(_get(doc, "victim", "measured"))
    if measured:
        out.extend(_wrap(measured_line(measured), width, "  "))
    return out


def _loading_text(doc: dict, death: float | None, width: int) -> list[str]:
    loading = [_dict(x) for x in _list(doc.get("loading"))]
    if not loading:
        return []
    out = _section("Loading at the time", width)
    for item in loading:
        lpid = _num(item.get("pid"))
        st = _num(item.get("started_ms"))
        when = ""
        if st is not None:
            when = f" since {fmt_hms(st)}"
            if death is not None:
                when += f" ({fmt_dur(death - st)} before death)"
        model = f" {_str(item.get('model'))}" if item.get("model") else ""
        text = (
            f"pid {'?' if lpid is None else int(lpid)} {_str(item.get('comm'))} "
            f"loading{model}{when}"
        )
        out.extend(_wrap(text, width, "  ", "    "))
    return out


def _timeline_text(doc: dict, death: float | None, width: int) -> list[str]:
    series = _series(doc)
    xr = _x_range(doc, series)
    out = _section("Timeline", width)
    if xr is not None:
        out.extend(
            _wrap(
                f"window {fmt_ts(xr[0])} .. {fmt_hms(xr[1])} ({fmt_dur(xr[1] - xr[0])});"
                f" death at {fmt_hms(death)}",
                width,
                "  ",
            )
        )
    if not any(s.points for s in series):
        out.append("  (no samples in the window)")
    for s in series:
        total = f", total {fmt_bytes(s.total)}" if s.total else ""
        out.extend(_wrap(s.label + total, width, "  ", "    "))
        low_high_last = _stats(s.points)
        if low_high_last is None or xr is None:
            out.append("    (no samples)")
            continue
        low, high, last = low_high_last
        stats = f"min {fmt_bytes(low)}  max {fmt_bytes(high)}  last {fmt_bytes(last)}"
        spark = sparkline(s.points, xr[0], xr[1], min(SPARK_WIDTH, width - 6))
        line = f"    |{spark}|  {stats}"
        if len(line) <= width:
            out.append(line)
        else:
            out.append(f"    |{spark}|")
            out.extend(_wrap(stats, width, "    "))
    return out


def render_text(doc: dict, width: int | None = None) -> str:
    """The post-mortem as plain text; no line is longer than ``width`` columns (default: the
    terminal width clamped to 80..100)."""
    if width is None:
        width = min(max(shutil.get_terminal_size((100, 24)).columns, 80), 100)
    width = max(int(width), 40)
    doc = _dict(doc)
    death = _death_ms(doc)
    out = _head_text(doc, width)
    out += _kernel_text(doc, width)
    out += _members_text(doc, width)
    out += _memory_text(doc, width)
    out += _section("Cause", width)
    out += _wrap(_str(doc.get("cause"), "(not determined)"), width, "  ")
    out += _section("Fix", width)
    out += _wrap(_str(doc.get("fix"), "(none suggested)"), width, "  ")
    out += _loading_text(doc, death, width)
    out += _timeline_text(doc, death, width)
    out += _section("Other events in the window", width)
    out += _events_text(doc, death, width)
    return "\n".join(_fit(line.rstrip(), width) for line in out) + "\n"


# --------------------------------------------------------------------------- events

MAX_EVENTS_SHOWN = 50  # monitor/analysis/postmortem.py MAX_EVENTS; older documents too


def _events(doc: dict) -> tuple[list[dict], str]:
    """The window's other events to show (at most ``MAX_EVENTS_SHOWN``, nearest the death,
    in time order) and the "and N more" line for the rest, by kind ("" when none)."""
    events = [_dict(e) for e in _list(doc.get("other_events"))]
    death = _death_ms(doc) or 0
    if len(events) > MAX_EVENTS_SHOWN:
        events = sorted(events, key=lambda e: abs((_num(e.get("ts_ms")) or 0) - death))
    shown, rest = events[:MAX_EVENTS_SHOWN], events[MAX_EVENTS_SHOWN:]
    kinds: dict[str, int] = {}
    for e in rest:
        kinds[_str(e.get("kind"))] = kinds.get(_str(e.get("kind")), 0) + 1
    omitted = _num(doc.get("other_events_omitted"))
    if omitted:
        for k, n in _dict(doc.get("other_events_omitted_kinds")).items():
            if _num(n):
                kinds[_clean(k)] = kinds.get(_clean(k), 0) + int(n)
    more = len(rest) + int(omitted or 0)
    note = ""
    if more:
        top = sorted(kinds.items(), key=lambda kv: -kv[1])[:6]
        note = f"and {more} more" + (
            " (" + ", ".join(f"{n} {k}" for k, n in top) + (", ..." if len(kinds) > 6 else "") + ")"
            if top
            else ""
        )
    return sorted(shown, key=lambda e: _num(e.get("ts_ms")) or 0), note


def _events_text(doc: dict, death: float | None, width: int) -> list[str]:
    events, more = _events(doc)
    out: list[str] = [] if events else ["  (none)"]
    for e in events:
        ts = _num(e.get("ts_ms"))
        rel = f" ({fmt_dur(ts - death)})" if ts is not None and death is not None else ""
        head = f"  {fmt_hms(ts)}{rel} {_str(e.get('kind'))}: "
        out.extend(_wrap(_str(e.get("message"), "")[:600], width, head, "      "))
    if more:
        out.extend(_wrap(more + ".", width, "  "))
    return out


def _events_html(doc: dict, death: float | None) -> str:
    events, more = _events(doc)
    out = ["<section><h2>Other events in the window</h2>"]
    erows = []
    for e in events:
        ts = _num(e.get("ts_ms"))
        rel = fmt_dur(ts - death) if ts is not None and death is not None else "?"
        erows.append(
            [
                escape(fmt_hms(ts)),
                escape(rel),
                f"<code>{_h(e.get('kind'))}</code>",
                _h(_str(e.get("message"), "")[:600], ""),
            ]
        )
    if erows:
        out.append(_table(("time (UTC)", "vs death", "kind", "message"), erows, numeric_from=9))
    else:
        out.append('<p class="muted">None.</p>')
    if more:
        out.append(f'<p class="muted more-events">{escape(more)}.</p>')
    out.append("</section>")
    return "".join(out)


# --------------------------------------------------------------------------- SVG chart


def downsample(
    points: list[tuple[float, float]], limit: int = MAX_SVG_POINTS
) -> list[tuple[float, float]]:
    """At most ``limit`` points: per bucket of consecutive points, its minimum and maximum in
    time order, so peaks and troughs survive."""
    if len(points) <= limit:
        return list(points)
    buckets = max(limit // 2, 1)
    size = math.ceil(len(points) / buckets)
    out: list[tuple[float, float]] = []
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


# --------------------------------------------------------------------------- chart layers

TOP_BANDS = 5
LIMIT_OFF_SCALE = 3.0  # a limit above 3x the data's peak is written, not drawn to scale
DEVICE_COLOR = "#333333"
LIMIT_COLOR = "#000000"


class _Chart:
    """What the chart draws, for one device (the victim's): the other processes on it as
    stacked bands (largest peak at the bottom, the rest summed into "others"), the victim as
    a line over them, the device's measured total and the limit the victim ran under."""

    __slots__ = (
        "device_id",
        "times",
        "bands",
        "victim",
        "device",
        "limit_bytes",
        "limit_label",
        "not_charted",
    )

    def __init__(self) -> None:
        self.device_id: str | None = None
        self.times: list[float] = []
        self.bands: list[tuple[_Series, list[float]]] = []  # series, cumulative top per time
        self.victim: _Series | None = None
        self.device: _Series | None = None
        self.limit_bytes: float | None = None
        self.limit_label = ""
        self.not_charted: list[str] = []


def _peak(s: _Series) -> float:
    return max((v for _, v in s.points), default=0.0)


def _aligned(points: list[tuple[float, float]], times: list[float]) -> list[float]:
    """``points`` read at each of ``times`` (the union of every band's sample times): inside
    the series' own span the last value seen carries forward; more than one of its own
    sampling steps (the median gap) before its first or after its last sample, it is 0.
    Carrying, not 0, because processes are sampled a few milliseconds apart in the same
    tick: a missing point there means "not sampled at this instant", not "held nothing", and
    zeros would draw a saw-tooth of false drops. Well outside its span the process had not
    started or had exited, so it held nothing."""
    if not points:
        return [0.0] * len(times)
    gaps = sorted(b[0] - a[0] for a, b in zip(points, points[1:], strict=False))
    step = gaps[len(gaps) // 2] if gaps else 0.0
    first, last = points[0][0] - step, points[-1][0] + step
    out: list[float] = []
    i, cur = 0, points[0][1]
    for t in times:
        while i < len(points) and points[i][0] <= t:
            cur = points[i][1]
            i += 1
        out.append(cur if first <= t <= last else 0.0)
    return out


def _thin(times: list[float], tops: list[float], limit: int = MAX_SVG_POINTS) -> list[int]:
    """Indexes of at most ``limit`` of ``times``: per bucket, where the stack is lowest and
    highest, so every band is thinned at the same instants and its peaks survive."""
    if len(times) <= limit:
        return list(range(len(times)))
    buckets = max(limit // 2, 1)
    size = math.ceil(len(times) / buckets)
    keep: list[int] = []
    for i in range(0, len(times), size):
        idx = range(i, min(i + size, len(times)))
        keep.extend(sorted({min(idx, key=lambda j: tops[j]), max(idx, key=lambda j: tops[j])}))
    return keep


def _member_pids(doc: dict) -> set[int] | None:
    """The pids of the killed cgroup's members; None when the kill was not a cgroup's."""
    members = _get(doc, "cgroup_budget", "members")
    if not isinstance(members, list):
        return None
    return {int(p) for m in members if (p := _num(_dict(m).get("pid"))) is not None}


def _chart(doc: dict, xr: tuple[float, float] | None) -> _Chart:
    chart = _Chart()
    victim_pid = _num(_get(doc, "victim", "pid"))
    timeline = _dict(_get(doc, "timeline"))
    procs: list[tuple[str, _Series]] = []
    for i, p in enumerate(_list(timeline.get("processes"))):
        p = _dict(p)
        pid = _num(p.get("pid"))
        dev_raw = p.get("device_id")
        dev = dev_raw if isinstance(dev_raw, str) else "?"
        is_victim = pid is not None and pid == victim_pid
        label = f"pid {_str(pid if pid is None else int(pid))} {_str(p.get('comm'))}" + (
            " (victim)" if is_victim else ""
        )
        pts = [(t, v) for t, v in _points(p.get("points")) if xr and xr[0] <= t <= xr[1]]
        series = _Series(f"proc-{i}", label, "process", is_victim, pts)
        series.pid = None if pid is None else int(pid)
        procs.append((dev, series))
    mine = [(d, s) for d, s in procs if s.victim and s.points]
    if mine:  # the victim's device: where it held the most
        chart.device_id = max(mine, key=lambda ds: _peak(ds[1]))[0]
    elif _get(doc, "victim", "kernel"):  # the kernel killed it: host memory
        chart.device_id = "host"
    elif any(s.points for _, s in procs):
        chart.device_id = max(procs, key=lambda ds: _peak(ds[1]))[0]
    members = _member_pids(doc)
    if members is not None and chart.device_id == "host":  # the killed cgroup's budget only
        procs = [(d, s) for d, s in procs if d != "host" or s.victim or s.pid in members]
    on_dev = [s for d, s in procs if d == chart.device_id]
    chart.not_charted = sorted({_clean(d) for d, s in procs if d != chart.device_id and s.points})
    victims = [s for s in on_dev if s.victim and s.points]
    chart.victim = max(victims, key=_peak) if victims else None
    if chart.victim is not None:
        chart.victim.label += f" on {_clean(chart.device_id)}"
    rest = sorted((s for s in on_dev if not s.victim and s.points), key=lambda s: -_peak(s))
    shown, folded = rest[:TOP_BANDS], rest[TOP_BANDS:]
    for i, d in enumerate(_list(timeline.get("devices"))):
        d = _dict(d)
        if d.get("device_id") == chart.device_id:
            name = d.get("name")
            pts = [(t, v) for t, v in _points(d.get("points")) if xr and xr[0] <= t <= xr[1]]
            chart.device = _Series(
                f"dev-{i}",
                f"{_clean(chart.device_id)} total in use" + (f" ({_str(name)})" if name else ""),
                "device",
                False,
                pts,
                _num(d.get("total_bytes")),
            )
            break
    memcg_limit = _num(_get(doc, "victim", "kernel", "memcg_limit_bytes"))
    memcg = _get(doc, "victim", "kernel", "memcg")
    if not memcg_limit:  # the record gave none: the limit sampled on the killed cgroup
        memcg_limit = _num(_get(doc, "cgroup_budget", "limit_bytes"))
        memcg = _get(doc, "cgroup_budget", "cgroup")
    if chart.device_id == "host" and memcg_limit:
        chart.limit_bytes = memcg_limit
        chart.limit_label = f"cgroup {_str(memcg)} limit"
    elif chart.device is not None and chart.device.total:
        chart.limit_bytes = chart.device.total
        chart.limit_label = f"{_clean(chart.device_id)} capacity"
    elif _num(_dict(doc.get("ceiling")).get(chart.device_id)):
        chart.limit_bytes = _num(_dict(doc.get("ceiling")).get(chart.device_id))
        chart.limit_label = f"{_clean(chart.device_id)} ceiling"
    layers = shown + (
        [_Series("proc-others", f"others ({len(folded)} processes, summed)", "process", False, [])]
        if folded
        else []
    )
    chart.times = sorted({t for s in rest for t, _ in s.points})
    if not chart.times:
        return chart
    values = [_aligned(s.points, chart.times) for s in shown]
    if folded:
        parts = [_aligned(s.points, chart.times) for s in folded]
        values.append([sum(col) for col in zip(*parts, strict=True)])
    cum = [0.0] * len(chart.times)
    for s, vals in zip(layers, values, strict=True):
        cum = [c + v for c, v in zip(cum, vals, strict=True)]
        chart.bands.append((s, cum))
    return chart


class _Frame:
    """The plot's scales: time ``x0..x1`` and bytes ``0..ymax`` onto the plot area."""

    __slots__ = ("x0", "x1", "ymax")

    def __init__(self, x0: float, x1: float, ymax: float) -> None:
        self.x0, self.x1, self.ymax = x0, x1, ymax

    def sx(self, t: float) -> float:
        return PLOT_LEFT + (t - self.x0) / (self.x1 - self.x0) * (PLOT_RIGHT - PLOT_LEFT)

    def sy(self, v: float) -> float:
        return PLOT_BOTTOM - min(max(v / self.ymax, 0.0), 1.0) * (PLOT_BOTTOM - PLOT_TOP)


def _svg_axes(f: _Frame, chart: _Chart, xr: tuple[float, float] | None) -> list[str]:
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
    dev = f" on {escape(_clean(chart.device_id))}" if chart.device_id else ""
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
    chart: _Chart,
    xr: tuple[float, float] | None,
    band_colors: dict[str, str],
    limit_drawn: bool,
    death: float | None,
) -> list[str]:
    """The stacked bands, the device total and the victim, the limit, the death marker."""
    out: list[str] = []
    # the others, stacked: each band from the one below's top to its own top
    out.append('<g class="bands" stroke-width="0.8">')
    keep = _thin(chart.times, chart.bands[-1][1]) if chart.bands else []
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


def render_svg(doc: dict) -> str:
    """The memory chart of the victim's device as one ``<svg>`` element (well-formed XML):
    the other processes there as stacked bands (top five by peak, the rest as "others"),
    the victim as a bold red line drawn over them, the device's measured total dashed and
    the limit (the victim's cgroup limit from the kernel record, else the device's capacity)
    as a labelled horizontal line. Processes on other devices are named under the chart."""
    doc = _dict(doc)
    xr = _x_range(doc, _series(doc))
    chart = _chart(doc, xr)
    death = _death_ms(doc)
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


# --------------------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;
max-width:1000px;padding:0 1em;color:#111;background:#fff;line-height:1.4}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.1em;border-bottom:1px solid #ccc;
margin-top:1.4em;padding-bottom:.15em}
table{border-collapse:collapse;margin:.4em 0}th,td{padding:.2em .7em;text-align:left;
vertical-align:top;border-bottom:1px solid #eee}td.n,th.n{text-align:right;
font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
pre{white-space:pre-wrap;word-break:break-all;background:#f6f6f6;padding:.5em;margin:.3em 0}
.meta th,.data th{color:#555;font-weight:normal}
.data td{white-space:pre-wrap;word-break:break-all;font-family:ui-monospace,Menlo,Consolas,
monospace;font-size:.9em}.cause,.fix{max-width:75ch}
.fix{border-left:4px solid #2ca02c;padding-left:.7em}
.chart{max-width:100%;height:auto;border:1px solid #ddd}
.muted{color:#666}
@media print{body{margin:0;max-width:none;font-size:10pt}section{break-inside:avoid}
pre{background:none;border:1px solid #ccc}}
"""


def _table(heads: Iterable[str], rows: Iterable[Iterable[str]], numeric_from: int = 1) -> str:
    h = "".join(
        f"<th{' class=n' if i >= numeric_from else ''}>{x}</th>" for i, x in enumerate(heads)
    )
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=n' if i >= numeric_from else ''}>{x}</td>" for i, x in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def _meta_html(doc: dict) -> str:
    """Who died, when, how, by which event (with its data), on what command line."""
    victim, event = _dict(doc.get("victim")), _dict(doc.get("event"))
    meta: list[tuple[str, str]] = [("when", escape(fmt_ts(_death_ms(doc))))]
    if victim.get("how"):
        meta.append(("how", _h(victim.get("how"))))
    if event:
        msg = _str(event.get("message"), "")
        meta.append(
            ("event", f"<code>{_h(event.get('kind'))}</code>" + (f" {escape(msg)}" if msg else ""))
        )
    if victim.get("engine"):
        meta.append(("engine", _h(victim.get("engine"))))
    started, exited = _num(victim.get("started_at_ms")), _num(victim.get("exited_ms"))
    if started is not None:
        ran = f" (ran {fmt_dur(exited - started)})" if exited is not None else ""
        meta.append(("started", escape(fmt_ts(started) + ran)))
    argv = _argv_text(victim.get("argv"))
    if argv:
        meta.append(("command", f"<pre>{escape(argv)}</pre>"))
    out = [
        '<section><table class="meta"><tbody>'
        + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in meta)
        + "</tbody></table>"
    ]
    data_rows = _event_data_rows(_dict(event.get("data")))
    if data_rows:
        out.append(
            '<p class=muted>event data</p><table class="data"><tbody>'
            + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in data_rows)
            + "</tbody></table>"
        )
    out.append("</section>")
    return "\n".join(out)


def _chart_html(doc: dict) -> str:
    out = ["<section><h2>Memory over time</h2>" + render_svg(doc)]
    srows = []
    for s in _series(doc):
        st = _stats(s.points)
        cells = [escape(s.label)] + ([escape(fmt_bytes(x)) for x in st] if st else ["-"] * 3)
        cells.append(escape(fmt_bytes(s.total)) if s.total else "-")
        srows.append(cells)
    if srows:
        out.append(_table(("series", "min", "max", "last", "total"), srows))
    out.append("</section>")
    return "\n".join(out)


def _kernel_html(doc: dict) -> str:
    kernel = _dict(_get(doc, "victim", "kernel"))
    if not kernel:
        body = '<p class="muted">No kernel OOM record.</p>'
    else:
        krows = [(lbl, escape(fmt_bytes(kernel.get(key)))) for key, lbl in KERNEL_FIELDS]
        krows += [(k, _h(kernel.get(k))) for k in ("constraint", "memcg") if kernel.get(k)]
        body = _table(("field", "value"), krows)
    return f"<section><h2>Kernel's record of the kill</h2>\n{body}\n</section>"


def _members_html(doc: dict) -> str:
    members = _member_lines(doc)
    if not members:
        return ""
    cgroup = _h(_get(doc, "cgroup_budget", "cgroup"))
    return (
        f"<section><h2>Members of cgroup {cgroup} at the kill</h2><ul>"
        + "".join(f"<li>{escape(line)}</li>" for line in members)
        + "</ul></section>"
    )


def _memory_html(doc: dict) -> str:
    out = ["<section><h2>Memory at death (estimate vs measured)</h2>"]
    rows = _memory_rows(doc)
    if rows:
        out.append(
            _table(
                ("device",) + MEMORY_HEADS,
                [[escape(k)] + [escape(c) for c in cells] for k, cells in rows],
            )
        )
        out.append(
            '<p class="muted">estimate: what the launch should need; at death: the '
            "victim as measured at death; last seen / peak: its last nonzero and highest "
            "samples; ceiling: the limit it ran under.</p>"
        )
    else:
        out.append('<p class="muted">No estimate, measurement or ceiling.</p>')
    measured = _dict(_get(doc, "victim", "measured"))
    if measured:
        out.append(f"<p>{escape(measured_line(measured))}</p>")
    out.append("</section>")
    return "\n".join(out)


def _loading_html(doc: dict, death: float | None) -> str:
    loading = [_dict(x) for x in _list(doc.get("loading"))]
    if not loading:
        return ""
    lrows = []
    for item in loading:
        lp, started = _num(item.get("pid")), _num(item.get("started_ms"))
        before = fmt_dur(death - started) if started is not None and death is not None else "?"
        lrows.append(
            [
                "?" if lp is None else str(int(lp)),
                _h(item.get("comm")),
                _h(item.get("model")) if item.get("model") else "-",
                escape(fmt_hms(started)),
                escape(before),
            ]
        )
    heads = ("pid", "process", "model", "since (UTC)", "before death")
    return (
        "<section><h2>Loading at the time</h2>"
        + _table(heads, lrows, numeric_from=3)
        + "</section>"
    )


def render_html(doc: dict) -> str:
    """The post-mortem as one self-contained HTML page (inline CSS and SVG, no scripts)."""
    doc = _dict(doc)
    victim = _dict(doc.get("victim"))
    death = _death_ms(doc)
    pid = _num(victim.get("pid"))
    pid_s = "?" if pid is None else str(int(pid))
    comm = _h(victim.get("comm"))
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(_title(doc))}: {comm} (pid {pid_s})</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{_h(_title(doc))}: {comm} (pid {pid_s}) died</h1>",
        _meta_html(doc),
        "<section><h2>Cause</h2>"
        f'<p class="cause">{_h(doc.get("cause"), "(not determined)")}</p>'
        "<h2>Fix</h2>"
        f'<p class="fix">{_h(doc.get("fix"), "(none suggested)")}</p></section>',
        _chart_html(doc),
        _kernel_html(doc),
        _members_html(doc),
        _memory_html(doc),
        _loading_html(doc, death),
        _events_html(doc, death),
        f'<p class="muted">vramscope post-mortem, schema <code>{_h(doc.get("schema"))}</code>.</p>',
        "</body></html>",
    ]
    return "\n".join(part for part in out if part) + "\n"
