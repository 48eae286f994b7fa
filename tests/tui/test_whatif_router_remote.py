"""The what-if dialog's router model id on a remote frame: a router's model is judged on
its own box (``predict --remote``), so the dialog refuses it in one line before asking
anything; on this box's frame the same word goes to the router discovery (noise)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import tiny_models
from box_states import host
from fake_source import FakeSource

from collectors.base import ProcessInfo, Snapshot
from monitor.errors import UsageError
from monitor.estimate.kv import EstimateError
from monitor.servers import read_llama_env
from tui.screens.whatif import predict_for
from tui.source import FrameBuilder, RemoteSource

GIB = 1024**3

EMPTY = Snapshot(1000, (), (), (), (), (), ())


def test_a_router_id_on_a_remote_frame_is_refused_in_one_line() -> None:
    source = RemoteSource("http://127.0.0.1:9")  # never asked: the refusal comes first
    app = SimpleNamespace(source=source, swap_config=None)
    frame = SimpleNamespace(snapshot=EMPTY, live=True)
    with pytest.raises(UsageError) as caught:
        predict_for(app, frame, "qwen3-8b", None)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    assert "judged on its own box: vramscope predict --remote URL qwen3-8b" in message


def test_the_same_word_on_this_boxs_frame_asks_the_routers_here() -> None:
    app = SimpleNamespace(source=FakeSource([EMPTY]), swap_config=None)
    frame = SimpleNamespace(snapshot=EMPTY, live=False)
    with pytest.raises(EstimateError, match="no llama-server router on this box serves"):
        predict_for(app, frame, "qwen3-8b", None)  # type: ignore[arg-type]


def test_a_live_frames_router_id_is_priced_with_the_routers_environment(tmp_path: Path) -> None:
    """The router (a process of ours started with LLAMA_ARG_CTX_SIZE=8192) passes its
    environment to its children: the live dialog reads it as `predict` does."""
    models = tmp_path / "models"
    models.mkdir()
    tiny_models.write_llama(models / "a.gguf", seed=1, name="a", n_ctx_train=16384)
    proc = subprocess.Popen(["sleep", "600"], env={"LLAMA_ARG_CTX_SIZE": "8192", "PATH": "/bin"})
    # the port stays bound (never listening) for the whole test, so nothing answers there
    # and no other router on a busy box can take it: the router's files are read
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 0))
        port = str(held.getsockname()[1])
        argv = ("llama-server", "--models-dir", str(models), "--port", port)
        router = ProcessInfo(proc.pid, 1, 1000, 1, 1000, "llama-server", argv, "llama.cpp")
        snap = Snapshot(1000, (host(64 * GIB),), (router,), (), (), (), ())
        builder = FrameBuilder(env_for=lambda pid: read_llama_env(Path("/proc"), pid))
        app = SimpleNamespace(source=FakeSource([snap], builder=builder), swap_config=None)
        live = predict_for(app, SimpleNamespace(snapshot=snap, live=True), "a", None)  # type: ignore[arg-type]
        replay = predict_for(app, SimpleNamespace(snapshot=snap, live=False), "a", None)  # type: ignore[arg-type]
    finally:
        held.close()
        proc.kill()
        proc.wait(timeout=30)
    assert live.prediction.estimate.n_ctx == 8192
    assert replay.prediction.estimate.n_ctx != 8192  # a replayed frame reads no environment
