"""``vramscope predict MODEL_ID`` against a llama-server router: the child launch from the
router's files or its ``GET /models``, and the LRU unload at ``--models-max``
(server-models.cpp ``unload_lru``)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiny_models
from box_states import host, write_state
from router_http import predict as predict_json  # `vramscope predict --json`

from collectors.base import ProcessInfo, ProcessMemory
from monitor.servers.router_models import list_models_dir
from monitor.servers.router_preset import child_launches, read_preset_file

ROOT = Path(__file__).resolve().parents[3]
GIB = 1024**3
ROUTER_PID, A_PID = 700, 701
HELD = 2 * GIB  # what `a`'s child holds (anonymous memory)


def _closed_port() -> int:
    """A loopback port nothing listens on now (the router's /models: no answer)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    tiny_models.write_llama(folder / "a.gguf", seed=1, name="a")
    tiny_models.write_llama(folder / "b.gguf", seed=2, name="b", n_layer=8)
    return folder


def _state(tmp_path: Path, models: Path, models_max: int, available: int, port: int) -> Path:
    router_argv = ("llama-server", "--models-dir", str(models), "--models-max", str(models_max))
    router_argv += ("--port", str(port), "-c", "2048", "--cache-ram", "0")
    launch_a = child_launches(list(router_argv), list_models_dir(str(models)))["a"]
    router = ProcessInfo(
        ROUTER_PID, 1, 1_000, 1, 1000, "llama-server", router_argv, "llama.cpp", ("inference",)
    )
    child = ProcessInfo(
        A_PID, 2, 2_000, ROUTER_PID, 1000, "llama-server", launch_a, "llama.cpp", ("inference",)
    )
    procs = [
        (router, [ProcessMemory(ROUTER_PID, "host", rss_anon_bytes=20 << 20)]),
        (child, [ProcessMemory(A_PID, "host", rss_anon_bytes=HELD)]),
    ]
    return write_state(tmp_path / f"state-{models_max}-{available}.json", [host(available)], procs)


def test_at_models_max_the_router_unloads_the_lru_child_first(tmp_path: Path, models: Path) -> None:
    state = _state(tmp_path, models, 1, 64 * GIB, _closed_port())
    code, doc, err = predict_json("--state", str(state), "b")
    assert code == 0, err
    assert doc["would_unload"] == ["a (pid 701)"]
    assert doc["unloaded_by"] == "the router"
    assert doc["devices"][0]["freed_bytes"] == HELD
    assert any("loading b first unloads a" in n for n in doc["notes"])
    assert any("read from its files" in n for n in doc["notes"])  # a recorded state
    assert any("with --models-max 2 the router keeps a loaded: b would then be FITS" in n
               for n in doc["notes"])  # fmt: skip
    # the router's -c 2048 reaches b's launch (its argv is merged over every model's)
    assert doc["launch"]["n_ctx"] == 2048


def test_below_models_max_nothing_is_unloaded(tmp_path: Path, models: Path) -> None:
    state = _state(tmp_path, models, 2, 64 * GIB, _closed_port())
    code, doc, err = predict_json("--state", str(state), "b")
    assert code == 0, err
    assert doc["would_unload"] == [] and doc["unloaded_by"] is None
    assert any("room for one more model" in n for n in doc["notes"])


def test_the_unload_decides_the_verdict(tmp_path: Path, models: Path) -> None:
    """Signal: with --models-max 1 `a`'s memory comes back and `b` fits; noise: with 2 it
    stays, `b` does not fit, and the fix names `a` (and --models-max 1)."""
    probe = _state(tmp_path, models, 2, 64 * GIB, _closed_port())
    _, doc, err = predict_json("--state", str(probe), "b")
    need = doc["devices"][0]["need_bytes"] - doc["devices"][0]["evictable_bytes"]
    available = need + doc["devices"][0]["margin_bytes"] - HELD // 2  # short without a's 2 GiB
    for models_max, verdict in ((1, "fits"), (2, "oom")):
        state = _state(tmp_path, models, models_max, available, _closed_port())
        code, doc, err = predict_json("--state", str(state), "b")
        assert doc.get("verdict") == verdict, err
        assert code == (0 if verdict == "fits" else 1)
        if models_max == 1:  # raising --models-max keeps a: then b does not fit
            assert any("--models-max 2 the router keeps a loaded: b would then be OOM" in n
                       for n in doc["notes"])  # fmt: skip
    changes = [f["change"] for f in doc["fixes"]]
    assert any(c.startswith("unload a first") and "--models-max 1" in c for c in changes)


def test_an_id_no_router_serves_is_one_line(tmp_path: Path, models: Path) -> None:
    state = _state(tmp_path, models, 1, 64 * GIB, _closed_port())
    code, doc, err = predict_json("--state", str(state), "nope")
    assert code == 2 and doc == {}
    assert err.count("\n") == 1 and "no llama-server router on this box serves model 'nope'" in err


@pytest.fixture
def answering(models: Path) -> Iterator[int]:
    """A loopback server answering GET /models like the recorded router (fixtures), its
    paths pointed at this test's models, `a` loaded."""
    recorded = json.loads(
        (ROOT / "tests" / "fixtures" / "llamacpp_router" / "models_loaded_a.json").read_text()
    )
    for model in recorded["data"]:
        args = model["status"]["args"]
        args[args.index("--model") + 1] = str(models / f"{model['id']}.gguf")
        args[args.index("--ctx-size") + 1] = "1024"
    body = json.dumps(recorded).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200 if self.path == "/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if self.path == "/models" else b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_get_models_is_the_truth_where_the_router_answers(
    tmp_path: Path, models: Path, answering: int
) -> None:
    """Live (the daemon's latest tick): the router on this box is asked; a recorded state
    (--state) reads the files (its router may be gone); --router URL is asked either way."""
    from monitor.analysis.predict import answer
    from monitor.analysis.predict_request import PredictRequest
    from monitor.analysis.state import StatusFile, box_state

    state = _state(tmp_path, models, 1, 64 * GIB, answering)
    snap = box_state(StatusFile(state)).snapshot
    result = answer(PredictRequest([], model_id="b"), snap, [])  # as the daemon's API does
    assert result.prediction.estimate.n_ctx == 1024  # status.args, not the files' -c 2048
    assert result.prediction.evicted == ("a (pid 701)",)
    assert any("from GET /models" in n for n in result.notes)
    code, doc, err = predict_json("--state", str(state), "b")
    assert code == 0, err
    assert doc["launch"]["n_ctx"] == 2048  # the files: the recorded router's -c
    assert any("GET /models not asked" in n for n in doc["notes"])
    code, doc, err = predict_json(
        "--state", str(state), "--router", f"http://127.0.0.1:{answering}", "b"
    )
    assert code == 0, err
    assert doc["launch"]["n_ctx"] == 1024
    assert doc["would_unload"] == ["a (pid 701)"]


