"""The real llama-server in router mode: its children grouped under it (status, TUI).

Starts the llama-server this project builds (``.cache/llama.cpp/0.3.36``, llama.cpp
0c1e57098) as a router over a folder of two tiny GGUFs with ``--models-max 1``, loads
``a`` then ``b`` through ``POST /models/load``, and checks what ``vramscope status --json``
(and the TUI's live frame) says after each: the router row (``--models-max``, how many
loaded), each child under it with its model id (its ``--alias``), and that loading ``b``
left only ``b``'s child (the router unloaded ``a``, tools/server/server-models.cpp
``unload_lru``).

Only the router this test started and its children are looked at (the box may run other
llama-servers). Waits are bounded hang guards, never timing assertions.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import tiny_models

from monitor.engines.router_models import list_models_dir, models_answer
from tui.source import LiveSource

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())
HANG_GUARD_S = 180.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(port: int, path: str, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    try:
        with _OPENER.open(req, timeout=120) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError):
        return 0, ""


def _wait(what: str, check: Callable[[], Any], log: Path) -> Any:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    raise AssertionError(f"timed out waiting for {what}; router log tail:\n{tail}")


def _status(port_pid: int) -> tuple[dict, dict[int, dict]]:
    """``vramscope status --json``: the document, and the rows of our router and its
    children (a row's ppid is our router)."""
    result = subprocess.run(
        [sys.executable, "-m", "monitor", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    rows = {
        p["pid"]: p for p in doc["processes"] if p["pid"] == port_pid or p.get("ppid") == port_pid
    }
    return doc, rows


def _loaded(port: int) -> set[str]:
    status, body = _http(port, "/models")
    if status != 200:
        return set()
    return {m["id"] for m in json.loads(body)["data"] if m["status"]["value"] == "loaded"}


@pytest.fixture
def router(llama_server_bin: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, int, Path]]:
    helped = subprocess.run(
        [str(llama_server_bin), "--help"], capture_output=True, text=True, timeout=60
    )
    if "--models-dir" not in helped.stdout + helped.stderr:
        pytest.skip(f"{llama_server_bin} has no router mode (no --models-dir in --help)")
    models = tmp_path / "models"
    models.mkdir()
    tiny_models.write_llama(models / "a.gguf", seed=1, name="a")
    tiny_models.write_llama(models / "b.gguf", seed=2, name="b")
    # what the router lists and what it leaves out (common/preset.cpp load_from_models_dir)
    (models / "c").mkdir()
    for name in ("c/c.gguf", "mmproj-a.gguf", "mtp-a.gguf", "twice.gguf.gguf"):
        (models / name).write_bytes((models / "a.gguf").read_bytes())
    (models / "notes.txt").write_text("not a model")
    port = _free_port()
    argv = [str(llama_server_bin), "--models-dir", str(models), "--models-max", "1"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "-c", "512", "-np", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        _wait("the router's /health", lambda: _http(port, "/health")[0] == 200, log)
        yield proc, port, log
    finally:
        proc.send_signal(signal.SIGTERM)  # the router stops its children itself
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_the_models_dir_lists_what_the_router_lists(
    router: tuple[subprocess.Popen, int, Path],
) -> None:
    proc, port, log = router
    code, body = _http(port, "/models")
    assert code == 200, body
    answered = models_answer(body.encode())
    folder = Path(proc.args[proc.args.index("--models-dir") + 1])  # type: ignore[union-attr]
    listed = list_models_dir(str(folder))
    assert [m.model_id for m in listed] == ["a", "b", "c", "twice"]
    assert sorted(m.model_id for m in answered) == [m.model_id for m in listed]
    for theirs in answered:
        mine = next(m for m in listed if m.model_id == theirs.model_id)
        assert theirs.args[theirs.args.index("--model") + 1] == mine.model_path


def _child_rows(rows: dict[int, dict], router_pid: int) -> dict[str, dict]:
    return {r["router_child"]["model_id"]: r for r in rows.values() if r["pid"] != router_pid}


def _one_child(router_pid: int) -> tuple[dict, dict[int, dict]] | None:
    doc, rows = _status(router_pid)
    return (doc, rows) if len(_child_rows(rows, router_pid)) == 1 else None


def test_router_children_are_grouped_under_their_router(
    router: tuple[subprocess.Popen, int, Path],
) -> None:
    proc, port, log = router
    doc, rows = _status(proc.pid)
    jsonschema.validate(doc, SCHEMA)
    assert rows[proc.pid]["router"]["models_max"] == 1
    assert rows[proc.pid]["router"]["loaded"] == 0
    assert rows[proc.pid]["router"]["port"] == port

    for model, gone in (("a", None), ("b", "a")):
        code, body = _http(port, "/models/load", {"model": model})
        assert code == 200, body
        _wait(f"{model} loaded", lambda m=model: _loaded(port) == {m}, log)  # type: ignore[misc]
        # the router unloads `a` (LRU at --models-max 1): its child exits, maybe a moment late
        doc, rows = _wait(
            f"only {model}'s child under the router", lambda: _one_child(proc.pid), log
        )
        jsonschema.validate(doc, SCHEMA)
        children = _child_rows(rows, proc.pid)
        assert set(children) == {model}
        child = children[model]
        assert child["router_child"] == {
            "router_pid": proc.pid,
            "router_port": port,
            "model_id": model,
        }
        assert child["model_path"].endswith(f"/{model}.gguf")
        assert child["router"] is None
        assert rows[proc.pid]["router"]["children"] == [child["pid"]]
        assert rows[proc.pid]["router"]["loaded"] == 1
        assert rows[proc.pid]["router_child"] is None
        if gone is not None:
            assert gone not in children
        _check_the_tui(proc.pid, model, child["pid"])


def _check_the_tui(router_pid: int, model: str, child_pid: int) -> None:
    """The TUI's live frame: the router's row, then its one child's row under it."""
    source = LiveSource()
    try:
        rows = [r for r in source.latest().models if r.pid in (router_pid, child_pid)]
    finally:
        source.close()
    assert [(r.pid, r.role) for r in rows] == [(router_pid, "router"), (child_pid, "server")]
    assert rows[0].flags == ("1 loaded, max 1",)
    assert rows[1].model.startswith(f"└ {model} · {model}.gguf")
