"""Render a post-mortem (an OOM, crash or exit post-mortem: monitor/analysis/postmortem.py).

The renderers take the typed :class:`~monitor.analysis.postmortem_doc.PostMortem`, or any
JSON document, read once by ``PostMortem.from_json`` (a field missing, null or of the wrong
type is unknown; they never raise on such a document, they print "?" or leave the part
out). ``text.py``: a report that fits an 80-100 column terminal; ``svg.py`` (with
``chart.py``, what it draws): the memory chart; ``html.py``: one self-contained HTML file
(inline CSS and SVG, no scripts, no external resources) that reads offline and prints; the
JSON document is ``PostMortem.to_json()``. Every string taken from the document is treated
as hostile (common.py); the SVG and the HTML come from jinja2 templates with autoescape
(``templates/``, package data: jinja.py). Must not import textual or rich.
"""

from monitor.report.postmortem.common import fmt_bytes, fmt_dur, fmt_hms, fmt_ts, measured_line
from monitor.report.postmortem.html import render_html
from monitor.report.postmortem.svg import downsample, render_svg
from monitor.report.postmortem.text import render_text, sparkline

__all__ = [
    "downsample",
    "fmt_bytes",
    "fmt_dur",
    "fmt_hms",
    "fmt_ts",
    "measured_line",
    "render_html",
    "render_svg",
    "render_text",
    "sparkline",
]
