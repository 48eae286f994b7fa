"""A llama-server router's children inherit its environment (server-models.cpp lines
1159-1160, llama.cpp 0c1e57098: ``child_env = base_env``), so ``predict MODEL_ID`` parses
the child's launch with the router's allow-listed ``LLAMA_ARG_*``; the child's argv (the
preset's keys, the router's own flags) overrides it, as common/arg.cpp does.

The router here is a real process of ours (``sleep``) started with the environment under
test: its ``/proc/PID/environ`` is read by the real reader (environ.read_llama_env); its
command line is the router's, as the snapshot records it; its port answers nothing, so its
model list comes from its files."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiny_models
from box_states import host

from collectors.base import ProcessInfo, ProcessMemory, Snapshot
from monitor.analysis.predict import PredictRequest, PredictResult, answer
from monitor.engines import read_llama_env
from monitor.estimate.model import devices_from_samples

GIB = 1024**3
PROC = Path("/proc")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    tiny_models.write_llama(folder / "a.gguf", seed=1, name="a", n_ctx_train=16384)
    return folder


@pytest.fixture
def router_env() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose environment is a router's: LLAMA_ARG_CTX_SIZE=8192."""
    proc = subprocess.Popen(
        ["sleep", "600"], env={"LLAMA_ARG_CTX_SIZE": "8192", "PATH": "/usr/bin:/bin"}
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _predict(pid: int, argv: tuple[str, ...], env: bool, **kw: object) -> PredictResult:
    router = ProcessInfo(pid, 1, 1_000, 1, 1000, "llama-server", argv, "llama.cpp", ("inference",))
    snap = Snapshot(
        1_800_000_000_000,
        (host(64 * GIB),),
        (router,),
        (ProcessMemory(pid, "host", rss_anon_bytes=20 << 20),),
        (),
        (),
        (),
    )
    req = PredictRequest(
        [],
        model_id="a",
        env_for=(lambda p: read_llama_env(PROC, p)) if env else None,
        **kw,  # type: ignore[arg-type]
    )
    return answer(req, snap, devices_from_samples(snap.devices, 0))


def _router(models: Path, *extra: str) -> tuple[str, ...]:
    port = str(_closed_port())
    return ("llama-server", "--models-dir", str(models), "--port", port, *extra)


def test_the_child_inherits_the_routers_context_from_its_environment(
    models: Path, router_env: subprocess.Popen[bytes]
) -> None:
    result = _predict(router_env.pid, _router(models), env=True)
    assert result.prediction.estimate.n_ctx == 8192
    assert "--models-dir" not in result.command  # the child's argv, as the router renders it


def test_without_the_environment_the_child_gets_the_default_context(
    models: Path, router_env: subprocess.Popen[bytes]
) -> None:
    """Noise: a recorded state (no environment read) does not invent the 8192."""
    result = _predict(router_env.pid, _router(models), env=False)
    assert result.prediction.estimate.n_ctx != 8192


def test_the_routers_own_ctx_flag_overrides_its_environment(
    models: Path, router_env: subprocess.Popen[bytes]
) -> None:
    """Noise: ``-c 2048`` on the router's argv reaches the child's argv, which wins."""
    result = _predict(router_env.pid, _router(models, "-c", "2048"), env=True)
    assert result.prediction.estimate.n_ctx == 2048


def test_the_presets_ctx_overrides_the_routers_environment(
    tmp_path: Path, models: Path, router_env: subprocess.Popen[bytes]
) -> None:
    preset = tmp_path / "models.ini"
    preset.write_text(f"[a]\nmodel = {models / 'a.gguf'}\nc = 4096\n")
    argv = ("llama-server", "--models-preset", str(preset), "--port", str(_closed_port()))
    result = _predict(router_env.pid, argv, env=True)
    assert result.prediction.estimate.n_ctx == 4096


def test_a_router_named_by_its_environment_only_is_found(tmp_path: Path, models: Path) -> None:
    """``LLAMA_ARG_MODELS_DIR`` in the router's environment makes it a router, and its
    models are listed from that folder."""
    env = {"LLAMA_ARG_MODELS_DIR": str(models), "LLAMA_ARG_CTX_SIZE": "8192", "PATH": "/bin"}
    proc = subprocess.Popen(["sleep", "600"], env=env)
    try:
        argv = ("llama-server", "--port", str(_closed_port()))
        result = _predict(proc.pid, argv, env=True)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert result.prediction.estimate.n_ctx == 8192
    assert any(str(models / "a.gguf") in arg for arg in result.command)