def test_router_url_must_be_loopback(tmp_path: Path, models: Path) -> None:
    state = _state(tmp_path, models, 1, 64 * GIB, _closed_port())
    code, _, err = predict_json("--state", str(state), "--router", "http://10.1.2.3:8080", "b")
    assert code == 2 and "refusing non-loopback router URL host" in err
    assert "Traceback" not in err


def test_metrics_label_a_router_child_by_its_model_id() -> None:
    """/metrics ``model``: a router's child is its model id (the --alias the router set);
    the same --alias on a server no router started keeps the file name (noise)."""
    from collectors.base import Snapshot
    from monitor.http.metrics import SnapshotCollector

    router_argv = ("llama-server", "--models-dir", "/m", "--port", "8080")
    child_argv = ("llama-server", "--host", "127.0.0.1", "--port", "40001", "--alias", "qwen")
    child_argv += ("--model", "/m/qwen3-8b-q4.gguf")
    info = [
        ProcessInfo(10, 1, None, 1, 0, "llama-server", router_argv, "llama.cpp", ("inference",)),
        ProcessInfo(11, 2, None, 10, 0, "llama-server", child_argv, "llama.cpp", ("inference",)),
        ProcessInfo(12, 3, None, 1, 0, "llama-server", child_argv, "llama.cpp", ("inference",)),
    ]
    rows = tuple(ProcessMemory(p.pid, "host", rss_anon_bytes=GIB) for p in info)
    snap = Snapshot(1_800_000_000_000, (host(8 * GIB),), tuple(info), rows, (), (), ())
    found = {
        s.labels["pid"]: s.labels["model"]
        for family in SnapshotCollector(lambda: snap).collect()
        if family.name == "vramscope_process_memory_bytes"
        for s in family.samples
    }
    assert found == {"10": "", "11": "qwen", "12": "qwen3-8b-q4.gguf"}


