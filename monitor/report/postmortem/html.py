"""The post-mortem as one self-contained HTML page: inline CSS and SVG chart, no scripts,
no external resources; reads offline and prints.

The page is the jinja2 template ``templates/postmortem.html.j2`` (package data) with
autoescape on: this module gives it plain values, every string from the document made
terminal-safe (common.py) and none escaped here; only the SVG chart (svg.py, well-formed
XML that escapes its own labels) goes in as markup."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from monitor.analysis.postmortem_doc import PostMortem, as_postmortem
from monitor.report.postmortem.common import (
    KERNEL_FIELDS,
    MEMORY_HEADS,
    argv_text,
    event_data_rows,
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
)
from monitor.report.postmortem.jinja import render
from monitor.report.postmortem.svg import render_svg

TEMPLATE = "postmortem.html.j2"


def _meta(pm: PostMortem) -> list[tuple[str, str, str]]:
    """(label, value, extra) rows: who died, when, how, by which event, on what command."""
    victim, event = pm.victim, pm.event
    meta = [("when", fmt_ts(pm.death_ms), "")]
    if victim.how:
        meta.append(("how", text(victim.how), ""))
    if event is not None:
        meta.append(("event", text(event.kind), text(event.message, "")))
    if victim.engine:
        meta.append(("engine", text(victim.engine), ""))
    started, exited = victim.started_at_ms, victim.exited_ms
    if started is not None:
        ran = f" (ran {fmt_dur(exited - started)})" if exited is not None else ""
        meta.append(("started", fmt_ts(started) + ran, ""))
    argv = argv_text(victim.argv)
    if argv:
        meta.append(("command", argv, ""))
    return meta


def _series_rows(pm: PostMortem) -> list[list[str]]:
    rows = []
    for s in series(pm):
        st = stats(s.points)
        cells = [s.label] + ([fmt_bytes(x) for x in st] if st else ["-"] * 3)
        cells.append(fmt_bytes(s.total) if s.total else "-")
        rows.append(cells)
    return rows


def _kernel_rows(pm: PostMortem) -> list[tuple[str, str]]:
    kernel = pm.victim.kernel
    if kernel is None:
        return []
    rows = [(label, fmt_bytes(getattr(kernel, key))) for key, label in KERNEL_FIELDS]
    named = (("constraint", kernel.constraint), ("memcg", kernel.memcg))
    return rows + [(k, text(v)) for k, v in named if v]


def _loading_rows(pm: PostMortem, death: float | None) -> list[list[str]]:
    rows = []
    for item in pm.loading:
        started = item.started_ms
        before = fmt_dur(death - started) if started is not None and death is not None else "?"
        model = text(item.model) if item.model else "-"
        rows.append([pid_text(item.pid), text(item.comm), model, fmt_hms(started), before])
    return rows


def _event_rows(pm: PostMortem, death: float | None) -> tuple[list[list[str]], str]:
    events, more = other_events(pm)
    rows = []
    for e in events:
        ts = e.ts_ms
        rel = fmt_dur(ts - death) if ts is not None and death is not None else "?"
        rows.append([fmt_hms(ts), rel, text(e.kind), text(e.message, "")[:600]])
    return rows, more


def render_html(doc: PostMortem | object) -> str:
    """The post-mortem (typed, or any JSON document) as one self-contained HTML page
    (inline CSS and SVG, no scripts)."""
    pm = as_postmortem(doc)
    death = pm.death_ms
    event_rows, more = _event_rows(pm, death)
    values: dict[str, Any] = {
        "title": title(pm),
        "comm": text(pm.victim.comm),
        "pid": pid_text(pm.victim.pid),
        "meta": _meta(pm),
        "data_rows": event_data_rows(pm.event.data) if pm.event is not None else [],
        "cause": text(pm.cause, "(not determined)"),
        "fix": text(pm.fix, "(none suggested)"),
        "svg": Markup(render_svg(pm)),  # noqa: S704 - well-formed SVG that escapes its labels
        "series_rows": _series_rows(pm),
        "kernel_rows": _kernel_rows(pm),
        "members": member_lines(pm) if pm.cgroup_budget is not None else [],
        "cgroup": text(pm.cgroup_budget.cgroup if pm.cgroup_budget else None),
        "memory_heads": MEMORY_HEADS,
        "memory_rows": [[k, *cells] for k, cells in memory_rows(pm)],
        "measured": measured_line(pm.victim.measured) if pm.victim.measured else "",
        "loading_rows": _loading_rows(pm, death),
        "event_rows": event_rows,
        "more": more,
        "schema": text(pm.schema),
    }
    return render(TEMPLATE, values)
