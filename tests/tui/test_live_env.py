"""``tui --live`` reads a server's allow-listed ``LLAMA_ARG_*`` environment as the daemon's
assessor does (issue 34): a real process whose environment says ``LLAMA_ARG_CTX_SIZE=4096``
is shown and estimated at 4096 cells, not at the model's training context."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from collectors.base import Roots
from tui.source import LiveSource

SCRIPT = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"


def _server(tmp_path: Path, model: str, env_extra: dict[str, str]) -> subprocess.Popen[str]:
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)  # a real process whose executable is llama-server
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT)
    # Python runs serve.py; the llama.cpp parser sees `-m MODEL -np 2` and no -c
    return subprocess.Popen(
        [str(exe), str(script), "-m", model, "-np", "2"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env_extra},
        stdout=subprocess.PIPE,
        text=True,
    )


def _row_of(pid: int):  # noqa: ANN202
    source = LiveSource(Roots(), ["procfs"])
    try:
        rows = [r for r in source.latest().models if r.pid == pid]
    finally:
        source.close()
    assert len(rows) == 1
    return rows[0]


def test_live_tui_reads_llama_arg_ctx_size(tmp_path: Path, models: dict[str, str]) -> None:
    child = _server(tmp_path, models["qwen3-8b-q8_0.gguf"], {"LLAMA_ARG_CTX_SIZE": "4096"})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        row = _row_of(child.pid)
    finally:
        child.kill()
        child.wait()
    assert row.launch is not None and row.launch.ctx_size == 4096
    assert row.ctx_slots == "4096×2"
    assert row.estimate is not None and row.estimate.n_ctx == 4096


def test_live_tui_without_the_env_uses_the_model_context(
    tmp_path: Path, models: dict[str, str]
) -> None:
    child = _server(tmp_path, models["qwen3-8b-q8_0.gguf"], {})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        row = _row_of(child.pid)
    finally:
        child.kill()
        child.wait()
    assert row.estimate is not None and row.estimate.n_ctx not in (None, 4096)
