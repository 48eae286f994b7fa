"""The post-mortem as plain text for an 80-100 column terminal (``vramscope postmortem``):
no line longer than the width, every string from the document made safe (common.py)."""

from __future__ import annotations

import json
import shutil
import textwrap

from monitor.analysis.postmortem_doc import PostMortem, as_postmortem
from monitor.report.postmortem.common import (
    KERNEL_FIELDS,
    MEMORY_HEADS,
    Point,
    argv_text,
    clean,
    fmt_bytes,
    fmt_dur,
    fmt_hms,
    fmt_ts,
    measured_line,
    member_lines,
    memory_rows,
    other_events,
    pid_text,
    series,
    stats,
    text,
    title,
    x_range,
)

SPARK_CHARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40


def sparkline(points: list[Point], start: float, end: float, width: int = SPARK_WIDTH) -> str:
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
    last = len(SPARK_CHARS) - 1
    for c in cols:
        if c is None:
            out.append(" ")
        elif top <= 0:
            out.append(SPARK_CHARS[0])
        else:
            out.append(SPARK_CHARS[min(int(c / top * last + 0.5), last)])
    return "".join(out)


def _wrap(value: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    rest = first if rest is None else rest
    lines = (
        textwrap.wrap(
            value,
            width=width,
            initial_indent=first,
            subsequent_indent=rest,
            break_long_words=True,
            break_on_hyphens=False,
        )
        if value
        else []
    )
    return lines or [first.rstrip()]


def _fit(line: str, width: int) -> str:
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def _labelled(label: str, value: str, width: int, pad: int = 11) -> list[str]:
    return _wrap(value, width, f"  {label:<{pad}}", " " * (pad + 2))


def _section(heading: str, width: int) -> list[str]:
    return ["", heading, "-" * min(len(heading), width)]


def _head_text(pm: PostMortem, width: int) -> list[str]:
    """The title and who died, when, how, by which event, on what command line."""
    victim, event = pm.victim, pm.event
    out = _wrap(f"{title(pm)}: {text(victim.comm)} (pid {pid_text(victim.pid)}) died", width)
    out.append("=" * min(max(len(x) for x in out), width))
    out.extend(_labelled("when", fmt_ts(pm.death_ms), width))
    if victim.how:
        out.extend(_labelled("how", text(victim.how), width))
    if event is not None:
        kind = text(event.kind)
        msg = text(event.message, "")
        out.extend(_labelled("event", f"{kind}: {msg}" if msg else kind, width))
        if event.data:
            pairs = " ".join(
                f"{clean(k)}={clean(json.dumps(v, default=str))}" for k, v in event.data.items()
            )
            out.extend(_labelled("", pairs if len(pairs) <= 600 else pairs[:600] + " …", width))
    if victim.engine:
        out.extend(_labelled("engine", text(victim.engine), width))
    started, exited = victim.started_at_ms, victim.exited_ms
    if started is not None:
        ran = f" (ran {fmt_dur(exited - started)})" if exited is not None else ""
        out.extend(_labelled("started", fmt_ts(started) + ran, width))
    argv = argv_text(victim.argv)
    if argv:
        out.extend(_labelled("command", argv, width))
    return out


def _kernel_text(pm: PostMortem, width: int) -> list[str]:
    kernel = pm.victim.kernel
    out = _section("Kernel's record of the kill", width)
    if kernel is None:
        return out + ["  (no kernel OOM record)"]
    for key, label in KERNEL_FIELDS:
        out.extend(_labelled(label, fmt_bytes(getattr(kernel, key)), width))
    if kernel.constraint:
        out.extend(_labelled("constraint", text(kernel.constraint), width))
    if kernel.memcg:
        out.extend(_labelled("memcg", text(kernel.memcg), width))
    return out


def _members_text(pm: PostMortem, width: int) -> list[str]:
    members = member_lines(pm)
    if not members or pm.cgroup_budget is None:
        return []
    out = _section(f"Members of cgroup {text(pm.cgroup_budget.cgroup)} at the kill", width)
    for line in members:
        out.extend(_wrap(line, width, "  ", "    "))
    return out


def _memory_text(pm: PostMortem, width: int) -> list[str]:
    out = _section("Memory at death (estimate vs measured)", width)
    rows = memory_rows(pm)
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
    if pm.victim.measured is not None:
        out.extend(_wrap(measured_line(pm.victim.measured), width, "  "))
    return out


def _loading_text(pm: PostMortem, death: float | None, width: int) -> list[str]:
    if not pm.loading:
        return []
    out = _section("Loading at the time", width)
    for item in pm.loading:
        st = item.started_ms
        when = ""
        if st is not None:
            when = f" since {fmt_hms(st)}"
            if death is not None:
                when += f" ({fmt_dur(death - st)} before death)"
        model = f" {text(item.model)}" if item.model else ""
        line = f"pid {pid_text(item.pid)} {text(item.comm)} loading{model}{when}"
        out.extend(_wrap(line, width, "  ", "    "))
    return out


def _timeline_text(pm: PostMortem, death: float | None, width: int) -> list[str]:
    lines = series(pm)
    xr = x_range(pm, lines)
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
    if not any(s.points for s in lines):
        out.append("  (no samples in the window)")
    for s in lines:
        total = f", total {fmt_bytes(s.total)}" if s.total else ""
        out.extend(_wrap(s.label + total, width, "  ", "    "))
        low_high_last = stats(s.points)
        if low_high_last is None or xr is None:
            out.append("    (no samples)")
            continue
        low, high, last = low_high_last
        figures = f"min {fmt_bytes(low)}  max {fmt_bytes(high)}  last {fmt_bytes(last)}"
        spark = sparkline(s.points, xr[0], xr[1], min(SPARK_WIDTH, width - 6))
        line = f"    |{spark}|  {figures}"
        if len(line) <= width:
            out.append(line)
        else:
            out.append(f"    |{spark}|")
            out.extend(_wrap(figures, width, "    "))
    return out


def _events_text(pm: PostMortem, death: float | None, width: int) -> list[str]:
    events, more = other_events(pm)
    out: list[str] = [] if events else ["  (none)"]
    for e in events:
        ts = e.ts_ms
        rel = f" ({fmt_dur(ts - death)})" if ts is not None and death is not None else ""
        head = f"  {fmt_hms(ts)}{rel} {text(e.kind)}: "
        out.extend(_wrap(text(e.message, "")[:600], width, head, "      "))
    if more:
        out.extend(_wrap(more + ".", width, "  "))
    return out


def render_text(doc: PostMortem | object, width: int | None = None) -> str:
    """The post-mortem (typed, or any JSON document) as plain text; no line is longer
    than ``width`` columns (default: the terminal width clamped to 80..100)."""
    if width is None:
        width = min(max(shutil.get_terminal_size((100, 24)).columns, 80), 100)
    width = max(int(width), 40)
    pm = as_postmortem(doc)
    death = pm.death_ms
    out = _head_text(pm, width)
    out += _kernel_text(pm, width)
    out += _members_text(pm, width)
    out += _memory_text(pm, width)
    out += _section("Cause", width)
    out += _wrap(text(pm.cause, "(not determined)"), width, "  ")
    out += _section("Fix", width)
    out += _wrap(text(pm.fix, "(none suggested)"), width, "  ")
    out += _loading_text(pm, death, width)
    out += _timeline_text(pm, death, width)
    out += _section("Other events in the window", width)
    out += _events_text(pm, death, width)
    return "\n".join(_fit(line.rstrip(), width) for line in out) + "\n"
