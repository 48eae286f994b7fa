"""`tui --remote URL` answered by something that is not (or no longer) a vramscope daemon:
a real HTTP server on 127.0.0.1 serves JSON of the wrong shape, non-JSON and a huge body.
The app shows one error line and keeps running; the next good answer clears it."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pilot_helpers import settle, sync

from collectors.base import Roots
from monitor.daemon.sampler import Sampler
from monitor.http.client import REMOTE_MAX_BYTES
from monitor.report.status import to_json
from tui.app import VramscopeApp, main
from tui.source import RemoteSource, SourceError


class Answers:
    """What the server answers per path (status, body); changed by the test."""

    def __init__(self) -> None:
        self.by_path: dict[str, tuple[int, bytes]] = {}

    def set(self, path: str, body: Any, status: int = 200) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.by_path[path] = (status, raw)


@pytest.fixture(scope="module")
def good_snapshot() -> dict[str, Any]:
    sampler = Sampler(Roots(), enabled=["procfs"])
    try:
        return to_json(sampler.sample())
    finally:
        sampler.close()


@pytest.fixture
def server(good_snapshot: dict[str, Any]) -> Iterator[tuple[str, Answers]]:
    answers = Answers()
    answers.set("/api/v1/snapshot", good_snapshot)
    answers.set("/api/v1/events", {"events": [], "truncated": False})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            status, body = answers.by_path.get(self.path.split("?")[0], (404, b"{}"))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # the client stops reading a huge body: that is the point
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answers
    finally:
        httpd.shutdown()
        httpd.server_close()


def _with(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


def _without(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != key}


SNAP = "/api/v1/snapshot"
EVENTS = "/api/v1/events"
# (path, body as a function of a good snapshot, what the error line says)
BAD: list[tuple[str, Any, str]] = [
    (SNAP, lambda good: [good], "not a vramscope snapshot: a JSON list"),
    (SNAP, lambda good: "hello", "not a vramscope snapshot: a JSON str"),
    (SNAP, lambda good: _without(good, "devices"), "'devices' is not a list"),
    (SNAP, lambda good: _without(good, "ts_ms"), "ts_ms is not an integer"),
    (SNAP, lambda good: _with(good, ("schema",), "other/1"), "schema 'other/1'"),
    (
        SNAP,
        lambda good: _with(good, ("devices", 0, "used_bytes"), "12"),
        "devices[0].used_bytes is str",
    ),
    (
        SNAP,
        lambda good: _with(good, ("devices", 0, "memory_kind"), "magic"),
        "devices[0].memory_kind is str",
    ),
    (SNAP, lambda good: _with(good, ("devices", 0), [1, 2]), "devices[0] is a list"),
    (
        SNAP,
        lambda good: _with(good, ("processes", 0, "argv"), "llama-server -m x"),
        "processes[0].argv is str",
    ),
    (
        SNAP,
        lambda good: _with(good, ("processes", 0, "memory"), {"host": {"rss_anon_bytes": -5}}),
        "rss_anon_bytes is negative",
    ),
    (SNAP, lambda good: b"<html>502 Bad Gateway</html>", "not JSON"),
    (SNAP, lambda good: b"[" * 100_000, "not JSON"),
    (SNAP, lambda good: b" " * (REMOTE_MAX_BYTES + 10) + b"{}", "larger than 16 MiB"),
    (EVENTS, lambda good: [], "not a vramscope events page: a JSON list"),
    (
        EVENTS,
        lambda good: {
            "events": [{"ts_ms": "soon", "kind": "x", "severity": "info", "message": "m"}]
        },
        "events[0].ts_ms is str",
    ),
    (EVENTS, lambda good: {"events": {"a": 1}}, "'events' is not a list"),
]


@pytest.mark.parametrize(
    ("path", "body", "message"), BAD, ids=[f"{p.rsplit('/', 1)[1]}-{m[:30]}" for p, _, m in BAD]
)
@sync
async def test_a_bad_answer_is_an_error_line_and_the_app_keeps_running(
    server: tuple[str, Answers], good_snapshot: dict[str, Any], path: str, body: Any, message: str
) -> None:
    url, answers = server
    app = VramscopeApp(RemoteSource(url), refresh_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        status = app.screen.query_one("#status")
        assert "live" in str(status.render()) and "⚠" not in str(status.render())
        good_frame = app.screen.frame
        assert good_frame is not None
        answers.set(path, body(good_snapshot))
        await pilot.press("r")
        await settle(pilot)
        shown = str(status.render())
        assert app.is_running
        assert shown.startswith("⚠ ") and message in shown, shown
        assert "Error" not in shown and "attribute" not in shown, shown
        assert app.screen.frame is good_frame  # the last good tick stays on screen
        answers.set(SNAP, good_snapshot)
        answers.set(EVENTS, {"events": [], "truncated": False})
        await pilot.press("r")
        await settle(pilot)
        assert "⚠" not in str(status.render()) and app.screen.frame is not good_frame


def test_a_bad_first_answer_is_one_line_at_startup(
    server: tuple[str, Answers], capsys: pytest.CaptureFixture[str]
) -> None:
    url, answers = server
    answers.set(SNAP, [1, 2, 3])
    assert main(remote=url) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vramscope: error: "), err
    assert "not a vramscope snapshot" in err[0]


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "127.0.0.1:9835", "http://"]
)
def test_remote_takes_only_http_urls(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SourceError, match="expected http://HOST:PORT"):
        RemoteSource(url)
    assert main(remote=url) == 2
    assert capsys.readouterr().err.startswith("vramscope: error: --remote ")
