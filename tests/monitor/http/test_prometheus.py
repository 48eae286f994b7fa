"""``tui --prometheus URL``'s query and parse layer (monitor/http/prometheus.py) on
answers recorded from a real Prometheus (tests/fixtures/prometheus/README.md: version,
command), and served back by a loopback HTTP server for the client's requests."""

from __future__ import annotations

import contextlib
import copy
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from monitor.http.prometheus import (
    QUERIES,
    Answers,
    PrometheusError,
    PrometheusFleet,
    box_url,
    fleet_rows,
    parse_alerts,
    parse_targets,
    parse_vector,
)

RECORDED = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "prometheus" / "answers.json").read_text()
)
STRIX, XTX, DEAD = RECORDED["targets_in_order"]


def answers(docs: dict[str, Any]) -> Answers:
    return Answers(
        parse_targets(docs["targets"]),
        {n: parse_vector(docs[f"query_{n}"], n) for n in QUERIES},
        parse_alerts(docs["alerts"]),
    )


def test_recorded_answers_become_one_row_per_target() -> None:
    rows = {r.url: r for r in fleet_rows(answers(RECORDED["docs"]))}
    assert set(rows) == {f"http://{t}" for t in (STRIX, XTX, DEAD)}
    strix, xtx, dead = (rows[f"http://{t}"] for t in (STRIX, XTX, DEAD))
    assert strix.error is None and strix.devices.startswith("GPU0 AMD Strix Halo")
    assert "70.8G/96.5G" in strix.devices and "host RAM" in strix.devices
    # the tightest device by the daemon's own free bytes: the APU's 25.7 GiB, not host's
    assert strix.headroom_bytes == 27581411328 and strix.headroom_device.startswith("GPU0")
    assert strix.models == 1 and strix.active_alerts == (f"test alert on {STRIX}",)
    assert xtx.devices == "GPU0 AMD Radeon RX 7900 XTX 22.1G/24.0G"
    assert xtx.headroom_bytes == 2053099520 and xtx.models == 0
    assert xtx.time_to_oom_s is None  # nothing filled steadily: no forecast
    assert dead.error is not None and "connection refused" in dead.error
    assert dead.reason == "target down" and dead.devices == ""


def test_the_soonest_oom_forecast_is_the_box_s() -> None:
    docs = copy.deepcopy(RECORDED["docs"])
    # synthetic (not recorded): two forecasts on the XTX box, in Prometheus's shape
    docs["query_oom"]["data"]["result"] = [
        {"metric": {"job": "vramscope", "instance": XTX, "pool": "host"}, "value": [1, "900"]},
        {"metric": {"job": "vramscope", "instance": XTX, "pool": "drm:0000:03:00.0"},
         "value": [1, "120.5"]},
    ]  # fmt: skip
    (xtx,) = [r for r in fleet_rows(answers(docs)) if r.url == f"http://{XTX}"]
    assert (xtx.time_to_oom_s, xtx.oom_pool) == (120.5, "drm:0000:03:00.0")


def test_targets_of_other_jobs_and_hostile_values_are_not_boxes() -> None:
    docs = copy.deepcopy(RECORDED["docs"])
    targets = docs["targets"]["data"]["activeTargets"]
    node = copy.deepcopy(targets[0])
    node["labels"] = {"job": "node", "instance": "127.0.0.1:9100"}
    node["scrapeUrl"] = "http://127.0.0.1:9100/metrics"
    odd = copy.deepcopy(targets[1])
    odd["scrapeUrl"] = "ftp://127.0.0.1:1/metrics"
    docs["targets"]["data"]["activeTargets"] = [node, odd, *targets]
    docs["query_used"]["data"]["result"][0]["value"] = [1, "NaN"]
    docs["query_total"]["data"]["result"][0]["metric"]["name"] = "\x1b]0;pwned\x07GPU"
    rows = fleet_rows(answers(docs))
    assert [r.url for r in rows] == [f"http://{t}" for t in (STRIX, XTX, DEAD)]
    xtx = rows[1]
    assert "\x1b" not in xtx.devices and "?/24.0G" in xtx.devices  # used unknown, not 0
    assert box_url("http://user:pw@box:9835/metrics") is None
    assert box_url("https://box:9835/vramscope/metrics") == "https://box:9835/vramscope"
    for bad in ({"status": "error", "error": "bad_data"}, [], {"status": "success"}):
        with pytest.raises(PrometheusError, match="not a Prometheus API answer"):
            parse_vector(bad, "q")
    with pytest.raises(PrometheusError, match="not an instant vector"):
        parse_vector({"status": "success", "data": {"resultType": "matrix", "result": []}}, "q")


@contextlib.contextmanager
def serving(docs: dict[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering each API path with the recorded document."""
    asked: list[str] = []
    by_query = {q: docs[f"query_{n}"] for n, q in QUERIES.items()}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            parts = urlsplit(self.path)
            if parts.path == "/api/v1/query":
                doc = by_query.get(parse_qs(parts.query)["query"][0])
            else:
                doc = {"/api/v1/targets": docs["targets"], "/api/v1/alerts": docs["alerts"]}.get(
                    parts.path
                )
            body = json.dumps(doc).encode()
            self.send_response(200 if doc is not None else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_client_asks_every_query_and_says_when_prometheus_is_not_there() -> None:
    with serving(RECORDED["docs"]) as (url, asked):
        rows = PrometheusFleet(url).rows()
    assert len(rows) == 3 and rows[0].devices
    assert len(asked) == 2 + len(QUERIES)
    assert asked[0] == "/api/v1/targets?state=active"
    with pytest.raises(PrometheusError, match="cannot reach Prometheus at"):
        PrometheusFleet(url, timeout_s=2).rows()
    with pytest.raises(PrometheusError, match="expected http://HOST:PORT"):
        PrometheusFleet("prometheus:9090")


def test_tui_prometheus_refuses_a_bad_url_or_other_sources_in_one_line() -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    for args, words in (
        (["--prometheus", "prometheus:9090"], "--prometheus prometheus:9090: expected http://"),
        (["--prometheus", "http://127.0.0.1:9", "--remote", "http://127.0.0.1:9"],
         "--prometheus reads other daemons"),
    ):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", "from tui.entry import main; main()", "tui",
             "--config", "/dev/null", *args],
            capture_output=True, text=True, timeout=120, env=env, cwd=root,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"vramscope: error: {words}"), line
