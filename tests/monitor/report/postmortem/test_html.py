"""The post-mortem's HTML page (monitor/report/postmortem/html.py): a jinja2 template with
autoescape, shipped as package data; a hostile process name, command line, cause or event
message is text on the page, never markup."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

from monitor.analysis.postmortem_doc import PostMortem
from monitor.report.postmortem import render_html

T0 = 1_800_000_000_000
HOSTILE = """<script>alert("x")</script>' onmouseover='y'&#34;"""
ESCAPED = (
    "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#x27; onmouseover=&#x27;y&#x27;&amp;#34;"
)


def hostile_doc() -> dict:
    return {
        "schema": "vramscope.postmortem/1",
        "title": "OOM post-mortem",
        "event": {"ts_ms": T0, "kind": HOSTILE, "message": HOSTILE, "data": {HOSTILE: HOSTILE}},
        "victim": {
            "pid": 7,
            "comm": HOSTILE,
            "argv": ["llama-server", "--alias", HOSTILE],
            "how": HOSTILE,
            "engine": HOSTILE,
            "kernel": {"anon_rss_bytes": 1024, "constraint": HOSTILE, "memcg": HOSTILE},
        },
        "timeline": {
            "processes": [{"pid": 7, "comm": HOSTILE, "device_id": "host", "points": [[T0, 5]]}],
            "devices": [{"device_id": "host", "name": HOSTILE, "points": [[T0, 9]]}],
        },
        "loading": [{"pid": 8, "comm": HOSTILE, "model": HOSTILE, "started_ms": T0 - 5}],
        "ceiling": {HOSTILE: 10},
        "cause": HOSTILE,
        "fix": HOSTILE,
        "cgroup_budget": {"cgroup": HOSTILE, "members": [{"pid": 7, "name": HOSTILE}]},
        "other_events": [{"ts_ms": T0 - 1, "kind": HOSTILE, "message": HOSTILE}],
    }


def test_a_hostile_process_name_is_text_not_markup() -> None:
    page = render_html(hostile_doc())
    assert "<script" not in page and "onmouseover='" not in page
    # every place the document's strings land: the title, the head, each section
    body = page.split("</style>", 1)[1]
    for where in ("<title>", "<h1>", "<pre>", 'class="cause"', 'class="fix"', "<li>", "<code>"):
        assert where in page, where
    assert body.count(ESCAPED) >= 12
    assert re.search(r'<p class="cause">' + re.escape(ESCAPED) + "</p>", page)
    assert f"<title>OOM post-mortem: {ESCAPED} (pid 7)</title>" in page
    # the chart inside stays well-formed XML with the name as its text
    svg = page[page.index("<svg") : page.index("</svg>") + len("</svg>")]
    texts = "".join(ET.fromstring(svg).itertext())
    assert HOSTILE in texts


def test_the_page_is_the_packaged_template() -> None:
    template = resources.files("monitor.report.postmortem") / "templates" / "postmortem.html.j2"
    assert template.is_file()
    source = template.read_text(encoding="utf-8")
    page = render_html(PostMortem.from_json({}))
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</body></html>\n")
    assert "@media print" in source and "@media print" in page
    assert "No kernel OOM record." in page and "(not determined)" in page
    svg = resources.files("monitor.report.postmortem") / "templates" / "chart.svg.j2"
    assert svg.is_file() and 'class="death-marker"' in svg.read_text(encoding="utf-8")
    package = Path(__file__).parents[4] / "monitor" / "report" / "postmortem"
    for module in package.glob("*.py"):  # the templates escape, nothing by hand
        assert "html import escape" not in module.read_text(encoding="utf-8"), module
