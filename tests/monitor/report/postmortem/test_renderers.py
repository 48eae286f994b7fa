"""Post-mortem rendering: text for a terminal, one self-contained HTML file with an SVG chart."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from html import escape as escape_html
from pathlib import Path

import pytest

from monitor.report.postmortem import downsample, render_html, render_svg, render_text

SVG = "{http://www.w3.org/2000/svg}"
MIB = 1024**2
GIB = 1024**3
T0 = 1_760_000_000_000  # epoch ms
DEATH = T0 + 600_000


def series(fn, step_ms: int = 1000, n: int = 601) -> list[list[int]]:
    return [[T0 + i * step_ms, int(fn(i))] for i in range(n)]


@pytest.fixture
def doc() -> dict:
    victim_pts = series(lambda i: 4 * MIB + i * (60 * MIB) / 600)  # grows to 64 MiB
    return {
        "schema": "vramscope.postmortem/1",
        "event": {
            "ts_ms": DEATH,
            "kind": "oom_kill",
            "message": "Out of memory: Killed process 7125 (llama-server)",
            "data": {"constraint": "CONSTRAINT_MEMCG"},
        },
        "victim": {
            "pid": 7125,
            "comm": "llama-server",
            "argv": [
                "llama-server",
                "-m",
                "/models/qwen3-8b-q4_k_m.gguf",
                "-c",
                "32768",
                "--alias",
                "a&b",
            ],
            "engine": "llama.cpp",
            "started_at_ms": T0 - 3_600_000,
            "exited_ms": DEATH,
            "how": "killed by the kernel OOM killer",
            "last_measured": {"host": 64 * MIB, "drm:0000:c5:00.0": 5 * GIB},
            "peak": {"host": 64 * MIB},
            "kernel": {
                "anon_rss_bytes": 60 * MIB,
                "file_rss_bytes": 3 * MIB,
                "shmem_rss_bytes": 1 * MIB,
                "constraint": "CONSTRAINT_MEMCG",
                "memcg": "/vstest",
            },
        },
        "window": {"start_ms": T0, "end_ms": DEATH},
        "timeline": {
            "devices": [
                {
                    "device_id": "host",
                    "name": "Host RAM",
                    "total_bytes": 64 * GIB,
                    "points": series(lambda i: 20 * MIB + i * 100 * MIB / 600),
                },
                {
                    "device_id": "drm:0000:c5:00.0",
                    "name": "Radeon 8060S",
                    "total_bytes": 96 * GIB,
                    "points": series(lambda i: 5 * GIB, 5000, 121),
                },
            ],
            "processes": [
                {"pid": 7125, "comm": "llama-server", "device_id": "host", "points": victim_pts},
                {
                    "pid": 4242,
                    "comm": "ollama",
                    "device_id": "host",
                    "points": series(lambda i: 10 * MIB),
                },
                {
                    "pid": 5151,
                    "comm": "python3",
                    "device_id": "drm:0000:c5:00.0",
                    "points": series(lambda i: 2 * GIB + (i % 7) * MIB, 2000, 301),
                },
            ],
        },
        "loading": [
            {
                "pid": 7125,
                "comm": "llama-server",
                "model": "qwen3-8b-q4_k_m.gguf",
                "started_ms": DEATH - 20_000,
            }
        ],
        "estimate": {"by_device": {"host": 48 * MIB}, "measured_at_death": {"host": 74 * MIB}},
        "ceiling": {"host": 80 * MIB},
        "cause": (
            "The victim's resident memory grew steadily while it loaded the model until "
            "the memory cgroup /vstest reached its 80 MiB limit; the kernel killed it "
            "because it was the largest task in that cgroup. The estimate of 48 MiB "
            "left out the mmap'd weights that count against the cgroup."
        ),
        "fix": "Raise MemoryMax of the vstest slice to at least 96 MiB or pass --no-mmap.",
        "other_events": [
            {
                "ts_ms": DEATH - 5000,
                "kind": "xid",
                "message": "NVRM: Xid (PCI:0000:c5:00): 31, pid=5151",
            }
        ],
    }


def svg_of(html: str) -> ET.Element:
    m = re.search(r"<svg\b.*?</svg>", html, re.S)
    assert m, "no <svg> element"
    return ET.fromstring(m.group(0))


def viewbox(svg: ET.Element) -> tuple[float, float, float, float]:
    x, y, w, h = (float(v) for v in svg.get("viewBox").split())
    return x, y, w, h


def polyline_points(el: ET.Element) -> list[tuple[float, float]]:
    return [tuple(float(c) for c in p.split(",")) for p in el.get("points").split()]


def legend_texts(svg: ET.Element) -> list[str]:
    legend = next(g for g in svg.iter(f"{SVG}g") if g.get("class") == "legend")
    return ["".join(t.itertext()) for t in legend.iter(f"{SVG}text")]


def test_html_chart_is_the_victims_device_with_legend(doc: dict) -> None:
    svg = svg_of(render_html(doc))
    lines = {p.get("data-series"): p for p in svg.iter(f"{SVG}polyline")}
    assert set(lines) == {"proc-0", "dev-0"}  # the victim and host's total; no drm line
    assert "victim" in lines["proc-0"].get("class")
    bands = [p for p in svg.iter(f"{SVG}polygon") if p.get("class") == "band"]
    assert ["".join(b.itertext()) for b in bands] == ["pid 4242 ollama"]
    legend = legend_texts(svg)
    assert "pid 7125 llama-server (victim) on host" in legend[0]
    for want in (
        "host total in use (Host RAM)",
        "pid 4242 ollama",
        "host capacity: 64.00 GiB",
        "not charted",
        "drm:0000:c5:00.0",
    ):
        assert sum(want in t for t in legend) == 1, want
    # 64 GiB of capacity over ~100 MiB of data: written, not drawn to a flat chart
    limit = next(g for g in svg.iter(f"{SVG}g") if "limit" in (g.get("class") or "").split())
    assert "off-scale" in limit.get("class") and limit.find(f"{SVG}line") is None


def test_html_death_marker_and_axes(doc: dict) -> None:
    svg = svg_of(render_html(doc))
    markers = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "death-marker"]
    assert len(markers) == 1
    line = markers[0].find(f"{SVG}line")
    plot = next(r for r in svg.iter(f"{SVG}rect") if r.get("class") == "plot-area")
    right = float(plot.get("x")) + float(plot.get("width"))
    assert float(line.get("x1")) == pytest.approx(right)  # death is at the window's end
    x_labels = [
        "".join(t.itertext())
        for g in svg.iter(f"{SVG}g")
        if g.get("class") == "x-axis"
        for t in g.iter(f"{SVG}text")
    ]
    assert sum(bool(re.fullmatch(r"\d\d:\d\d:\d\d", s)) for s in x_labels) >= 3
    assert any("UTC" in s for s in x_labels)
    y_labels = [
        "".join(t.itertext())
        for g in svg.iter(f"{SVG}g")
        if g.get("class") == "y-axis"
        for t in g.iter(f"{SVG}text")
    ]
    assert any("GiB" in s for s in y_labels)
    assert sum(bool(re.fullmatch(r"\d+(\.\d+)?", s)) for s in y_labels) >= 3


def test_every_point_inside_viewbox(doc: dict) -> None:
    doc["timeline"]["processes"][1]["points"].append([DEATH + 3_600_000, 99 * GIB])  # outside
    doc["timeline"]["processes"][1]["points"].append([T0 + 1000, -5])  # negative
    svg = svg_of(render_html(doc))
    x0, y0, w, h = viewbox(svg)
    n = 0
    for el in svg.iter():
        if el.tag in (f"{SVG}polyline", f"{SVG}polygon"):
            for x, y in polyline_points(el):
                assert x0 <= x <= x0 + w and y0 <= y <= y0 + h
                n += 1
        for a, b in (("x1", "y1"), ("x2", "y2"), ("x", "y")):
            if el.get(a) is not None and el.get(b) is not None:
                assert x0 <= float(el.get(a)) <= x0 + w, (el.tag, el.attrib)
                assert y0 <= float(el.get(b)) <= y0 + h, (el.tag, el.attrib)
    assert n > 1000


def test_hostile_strings_are_escaped(doc: dict) -> None:
    doc["victim"]["comm"] = "<script>alert(1)</script>"
    doc["victim"]["argv"] = ["<script>alert(1)</script>", "--x", "a&b", '"q"', "\x1b[2J"]
    doc["timeline"]["processes"][0]["comm"] = "<script>alert(1)</script>"
    doc["cause"] = "cause with <b>markup</b> & ampersand"
    doc["other_events"][0]["message"] = "</svg><script>x</script>"
    html = render_html(doc)
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "a&amp;b" in html and "a&b" not in html
    assert "<b>markup</b>" not in html
    assert "\x1b" not in html
    assert html.count("<svg") == 1 and html.count("</svg>") == 1
    svg = svg_of(html)  # still well-formed with the hostile comm in a <title> and the legend
    assert any("<script>alert(1)</script>" in t for t in legend_texts(svg))
    text = render_text(doc, width=100)
    assert "\x1b" not in text


def test_long_series_downsampled_keeps_peak_at_top(doc: dict) -> None:
    pts = [[T0 + i * 1000 // 6, 1 * GIB + (i % 50) * MIB] for i in range(3600)]
    pts[1777][1] = 30 * GIB  # one sharp spike, the highest value in the chart
    doc["timeline"]["processes"][1]["points"] = pts  # ollama, on the victim's device
    doc["timeline"]["devices"][0]["total_bytes"] = None  # no limit line to scale to
    svg = svg_of(render_html(doc))
    plot = next(r for r in svg.iter(f"{SVG}rect") if r.get("class") == "plot-area")
    top = float(plot.get("y"))
    bottom = top + float(plot.get("height"))
    band = next(p for p in svg.iter(f"{SVG}polygon") if "4242" in "".join(p.itertext()))
    got = polyline_points(band)
    upper = got[: len(got) // 2]
    assert 100 < len(upper) <= 600
    # the spike survives thinning and is the top of the axis (less 4 % headroom)
    assert min(y for _, y in upper) == pytest.approx(top + (bottom - top) * (1 - 1 / 1.04), abs=0.2)
    # everything is scaled to the same axis: nothing above the top or below the bottom
    for p in [*svg.iter(f"{SVG}polyline"), *svg.iter(f"{SVG}polygon")]:
        assert all(top - 1e-6 <= y <= bottom + 1e-6 for _, y in polyline_points(p))
    # times stay ordered after downsampling
    xs = [x for x, _ in upper]
    assert xs == sorted(xs)


def test_downsample_keeps_min_and_max() -> None:
    pts = [(float(i), float((i * 37) % 101)) for i in range(3600)]
    pts[10] = (10.0, 1000.0)
    pts[3000] = (3000.0, -1.0)
    out = downsample(pts, 600)
    assert len(out) <= 600
    assert max(v for _, v in out) == 1000.0 and min(v for _, v in out) == -1.0
    assert downsample(pts[:5], 600) == pts[:5]


@pytest.mark.parametrize("width", [80, 100])
def test_text_fits_width_and_has_the_essentials(doc: dict, width: int) -> None:
    doc["victim"]["argv"].append("/very/long/" + "x" * 300)
    text = render_text(doc, width=width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "7125" in text and "llama-server" in text
    flat = " ".join(text.split())
    assert doc["cause"] in flat
    assert doc["fix"] in flat
    assert "CONSTRAINT_MEMCG" in text and "/vstest" in text and "60.0 MiB" in text
    assert "qwen3-8b-q4_k_m.gguf" in text  # what was loading
    assert "xid" in text and "Xid" in text  # other events
    assert "80.0 MiB" in text and "48.0 MiB" in text and "74.0 MiB" in text  # ceiling, est
    # one sparkline per series, ending high for the growing victim
    sparks = re.findall(r"\|([ ▁▂▃▄▅▆▇█]+)\|", text)
    assert len(sparks) == 5
    assert all(len(s) <= 40 for s in sparks)
    assert sparks[0].rstrip()[-1] == "█" and sparks[0][0] in "▁▂"
    assert "min 4.0 MiB" in text and "max 64.0 MiB" in text


def test_text_default_width_is_terminal_sized(doc: dict, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    assert max(len(line) for line in render_text(doc).splitlines()) <= 100
    monkeypatch.setenv("COLUMNS", "20")
    assert max(len(line) for line in render_text(doc).splitlines()) <= 80


def _strip(doc: dict) -> list[dict]:
    docs = []
    d = copy.deepcopy(doc)
    del d["estimate"]
    d["victim"]["kernel"] = None
    d["timeline"] = {"devices": [], "processes": []}
    docs.append(d)
    d = copy.deepcopy(doc)
    for key in ("estimate", "ceiling", "cause", "fix", "loading", "other_events", "window"):
        d[key] = None
    d["victim"] = {"pid": None, "comm": None, "argv": None, "kernel": {}, "peak": None}
    d["event"] = None
    docs.append(d)
    d = copy.deepcopy(doc)
    d["timeline"]["processes"][0]["points"] = [[None, 1], [T0, None], "junk", [T0, 5]]
    d["timeline"]["devices"][0] = {"device_id": None, "points": None}
    d["timeline"]["devices"][1]["points"] = [[T0 + 1000, 0], [T0 + 2000, 0]]
    d["window"] = {"start_ms": DEATH, "end_ms": DEATH}
    d["victim"]["started_at_ms"] = 1e30
    docs.append(d)
    docs.append({})
    docs.append({"schema": "vramscope.postmortem/1", "timeline": None, "victim": "x"})
    return docs


def test_missing_and_null_fields_render(doc: dict) -> None:
    for d in _strip(doc):
        text = render_text(d, width=80)
        assert max(len(line) for line in text.splitlines()) <= 80
        html = render_html(d)
        svg = svg_of(html)
        x0, y0, w, h = viewbox(svg)
        for el in svg.iter(f"{SVG}polyline"):
            assert all(x0 <= x <= x0 + w and y0 <= y <= y0 + h for x, y in polyline_points(el))
        ET.fromstring(render_svg(d))


def test_empty_timeline_says_so(doc: dict) -> None:
    doc["timeline"] = {"devices": [], "processes": []}
    text = render_text(doc, width=90)
    assert "no samples" in text
    svg = svg_of(render_html(doc))
    assert not list(svg.iter(f"{SVG}polyline"))
    assert any("no samples" in "".join(t.itertext()) for t in svg.iter(f"{SVG}text"))
    # the death marker still shows where the death falls
    assert any(g.get("class") == "death-marker" for g in svg.iter(f"{SVG}g"))


def test_html_is_self_contained(doc: dict) -> None:
    html = render_html(doc)
    assert html.startswith("<!DOCTYPE html>")
    assert "<style>" in html and "@media print" in html
    low = html.lower()
    for bad in ("<script", "<link", "src=", "@import", "url(", "http://", "https://"):
        if bad == "http://":
            low = low.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert bad not in low, bad
    assert "Raise MemoryMax" in html and "mmap&#x27;d weights" in html


def test_monitor_module_imports_no_ui() -> None:
    import subprocess
    import sys

    code = (
        "import sys, monitor.report.postmortem;"
        "print(','.join(sorted(m for m in sys.modules "
        "if m.split('.')[0] in {'textual', 'rich', 'tui'})))"
    )
    root = Path(__file__).resolve().parents[4]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True
    )
    assert out.stdout.strip() == ""


# The chart (issue 19 point 3): the victim's device, the top five others stacked by peak,
# the rest as "others", the victim a bold line over them, the limit a labelled line.

PEAKS_GIB = (3, 8, 1, 6, 2, 7, 4, 5)  # eight bystanders, deliberately not in peak order


def crowded(doc: dict) -> dict:
    """The victim and eight other processes on host; each sampled at its own instants (a
    few ms apart, as in one tick) and one starting late, so the union of times matters."""
    procs = [doc["timeline"]["processes"][0], doc["timeline"]["processes"][2]]  # drm python3
    for k, peak in enumerate(PEAKS_GIB):
        start = 120 if k == 6 else 0  # job6 (4 GiB) starts two minutes in
        procs.append(
            {
                "pid": 9000 + k,
                "comm": f"job{k}",
                "device_id": "host",
                "points": [
                    [T0 + i * 10_000 + k * 3, int(peak * GIB * (0.5 + i / 120))]
                    for i in range(start // 10, 61)
                ],
            }
        )
    doc["timeline"]["processes"] = procs
    doc["timeline"]["devices"][0]["points"] = series(lambda i: 20 * GIB + i * GIB // 60, 10_000, 61)
    doc["victim"]["kernel"]["memcg_limit_bytes"] = 48 * GIB
    return doc


def bands_of(svg: ET.Element) -> list[ET.Element]:
    return [p for p in svg.iter(f"{SVG}polygon") if p.get("class") == "band"]


def test_chart_stacks_the_top_five_by_peak_and_sums_the_rest(doc: dict) -> None:
    svg = svg_of(render_html(crowded(doc)))
    bands = bands_of(svg)
    names = ["".join(b.itertext()) for b in bands]
    assert len(bands) == 6
    # bottom to top: peaks 8, 7, 6, 5, 4 GiB, then the three smallest summed
    assert [n.split()[1] for n in names[:5]] == ["9001", "9005", "9003", "9007", "9006"]
    assert names[5] == "others (3 processes, summed)"
    assert [b.get("data-rank") for b in bands] == [str(i) for i in range(6)]
    # the legend names each band, in the same order
    legend = legend_texts(svg)
    assert [t for t in legend if t.startswith(("pid 900", "others"))] == names
    # the python3 on the other device is not stacked with host memory
    assert not any("5151" in n for n in names)
    assert any("not charted" in t and "drm:0000:c5:00.0" in t for t in legend)


def test_band_tops_are_stacked_and_monotonic(doc: dict) -> None:
    svg = svg_of(render_html(crowded(doc)))
    plot = next(r for r in svg.iter(f"{SVG}rect") if r.get("class") == "plot-area")
    bottom = float(plot.get("y")) + float(plot.get("height"))
    edges = []
    for band in bands_of(svg):
        pts = polyline_points(band)
        half = len(pts) // 2
        upper, lower = pts[:half], pts[half:][::-1]
        assert [x for x, _ in upper] == [x for x, _ in lower]
        edges.append((upper, lower))
    assert len(edges) == 6
    xs = [x for x, _ in edges[0][0]]
    assert len(xs) > 61 and xs == sorted(xs)  # the union of everyone's sample times
    assert all(y == pytest.approx(bottom) for _, y in edges[0][1])  # the stack starts at 0
    for (upper, lower), (below_upper, _) in zip(edges[1:], edges, strict=False):
        assert [x for x, _ in upper] == xs
        assert lower == below_upper  # each band sits on the one below it
        # SVG y grows downwards: a higher edge has a smaller (or equal) y at every x
        assert all(u[1] <= b[1] + 1e-9 for u, b in zip(upper, below_upper, strict=True))
    # job6 starts late: before it, the band's upper edge equals the one below (0 bytes)
    late = next(i for i, b in enumerate(bands_of(svg)) if "9006" in "".join(b.itertext()))
    assert edges[late][0][0] == edges[late - 1][0][0]
    assert edges[late][0][-1][1] < edges[late - 1][0][-1][1]


def test_chart_draws_the_victim_on_top_and_the_limit_line(doc: dict) -> None:
    svg = svg_of(render_html(crowded(doc)))
    order = [
        el.get("data-series") or el.get("class")
        for el in svg.iter()
        if el.tag in (f"{SVG}polygon", f"{SVG}polyline")
    ]
    assert order[-1] == "proc-0"  # the victim is drawn last, over the bands
    victim = next(p for p in svg.iter(f"{SVG}polyline") if p.get("data-series") == "proc-0")
    assert "victim" in victim.get("class") and victim.get("stroke") == "#d62728"
    assert float(victim.get("stroke-width")) >= 3
    limit = next(g for g in svg.iter(f"{SVG}g") if g.get("class") == "limit")
    line = limit.find(f"{SVG}line")
    plot = next(r for r in svg.iter(f"{SVG}rect") if r.get("class") == "plot-area")
    left, top = float(plot.get("x")), float(plot.get("y"))
    assert line.get("y1") == line.get("y2")  # horizontal, across the whole plot
    assert float(line.get("x1")) == left
    assert float(line.get("x2")) == left + float(plot.get("width"))
    label = "".join(limit.find(f"{SVG}text").itertext())
    assert "cgroup /vstest limit" in label and "48.00 GiB" in label
    # 48 GiB is the highest thing in the chart: the line is just under the top of the axis
    ly = float(line.get("y1"))
    assert top <= ly < top + 20
    for p in bands_of(svg):
        assert all(y >= ly for _, y in polyline_points(p))
    legend = legend_texts(svg)
    assert "(victim)" in legend[0] and any(t.startswith("cgroup /vstest limit") for t in legend)


def test_chart_band_names_are_escaped(doc: dict) -> None:
    doc = crowded(doc)
    hostile = '<script>alert(1)</script>&"\x1b[2J\u202e'
    doc["timeline"]["processes"][3]["comm"] = hostile  # job1, the largest band
    doc["timeline"]["processes"][4]["comm"] = "</svg><svg onload=x>"  # job2, into others
    doc["victim"]["kernel"]["memcg"] = "</text><script>y</script>"
    html = render_html(doc)
    assert "<script" not in html.lower() and "onload=x>" not in html
    assert "\x1b" not in html and "\u202e" not in html
    assert html.count("<svg") == 1 and html.count("</svg>") == 1
    svg = svg_of(html)
    names = ["".join(b.itertext()) for b in bands_of(svg)]
    assert names[0] == 'pid 9001 <script>alert(1)</script>&"\\x1b[2J\\u202e'
    legend = legend_texts(svg)
    assert names[0] in legend
    assert any("cgroup </text><script>y</script> limit" in t for t in legend)


def _chromium() -> str | None:
    import shutil

    return next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
    )


@pytest.mark.slow
def test_html_renders_in_headless_chromium(doc: dict, tmp_path: Path) -> None:
    """The documented command (docs/postmortem.md) turns the report into a PNG of the asked
    size; a browser that chokes on the page gives no file or an empty one."""
    import struct
    import subprocess

    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium binary (apt-get install chromium)")
    page = tmp_path / "report.html"
    page.write_text(render_html(crowded(doc)), encoding="utf-8")
    png = tmp_path / "report.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1100,1700",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=180,
        check=True,
    )
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (1100, 1700)
    assert len(data) > 20_000  # a page with a coloured chart, not a blank one


def test_event_data_is_text_not_escaped_json(doc: dict) -> None:
    """Issue 19: the event data showed as one JSON blob with literal \\x0a escapes."""
    doc["event"]["data"] = {
        "constraint": "CONSTRAINT_MEMCG",
        "memcg_limit_kb": 10485760,
        "line": "first line\nsecond line\x1b[2J",
        "nested": {"a": [1, 2]},
        "missing": None,
    }
    html = render_html(doc)
    table = re.search(r'<table class="data">(.*?)</table>', html, re.S)
    assert table is not None
    rows = dict(re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", table.group(1), re.S))
    assert rows["constraint"] == "CONSTRAINT_MEMCG"  # no JSON quotes
    assert rows["memcg_limit_kb"] == "10485760"
    assert rows["line"].startswith("first line\nsecond line")  # a real line break
    assert "\\x0a" not in html and "\x1b" not in html
    assert rows["nested"] == escape_html('{"a": [1, 2]}')
    assert rows["missing"] == "unknown"


def test_event_data_is_bounded(doc: dict) -> None:
    doc["event"]["data"] = {f"k{i}": "x" * 5000 for i in range(100)}
    html = render_html(doc)
    table = re.search(r'<table class="data">(.*?)</table>', html, re.S)
    assert table is not None
    assert len(table.group(1)) < 40 * 700
    assert "60 more" in table.group(1)
