"""A remote daemon's status document (``/api/v1/snapshot``, ``--state``) groups a router's
children as the daemon's own box does, including what only the processes' environments
said there: a router started with ``LLAMA_ARG_MODELS_DIR`` (no ``--models-dir`` on its
argv), ``LLAMA_ARG_MODELS_MAX``, and a child known by ``LLAMA_SERVER_ROUTER_PORT``.
The router's argv and the child's are the recorded ones of tests/fixtures/llamacpp_router
(llama-server built at llama.cpp 0c1e57098)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from collectors.base import ProcessInfo, ProcessMemory, Snapshot
from monitor.analysis.picture import snapshot_from_status_json
from monitor.report.status import render_text, to_json
from monitor.servers.router import snapshot_links
from tui.source import ModelRow, grouped_by_router

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "llamacpp_router"
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())
BIN = "/work/main/.cache/llama.cpp/0.3.36/bin/llama-server"
ROUTER_PID, CHILD_A, LONE = 27596, 27615, 4242
ROUTER_ENV = {"LLAMA_ARG_MODELS_DIR": "/tmp/rt/m", "LLAMA_ARG_MODELS_MAX": "1"}


def _child_argv(model: str) -> tuple[str, ...]:
    doc = json.loads((FIXTURES / "models_loaded_a.json").read_text())
    return tuple(next(m for m in doc["data"] if m["id"] == model)["status"]["args"])


def _proc(pid: int, ppid: int, argv: tuple[str, ...]) -> ProcessInfo:
    return ProcessInfo(pid, pid * 10, None, ppid, 1000, "llama-server", argv, "llama.cpp")


def _daemon_snapshot() -> Snapshot:
    """The daemon's box: the router (its models dir in its environment), its child `a`,
    and an unrelated llama-server."""
    procs = (
        _proc(ROUTER_PID, 1, (BIN, "--host", "127.0.0.1", "--port", "18431")),
        _proc(CHILD_A, ROUTER_PID, _child_argv("a")),
        _proc(LONE, 1, (BIN, "-m", "/srv/x.gguf", "--port", "8081")),
    )
    memory = tuple(ProcessMemory(p.pid, "host", rss_anon_bytes=1 << 20) for p in procs)
    return Snapshot(1000, (), procs, memory, (), (), ())


def _envs(pid: int) -> dict[str, str]:
    return {ROUTER_PID: ROUTER_ENV, CHILD_A: {"LLAMA_SERVER_ROUTER_PORT": "18431"}}.get(pid, {})


def _remote() -> tuple[dict, Snapshot]:
    """The daemon's document (read with its processes' environments) as a remote reads
    it back."""
    doc = json.loads(json.dumps(to_json(_daemon_snapshot(), _envs)))
    return doc, snapshot_from_status_json(doc)


def test_the_remote_document_keeps_a_router_known_by_its_environment() -> None:
    doc, snap = _remote()
    jsonschema.validate(doc, SCHEMA)
    again = {p["pid"]: p for p in to_json(snap)["processes"]}  # no environment here
    mine = {p["pid"]: p for p in doc["processes"]}
    assert mine[ROUTER_PID]["router"]["models_dir"] == "/tmp/rt/m"
    assert again[ROUTER_PID]["router"] == mine[ROUTER_PID]["router"]
    assert again[CHILD_A]["router_child"] == {
        "router_pid": ROUTER_PID,
        "router_port": 18431,
        "model_id": "a",
    }
    assert again[LONE]["router"] is None and again[LONE]["router_child"] is None


def test_without_the_recorded_facts_the_argv_alone_finds_no_router() -> None:
    """Noise and the old behaviour: the router's argv names no models dir, so a reader
    with neither its environment nor the recorded facts sees no router."""
    routers, _ = snapshot_links(_daemon_snapshot())
    assert routers == {}


def test_status_text_on_the_remote_snapshot_groups_the_child_under_its_router() -> None:
    _, snap = _remote()
    text = render_text(snap)
    assert "router :18431 models-dir /tmp/rt/m, max 1, 1 loaded" in text
    assert "└ model a: a.gguf" in text and f"(router {ROUTER_PID})" in text


def test_the_tui_groups_a_remote_frames_children_under_their_router() -> None:
    _, snap = _remote()
    rows = [
        ModelRow(pid, "llama.cpp", name, "-", "-", 1 << 20, None, None)
        for pid, name in ((LONE, "x.gguf"), (CHILD_A, "a.gguf"))
    ]
    grouped = grouped_by_router(rows, snap)
    assert [(r.pid, r.role) for r in grouped] == [
        (LONE, "server"),
        (ROUTER_PID, "router"),
        (CHILD_A, "server"),
    ]
    assert grouped[2].model == "└ a · a.gguf"
    assert grouped[1].flags == ("1 loaded, max 1",)


def test_hostile_router_fields_in_a_document_link_nothing() -> None:
    doc, _ = _remote()
    for row in doc["processes"]:
        if row["router"] is not None:
            row["router"] = {"port": [1], "models_dir": "x" * 100_000, "models_max": {"a": 1}}
        if row["router_child"] is not None:
            row["router_child"] = {"router_port": "18431; rm -rf /", "router_pid": None}
    routers, children = snapshot_links(snapshot_from_status_json(doc))
    assert routers == {} and children == {}


def test_the_daemons_snapshot_reads_the_routers_environment(tmp_path: Path) -> None:
    """The daemon's ``/api/v1/snapshot`` (what ``tui --remote`` reads) links the router by
    its real environment: a process of ours started with ``LLAMA_ARG_MODELS_DIR``."""
    import http.client
    import subprocess

    from monitor.config import Config
    from monitor.http.server import HttpServer

    env = {**ROUTER_ENV, "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(["sleep", "600"], env=env)
    router = _proc(proc.pid, 1, (BIN, "--port", "18431"))
    snap = Snapshot(1000, (), (router,), (), (), (), ())
    db = tmp_path / "vramscope.db"
    srv = HttpServer("127.0.0.1:0", None, lambda: snap, db, Config(db_path=db, interval_s=1.0))
    srv.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.address[1], timeout=30)
        conn.request("GET", "/api/v1/snapshot")
        doc = json.loads(conn.getresponse().read())
    finally:
        srv.stop()
        proc.kill()
        proc.wait(timeout=30)
    row = next(p for p in doc["processes"] if p["pid"] == proc.pid)
    assert row["router"]["models_dir"] == "/tmp/rt/m" and row["router"]["models_max"] == 1