def test_the_daemons_predict_api_takes_a_router_model_id(tmp_path: Path, models: Path) -> None:
    """``POST /api/v1/predict {"model_id": ID}`` (what ``predict --remote URL ID`` sends):
    the daemon judges the router's model on its own box, as ``predict ID`` does there."""
    import http.client

    from monitor.analysis.state import StatusFile, box_state
    from monitor.config import Config
    from monitor.http import HttpServer

    state = _state(tmp_path, models, 1, 64 * GIB, _closed_port())
    snap = box_state(StatusFile(state)).snapshot
    db = tmp_path / "vramscope.db"
    srv = HttpServer(
        "127.0.0.1:0",
        None,
        lambda: snap,
        db,
        Config(db_path=db, interval_s=1.0, http_model_dirs=(str(tmp_path),)),
    )
    srv.start()

    def post(doc: object) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", srv.address[1], timeout=60)
        try:
            headers = {"Content-Type": "application/json"}
            conn.request("POST", "/api/v1/predict", json.dumps(doc).encode(), headers)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    try:
        status, doc = post({"model_id": "b"})
        assert status == 200, doc
        assert doc["would_unload"] == ["a (pid 701)"] and doc["unloaded_by"] == "the router"
        from monitor.cli.predict import predict_on_fleet  # predict --remote URL b

        (answer,) = predict_on_fleet([f"http://127.0.0.1:{srv.address[1]}"], {}, ["b"], 0.5, "b")
        assert answer.error is None and answer.verdict == "fits", answer
        status, doc = post({"model_id": ["b"]})
        assert status == 400 and "model_id" in doc["error"]
        status, doc = post({"model_id": "nope"})
        assert status == 400 and "no llama-server router" in doc["error"]
    finally:
        srv.stop()


def test_a_router_command_or_a_llama_swap_model_running_one_says_predict_by_id(
    tmp_path: Path,
) -> None:
    swap = tmp_path / "swap.yaml"
    swap.write_text('models:\n  multi: {cmd: "llama-server --port ${PORT} --models-dir /m"}\n')
    for args, says in (
        (
            ("--swap-config", str(swap), "multi"),
            "llama-swap model multi runs a llama-server router",
        ),
        (
            ("--", "llama-server", "--models-preset", "/m/x.ini"),
            "the command is a llama-server router",
        ),
    ):
        code, doc, err = predict_json(*args)
        assert code == 2 and doc == {} and err.count("\n") == 1, err
        assert says in err and "predict one of its models by id" in err


def test_router_config_names_the_preset_file(tmp_path: Path, models: Path) -> None:
    """``--router-config FILE.ini``: the models its sections name; the router on this box
    started with that preset gives --models-max and its children (a is unloaded first);
    with no such router, the default --models-max 4 unloads nobody."""
    ini = tmp_path / "models.ini"
    ini.write_text(f"[a]\nmodel = {models / 'a.gguf'}\n[b]\nmodel = {models / 'b.gguf'}\nc = 768\n")
    router_argv = ("llama-server", "--models-preset", str(ini), "--models-max", "1")
    router_argv += ("--port", str(_closed_port()), "--cache-ram", "0")
    launch_a = child_launches(list(router_argv), (), read_preset_file(str(ini)))["a"]
    router = ProcessInfo(
        ROUTER_PID, 1, 1_000, 1, 1000, "llama-server", router_argv, "llama.cpp", ("inference",)
    )
    child = ProcessInfo(
        A_PID, 2, 2_000, ROUTER_PID, 1000, "llama-server", launch_a, "llama.cpp", ("inference",)
    )
    procs = [(router, []), (child, [ProcessMemory(A_PID, "host", rss_anon_bytes=HELD)])]
    state = write_state(tmp_path / "s.json", [host(64 * GIB)], procs)
    code, doc, err = predict_json("--state", str(state), "--router-config", str(ini), "b")
    assert code == 0, err
    assert doc["would_unload"] == ["a (pid 701)"]
    assert doc["launch"]["n_ctx"] == 768
    alone = write_state(tmp_path / "alone.json", [host(64 * GIB)], [])
    code, doc, err = predict_json("--state", str(alone), "--router-config", str(ini), "b")
    assert code in (0, 3) and doc["would_unload"] == [], err
    assert any("--models-max 4" in n and "nothing is unloaded" in n for n in doc["notes"])


def test_a_model_already_loaded_is_judged_in_its_own_place(tmp_path: Path, models: Path) -> None:
    state = _state(tmp_path, models, 1, 64 * GIB, _closed_port())
    code, doc, err = predict_json("--state", str(state), "a")
    assert code == 0, err
    assert doc["would_unload"] == ["a (pid 701, already loaded: judged in its own place)"]
    assert any("a is already loaded" in n for n in doc["notes"])
    assert not any("--models-max 2" in n for n in doc["notes"])  # nothing else unloaded
