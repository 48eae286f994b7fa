"""The real llama-server router passes its environment to its children (server-models.cpp
lines 1159-1160, llama.cpp 0c1e57098), and ``predict MODEL_ID`` prices the child with it.

Starts the router this project builds with ``LLAMA_ARG_CTX_SIZE=1024`` in its environment
and no ``-c`` on its command line, loads one tiny model through ``POST /models/load``, and
checks that the child's own log says ``n_ctx = 1024`` and that ``vramscope predict`` of that
id (live: the router's environment read from /proc) judges the same context. Model ids are
unique to this run (the box may run other engineers' routers). Waits are hang guards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tiny_models

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
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


def _loaded(port: int) -> set[str]:
    status, body = _http(port, "/models")
    if status != 200:
        return set()
    return {m["id"] for m in json.loads(body)["data"] if m["status"]["value"] == "loaded"}


def _child_of(router_pid: int, model_id: str) -> int | None:
    """The router's child serving ``model_id`` (its --alias), from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == router_pid and model_id.encode() in argv:
            return int(entry)
    return None


def _predict(*args: str) -> tuple[int, dict, str]:
    result = subprocess.run(
        [sys.executable, "-m", "monitor", "predict", "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    doc = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.returncode, doc, result.stderr


def _n_ctx_logged(log: Path, port: int) -> int | None:
    """The child's context from its ``load_model: initializing, n_slots = S, n_ctx_slot =
    N`` line (S x N; the router prefixes its children's output with their port)."""
    pattern = re.compile(r"n_slots = (\d+), n_ctx_slot = (\d+)")
    for line in log.read_text(errors="replace").splitlines():
        if f"[{port}]" in line and (m := pattern.search(line)):
            return int(m.group(1)) * int(m.group(2))
    return None


def test_the_child_inherits_the_routers_context_and_predict_says_so(
    llama_server_bin: Path, tmp_path: Path
) -> None:
    port = _free_port()
    model_id = f"envctx{port}"
    models = tmp_path / "models"
    models.mkdir()
    tiny_models.write_llama(models / f"{model_id}.gguf", seed=1, name="a")
    argv = [str(llama_server_bin), "--models-dir", str(models), "--models-max", "1"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "-np", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    env["LLAMA_ARG_CTX_SIZE"] = "1024"
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        _wait("the router's /health", lambda: _http(port, "/health")[0] == 200, log)
        code, body = _http(port, "/models/load", {"model": model_id})
        assert code == 200, body
        _wait(f"{model_id} loaded", lambda: _loaded(port) == {model_id}, log)
        child = _wait(f"{model_id}'s child", lambda: _child_of(proc.pid, model_id), log)
        real = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[:-1]
        child_port = int(real[real.index(b"--port") + 1])
        assert b"--ctx-size" not in real and b"-c" not in real  # it came by the environment
        logged = _wait("the child's n_ctx", lambda: _n_ctx_logged(log, child_port), log)
        code, doc, err = _predict(model_id)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert logged == 1024
    assert doc, err
    assert doc["launch"]["n_ctx"] == logged
