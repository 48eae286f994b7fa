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
from monitor.analysis.predict import answer
from monitor.analysis.predict_request import PredictRequest, PredictResult
from monitor.estimate.model import devices_from_samples
from monitor.servers import read_llama_env

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


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _hf_cache(top: Path) -> Path:
    """llama.cpp's HF cache (hub layout) with one listed model and files it does not list."""
    repo = top / "models--user--tiny"
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    tiny_models.write_llama(snap / "tiny-Q8_0.gguf", seed=3, name="tiny")
    for noise in ("mmproj-tiny-F16.gguf", "tiny-Q4_K_M-00002-of-00002.gguf", "notag.gguf"):
        (snap / noise).write_bytes(b"GGUF")
    bad = top / "models--a--b--c" / "snapshots" / COMMIT  # not a user/model id
    bad.mkdir(parents=True)
    (bad / "x-Q8_0.gguf").write_bytes(b"GGUF")
    (top / "models--user--link").symlink_to(repo)  # a repository folder that is a link
    return top


def test_the_hf_cache_lists_what_the_router_lists(tmp_path: Path) -> None:
    from monitor.servers.hf_cache import list_cached_models

    cache = _hf_cache(tmp_path / "hub")
    assert list_cached_models({"LLAMA_CACHE": str(cache)}) == ("user/tiny:Q8_0",)
    assert list_cached_models({"LLAMA_CACHE": str(tmp_path / "none")}) == ()


def test_a_cached_model_of_the_routers_cache_is_predicted_by_its_id(
    tmp_path: Path, models: Path
) -> None:
    """The router lists llama.cpp's HF cache (server-models.cpp load_models, preset.cpp
    load_from_cache): its child is ``-hf user/tiny:Q8_0``, resolved in the router's cache."""
    cache = _hf_cache(tmp_path / "hub")
    env = {"LLAMA_CACHE": str(cache), "LLAMA_ARG_CTX_SIZE": "8192", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(["sleep", "600"], env=env)
    try:
        cached = _predict_id(proc.pid, _router(models), "user/tiny:Q8_0")
        plain = _predict_id(proc.pid, _router(models), "a")  # the folder's model still there
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert plain.prediction.estimate.n_ctx == 8192
    assert "user/tiny:Q8_0" in cached.command
    assert cached.prediction.estimate.model_path == str(
        cache / "models--user--tiny" / "snapshots" / COMMIT / "tiny-Q8_0.gguf"
    )


def _predict_id(pid: int, argv: tuple[str, ...], model_id: str) -> PredictResult:
    router = ProcessInfo(pid, 1, 1_000, 1, 1000, "llama-server", argv, "llama.cpp", ("inference",))
    snap = Snapshot(1_800_000_000_000, (host(64 * GIB),), (router,), (), (), (), ())
    req = PredictRequest([], model_id=model_id, env_for=lambda p: read_llama_env(PROC, p))
    return answer(req, snap, devices_from_samples(snap.devices, 0))
