"""``predict MODEL_ID`` finds its router by asking every router on the box ``GET /models``
at once, within one overall deadline (router_predict.ask_routers): a router that never
answers does not hold the verdict, and the one that answers is the truth.

Both routers are real HTTP servers of ours on loopback: one answers the recorded
``models_loaded_a.json`` (tests/fixtures/llamacpp_router: llama.cpp 0c1e57098), the other
accepts the request and never answers until the test ends. The fetch is the real client
with a socket timeout of an hour, so only the deadline can end the wait."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.base import ProcessInfo, Snapshot
from monitor.analysis.router_predict import RouterView, ask_routers, discover
from monitor.integrations.router_client import fetch_models
from monitor.servers.router_models import AnsweredModel

ROOT = Path(__file__).resolve().parents[3]
ANSWER = (ROOT / "tests" / "fixtures" / "llamacpp_router" / "models_loaded_a.json").read_bytes()
HANG_GUARD_S = 120  # generous: only says the call came back at all


class _Server:
    def __init__(self, release: threading.Event, hang: bool) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if hang:
                    release.wait()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(ANSWER)))
                self.end_headers()
                self.wfile.write(ANSWER)

            def log_message(self, *_: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def servers() -> Iterator[tuple[_Server, _Server]]:
    release = threading.Event()
    good, slow = _Server(release, hang=False), _Server(release, hang=True)
    try:
        yield good, slow
    finally:
        release.set()
        for s in (good, slow):
            s.httpd.shutdown()
            s.httpd.server_close()


def _slow_fetch(url: str) -> tuple[AnsweredModel, ...]:
    return fetch_models(url, timeout_s=3600.0)


def _snap(tmp_path: Path, good: int, slow: int) -> Snapshot:
    """Two routers on the box: the slow one's files list only `z`."""
    empty, other = tmp_path / "good", tmp_path / "slow"
    empty.mkdir()
    other.mkdir()
    (other / "z.gguf").write_bytes(b"GGUF")

    def router(pid: int, folder: Path, port: int) -> ProcessInfo:
        argv = ("llama-server", "--models-dir", str(folder), "--port", str(port))
        return ProcessInfo(pid, pid, 1_000, 1, 1000, "llama-server", argv, "llama.cpp")

    procs = (router(701, other, slow), router(702, empty, good))
    return Snapshot(1000, (), procs, (), (), (), ())


def _in_thread(call: object) -> object:
    """Run ``call`` with a hang guard; the result (or the exception) comes back."""
    box: list[object] = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)  # type: ignore[operator]
    worker.start()
    worker.join(HANG_GUARD_S)
    assert box, "discovery did not come back: the silent router held it"
    return box[0]


def test_a_router_that_never_answers_does_not_hold_the_verdict(
    tmp_path: Path, servers: tuple[_Server, _Server]
) -> None:
    good, slow = servers
    snap = _snap(tmp_path, good.port, slow.port)
    found = _in_thread(lambda: discover(snap, "a", _slow_fetch, deadline_s=1.0))
    view, notes = found  # type: ignore[misc]
    assert isinstance(view, RouterView)
    # signal: the answering router's GET /models is the truth (its files list nothing)
    assert view.label == f"router pid 702 :{good.port}" and view.source == "GET /models"
    assert view.launches["a"][-4:] == ("--model", "/tmp/rt/m/a.gguf", "--parallel", "1")
    assert view.states == {"a": "loaded", "b": "unloaded"}
    # noise: the silent one is read from its files, and says so
    assert any(f"router pid 701 :{slow.port}" in n and "no answer within 1 s" in n for n in notes)


def test_ask_routers_keeps_what_came_in_time_and_the_errors(
    servers: tuple[_Server, _Server],
) -> None:
    good, slow = servers
    with_closed = [good.port, slow.port, _closed_port()]
    got = _in_thread(lambda: ask_routers(with_closed, _slow_fetch, 1.0))
    assert isinstance(got, dict)
    assert [m.model_id for m in got[good.port]] == ["a", "b"]
    assert slow.port not in got  # still silent at the deadline
    assert isinstance(got[with_closed[2]], OSError)  # refused: an answer, an error


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
