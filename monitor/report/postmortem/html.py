"""The post-mortem as one self-contained HTML page: inline CSS and SVG chart, no scripts,
no external resources; reads offline and prints. Every string from the document is made
safe (common.py) and HTML-escaped."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

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
from monitor.report.postmortem.svg import render_svg


def _h(x: Any, default: str = "?") -> str:
    """Cleaned and HTML-escaped."""
    return escape(text(x, default), quote=True)


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


def _meta_html(pm: PostMortem) -> str:
    """Who died, when, how, by which event (with its data), on what command line."""
    victim, event = pm.victim, pm.event
    meta: list[tuple[str, str]] = [("when", escape(fmt_ts(pm.death_ms)))]
    if victim.how:
        meta.append(("how", _h(victim.how)))
    if event is not None:
        msg = text(event.message, "")
        meta.append(
            ("event", f"<code>{_h(event.kind)}</code>" + (f" {escape(msg)}" if msg else ""))
        )
    if victim.engine:
        meta.append(("engine", _h(victim.engine)))
    started, exited = victim.started_at_ms, victim.exited_ms
    if started is not None:
        ran = f" (ran {fmt_dur(exited - started)})" if exited is not None else ""
        meta.append(("started", escape(fmt_ts(started) + ran)))
    argv = argv_text(victim.argv)
    if argv:
        meta.append(("command", f"<pre>{escape(argv)}</pre>"))
    out = [
        '<section><table class="meta"><tbody>'
        + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in meta)
        + "</tbody></table>"
    ]
    data_rows = event_data_rows(event.data) if event is not None else []
    if data_rows:
        out.append(
            '<p class=muted>event data</p><table class="data"><tbody>'
            + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in data_rows)
            + "</tbody></table>"
        )
    out.append("</section>")
    return "\n".join(out)


def _chart_html(pm: PostMortem) -> str:
    out = ["<section><h2>Memory over time</h2>" + render_svg(pm)]
    srows = []
    for s in series(pm):
        st = stats(s.points)
        cells = [escape(s.label)] + ([escape(fmt_bytes(x)) for x in st] if st else ["-"] * 3)
        cells.append(escape(fmt_bytes(s.total)) if s.total else "-")
        srows.append(cells)
    if srows:
        out.append(_table(("series", "min", "max", "last", "total"), srows))
    out.append("</section>")
    return "\n".join(out)


def _kernel_html(pm: PostMortem) -> str:
    kernel = pm.victim.kernel
    if kernel is None:
        body = '<p class="muted">No kernel OOM record.</p>'
    else:
        krows = [(lbl, escape(fmt_bytes(getattr(kernel, key)))) for key, lbl in KERNEL_FIELDS]
        krows += [
            (k, _h(v)) for k, v in (("constraint", kernel.constraint), ("memcg", kernel.memcg)) if v
        ]
        body = _table(("field", "value"), krows)
    return f"<section><h2>Kernel's record of the kill</h2>\n{body}\n</section>"


def _members_html(pm: PostMortem) -> str:
    members = member_lines(pm)
    if not members or pm.cgroup_budget is None:
        return ""
    cgroup = _h(pm.cgroup_budget.cgroup)
    return (
        f"<section><h2>Members of cgroup {cgroup} at the kill</h2><ul>"
        + "".join(f"<li>{escape(line)}</li>" for line in members)
        + "</ul></section>"
    )


def _memory_html(pm: PostMortem) -> str:
    out = ["<section><h2>Memory at death (estimate vs measured)</h2>"]
    rows = memory_rows(pm)
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
    if pm.victim.measured is not None:
        out.append(f"<p>{escape(measured_line(pm.victim.measured))}</p>")
    out.append("</section>")
    return "\n".join(out)


def _loading_html(pm: PostMortem, death: float | None) -> str:
    if not pm.loading:
        return ""
    lrows = []
    for item in pm.loading:
        started = item.started_ms
        before = fmt_dur(death - started) if started is not None and death is not None else "?"
        lrows.append(
            [
                pid_text(item.pid),
                _h(item.comm),
                _h(item.model) if item.model else "-",
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


def render_html(doc: PostMortem | object) -> str:
    """The post-mortem (typed, or any JSON document) as one self-contained HTML page
    (inline CSS and SVG, no scripts)."""
    pm = as_postmortem(doc)
    death = pm.death_ms
    pid_s = pid_text(pm.victim.pid)
    comm = _h(pm.victim.comm)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(title(pm))}: {comm} (pid {pid_s})</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{_h(title(pm))}: {comm} (pid {pid_s}) died</h1>",
        _meta_html(pm),
        "<section><h2>Cause</h2>"
        f'<p class="cause">{_h(pm.cause, "(not determined)")}</p>'
        "<h2>Fix</h2>"
        f'<p class="fix">{_h(pm.fix, "(none suggested)")}</p></section>',
        _chart_html(pm),
        _kernel_html(pm),
        _members_html(pm),
        _memory_html(pm),
        _loading_html(pm, death),
        _events_html(pm, death),
        f'<p class="muted">vramscope post-mortem, schema <code>{_h(pm.schema)}</code>.</p>',
        "</body></html>",
    ]
    return "\n".join(part for part in out if part) + "\n"


def _events_html(pm: PostMortem, death: float | None) -> str:
    events, more = other_events(pm)
    out = ["<section><h2>Other events in the window</h2>"]
    erows = []
    for e in events:
        ts = e.ts_ms
        rel = fmt_dur(ts - death) if ts is not None and death is not None else "?"
        erows.append(
            [
                escape(fmt_hms(ts)),
                escape(rel),
                f"<code>{_h(e.kind)}</code>",
                _h(text(e.message, "")[:600], ""),
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
