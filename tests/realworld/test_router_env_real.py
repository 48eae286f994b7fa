"""The real llama-server router passes its environment to its children (server-models.cpp
lines 1159-1160, llama.cpp 0c1e57098), and ``predict MODEL_ID`` prices the child with it.

Starts the router this project builds with ``LLAMA_ARG_CTX_SIZE=1024`` in its environment
and no ``-c`` on its command line, loads one tiny model through ``POST /models/load``, and
checks that the child's own log says ``n_ctx = 1024`` and that ``vramscope predict`` of that
id (live: the router's environment read from /proc) judges the same context. Model ids are
unique to this run (the box may run other engineers' routers). Waits are hang guards.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import tiny_models
from router_http import child_of, free_port, http, loaded, predict, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


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
    port = free_port()
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
        wait_for("the router's /health", lambda: http(port, "/health")[0] == 200, log)
        code, body = http(port, "/models/load", {"model": model_id})
        assert code == 200, body
        wait_for(f"{model_id} loaded", lambda: loaded(port) == {model_id}, log)
        child = wait_for(f"{model_id}'s child", lambda: child_of(proc.pid, model_id), log)
        real = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[:-1]
        child_port = int(real[real.index(b"--port") + 1])
        assert b"--ctx-size" not in real and b"-c" not in real  # it came by the environment
        logged = wait_for("the child's n_ctx", lambda: _n_ctx_logged(log, child_port), log)
        code, doc, err = predict(model_id)
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
