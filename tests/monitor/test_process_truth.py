"""What vramscope says about real server processes is true (issue 16, items 5, 9, 10).

The processes are real: tests/fakes/fake_server.py starts Python processes whose
``/proc/PID/cmdline`` reads exactly ``llama-server -m x.gguf`` (and ``comm`` is
``llama-server``), in a directory of the test's choosing, with a forked helper or an
unreaped (zombie) child when asked. The models are real small GGUF files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fake_server
import jsonschema
import pytest
import tiny_models

from collectors.base import Roots
from monitor.sampler import Sampler
from tui.source import FrameBuilder

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())


def vramscope(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    tiny_models.write_llama(folder / "x.gguf")
    return folder


def sample_procfs():
    sampler = Sampler(Roots(), enabled=["procfs"], timeout_s=None)
    try:
        return sampler.sample()
    finally:
        sampler.close()


# -- item 5: relative model paths resolve against the server's working directory ------------


def test_resolve_paths_joins_every_relative_model_file_to_the_cwd() -> None:
    from monitor.engines.spec import LaunchSpec, resolve_paths

    spec = LaunchSpec(engine="llama.cpp", model_path="x.gguf", draft_model="d/draft.gguf",
                      mmproj="mm.gguf", lora=("a.gguf", "/abs/b.gguf"))
    got = resolve_paths(spec, "/srv/models")
    assert (got.model_path, got.draft_model, got.mmproj, got.lora) == (
        "/srv/models/x.gguf", "/srv/models/d/draft.gguf", "/srv/models/mm.gguf",
        ("/srv/models/a.gguf", "/abs/b.gguf"))
    assert resolve_paths(spec, None) is spec  # unknown cwd: left as given
    hub = LaunchSpec(engine="vllm", model_path="Qwen/Qwen3-8B")
    assert resolve_paths(hub, "/srv") is hub  # a hub id is not a file


def test_a_server_started_in_its_models_folder_is_resolved_in_status_estimate_and_tui(
        models: Path) -> None:
    argv = ["llama-server", "-m", "x.gguf", "-c", "512", "-np", "1"]
    with fake_server.running(argv, cwd=models) as server:
        status = vramscope("status", "--json")
        estimate = vramscope("estimate", "--json", "--cpu-only", "--pid", str(server.pid))
        snap = sample_procfs()
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    jsonschema.validate(doc, SCHEMA)
    (row,) = [p for p in doc["processes"] if p["pid"] == server.pid]
    assert row["cwd"] == str(models)
    assert row["model_path"] == str(models / "x.gguf")
    assert estimate.returncode == 0, estimate.stderr
    est = json.loads(estimate.stdout)
    assert est["model_path"] == str(models / "x.gguf") and est["context"]["cells"] == 512
    frame = FrameBuilder().build(snap)
    (model_row,) = [r for r in frame.models if r.pid == server.pid]
    assert model_row.estimate_bytes is not None and "unknown model" not in model_row.flags


def test_llama_arg_model_in_the_environment_resolves_against_the_cwd_too(
        models: Path) -> None:
    with fake_server.running(["llama-server", "-c", "256"], cwd=models,
                             env={"LLAMA_ARG_MODEL": "x.gguf"}) as server:
        status = vramscope("status", "--json")
        estimate = vramscope("estimate", "--json", "--cpu-only", "--pid", str(server.pid))
    assert estimate.returncode == 0, estimate.stderr
    assert json.loads(estimate.stdout)["model_path"] == str(models / "x.gguf")
    (row,) = [p for p in json.loads(status.stdout)["processes"] if p["pid"] == server.pid]
    assert row["model_path"] == str(models / "x.gguf")


def test_capture_records_the_cwd_link_and_the_tree_replays_resolved(
        models: Path, tmp_path: Path) -> None:
    from monitor.capture import capture

    with fake_server.running(["llama-server", "-m", "x.gguf"], cwd=models) as server:
        capture(Roots(), tmp_path / "cap", enabled=["procfs"], nvml=False)
    link = tmp_path / "cap" / "proc" / str(server.pid) / "cwd"
    assert link.is_symlink() and os.readlink(link) == str(models)
    sampler = Sampler(Roots(proc=tmp_path / "cap" / "proc", sys=tmp_path / "cap" / "sys"),
                      enabled=["procfs"], timeout_s=None)
    try:
        replayed = sampler.sample()
    finally:
        sampler.close()
    (info,) = [p for p in replayed.processes if p.pid == server.pid]
    assert info.cwd == str(models)
