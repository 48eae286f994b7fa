"""What every post-mortem rendering shares: safe strings, byte and time formats, the
timeline's series, the memory table's rows, the title and the window's other events.

Everything here reads a typed :class:`~monitor.analysis.postmortem_doc.PostMortem` (its
fields already validated: unknown is None). Every string taken from it is treated as
hostile: control characters (terminal escapes, NULs, lone surrogates) become ``\\xNN``
escapes (monitor/textsafe.py). Stdlib only; must not import textual or rich.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from monitor.analysis.postmortem_doc import MeasuredAtDeath, OtherEvent, PostMortem
from monitor.textsafe import terminal_safe
from monitor.units import precise_bytes

Point = tuple[float, float]


def clean(x: Any) -> str:
    """A string safe to print: control/format/surrogate characters become \\xNN escapes."""
    return terminal_safe(x)


def text(x: Any, default: str = "?") -> str:
    """``x`` cleaned; ``default`` when it is unknown or blank."""
    if x is None or (isinstance(x, str) and not x.strip()):
        return default
    return clean(x)


def pid_text(pid: int | None) -> str:
    return "?" if pid is None else str(pid)


EVENT_DATA_ROWS = 40
EVENT_DATA_VALUE_CHARS = 600


def event_data_rows(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """An event's data as (key, text) rows: strings as themselves (their line breaks kept,
    every other control character a visible escape), numbers and booleans as written,
    anything nested as compact JSON; bounded in rows and characters."""
    rows = []
    for k, v in list(data.items())[:EVENT_DATA_ROWS]:
        if isinstance(v, str):
            value = "\n".join(clean(line) for line in v[:EVENT_DATA_VALUE_CHARS].split("\n"))
        elif v is None:
            value = "unknown"
        elif isinstance(v, bool | int | float):
            value = str(v)
        else:
            value = clean(json.dumps(v, default=str, ensure_ascii=False)[:EVENT_DATA_VALUE_CHARS])
        if len(v if isinstance(v, str) else value) > EVENT_DATA_VALUE_CHARS:
            value += " …"
        rows.append((clean(k), value))
    if len(data) > EVENT_DATA_ROWS:
        rows.append(("…", f"{len(data) - EVENT_DATA_ROWS} more"))
    return rows


def fmt_bytes(n: float | None) -> str:
    """A byte count written by :func:`monitor.units.precise_bytes` ("?" when unknown)."""
    return precise_bytes(n)


def _dt(ms: float | None) -> datetime | None:
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def fmt_ts(ms: float | None) -> str:
    d = _dt(ms)
    return "?" if d is None else d.strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_hms(ms: float | None) -> str:
    d = _dt(ms)
    return "?" if d is None else d.strftime("%H:%M:%S")


def fmt_dur(ms: float | None) -> str:
    if ms is None:
        return "?"
    sign = "-" if ms < 0 else ""
    s = abs(ms) / 1000
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


@dataclass(slots=True)
class Series:
    """One line of the timeline (a process on a device, or a device's total in use)."""

    key: str
    label: str
    kind: str  # "process" or "device"
    victim: bool
    points: list[Point]
    total: float | None = None
    pid: int | None = field(default=None)


def series(pm: PostMortem) -> list[Series]:
    """Processes first (the victim first among them), then devices."""
    victim_pid = pm.victim.pid
    procs: list[Series] = []
    for i, p in enumerate(pm.processes):
        is_victim = p.pid is not None and p.pid == victim_pid
        label = f"pid {pid_text(p.pid)} {text(p.comm)} on {text(p.device_id)}" + (
            " (victim)" if is_victim else ""
        )
        procs.append(Series(f"proc-{i}", label, "process", is_victim, list(p.points)))
    procs = top_processes(procs)
    devs: list[Series] = []
    for i, d in enumerate(pm.devices):
        label = f"device {text(d.device_id)}" + (f" ({text(d.name)})" if d.name else "")
        devs.append(Series(f"dev-{i}", label, "device", False, list(d.points), d.total_bytes))
    return procs + devs


TOP_PROCESSES = 5


def top_processes(procs: list[Series]) -> list[Series]:
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
    label = f"others ({len(folded)} processes, summed)"
    others = Series("proc-others", label, "process", False, sorted(summed.items()))
    return victims + shown + [others]


def x_range(pm: PostMortem, lines: list[Series]) -> tuple[float, float] | None:
    """The time span drawn: the window, widened to every sample and the death."""
    start, end = pm.window_start_ms, pm.window_end_ms
    ts = [t for s in lines for t, _ in s.points]
    if start is None:
        start = min(ts) if ts else None
    if end is None:
        end = max(ts) if ts else None
    death = pm.death_ms
    if death is not None:
        start = death if start is None else min(start, death)
        end = death if end is None else max(end, death)
    if start is None or end is None:
        return None
    if end <= start:
        start, end = start - 30_000, end + 30_000
    return start, end


MEMORY_HEADS = ("estimate", "at death", "last seen", "peak", "ceiling")
KERNEL_FIELDS = (
    ("anon_rss_bytes", "anon RSS"),
    ("file_rss_bytes", "file RSS"),
    ("shmem_rss_bytes", "shmem RSS"),
)


def memory_rows(pm: PostMortem) -> list[tuple[str, list[str]]]:
    """Per device: the estimate, at death, last seen, peak and ceiling ("-" unknown)."""
    est = pm.estimate
    by_device = est.by_device if est else {}
    meas = pm.victim.at_death or (est.measured_at_death if est else {})
    sources = (by_device, meas, pm.victim.last_measured, pm.victim.peak, pm.ceiling)
    keys: list[str] = []
    for src in (by_device, est.measured_at_death if est else {}, *sources[1:]):
        keys.extend(k for k in src if k not in keys)
    return [
        (clean(k), [fmt_bytes(src[k]) if src.get(k) is not None else "-" for src in sources])
        for k in keys
    ]


TITLES = ("OOM post-mortem", "crash post-mortem", "exit post-mortem")


def title(pm: PostMortem) -> str:
    """The document's title (by the real cause: monitor/analysis/postmortem.py); a document from
    before titles is an OOM post-mortem only when a kernel kill is in it."""
    if pm.title in TITLES:
        return pm.title
    kind = pm.event.kind if pm.event else None
    if kind in ("oom_kill", "oomd_kill") or pm.victim.kernel is not None:
        return "OOM post-mortem"
    return "crash post-mortem"


def measured_line(m: MeasuredAtDeath) -> str:
    """The victim's memory at death by the definition status, the TUI, diagnose and
    /metrics use (monitor/analysis/measured.py); unknown parts print as '-'."""

    def part(n: float | None) -> str:
        return "-" if n is None else fmt_bytes(n)

    return (
        f"measured at its last tick: {part(m.total_bytes)} (GPU {part(m.device_bytes)}"
        f" + anon {part(m.host_anon_bytes)} + file {part(m.host_file_bytes)})"
    )


def argv_text(argv: tuple[str, ...]) -> str | None:
    """The command line, shell-quoted, at most 4000 characters; None when unknown."""
    if not argv:
        return None
    s = shlex.join(clean(a) for a in argv)
    return s if len(s) <= 4000 else s[:4000] + " …"


def stats(points: list[Point]) -> tuple[float, float, float] | None:
    """(min, max, last) of a series; None when it has no samples."""
    if not points:
        return None
    vals = [v for _, v in points]
    return min(vals), max(vals), points[-1][1]


def member_lines(pm: PostMortem) -> list[str]:
    """One line per member of the killed cgroup (monitor/analysis/cgroup_budget.py): its
    host memory split at the kill (anonymous, file, shmem) and its GPU memory."""
    budget = pm.cgroup_budget
    out = []
    for m in (budget.members or ()) if budget else ():
        parts = ", ".join(
            f"{label} {fmt_bytes(n)}"
            for n, label in (
                (m.anon_bytes, "anon"),
                (m.file_bytes, "file"),
                (m.shmem_bytes, "shmem"),
                (m.gpu_bytes, "GPU"),
            )
        )
        who = f"pid {pid_text(m.pid)} {text(m.name)} ({text(m.comm)})"
        out.append(f"{who}: {parts}" + (" (victim)" if m.victim else ""))
    return out


MAX_EVENTS_SHOWN = 50  # monitor/analysis/postmortem.py MAX_EVENTS; older documents too


def other_events(pm: PostMortem) -> tuple[list[OtherEvent], str]:
    """The window's other events to show (at most ``MAX_EVENTS_SHOWN``, nearest the death,
    in time order) and the "and N more" line for the rest, by kind ("" when none)."""
    events = list(pm.other_events)
    death = pm.death_ms or 0
    if len(events) > MAX_EVENTS_SHOWN:
        events = sorted(events, key=lambda e: abs((e.ts_ms or 0) - death))
    shown, rest = events[:MAX_EVENTS_SHOWN], events[MAX_EVENTS_SHOWN:]
    kinds: dict[str, int] = {}
    for e in rest:
        kinds[text(e.kind)] = kinds.get(text(e.kind), 0) + 1
    omitted = pm.other_events_omitted
    if omitted:
        for k, n in pm.other_events_omitted_kinds.items():
            if n:
                kinds[clean(k)] = kinds.get(clean(k), 0) + n
    more = len(rest) + (omitted or 0)
    note = ""
    if more:
        top = sorted(kinds.items(), key=lambda kv: -kv[1])[:6]
        note = f"and {more} more" + (
            " (" + ", ".join(f"{n} {k}" for k, n in top) + (", ..." if len(kinds) > 6 else "") + ")"
            if top
            else ""
        )
    return sorted(shown, key=lambda e: e.ts_ms or 0), note
