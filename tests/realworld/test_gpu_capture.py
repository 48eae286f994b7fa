"""Real-world tier: ``scripts/gpu-capture``'s CPU path, as CI runs it on a box without a GPU.

The kit builds (or reuses) the CPU llama-server, runs two cases of its CPU matrix on this
machine and writes one JSON per run with the provenance; the estimate of each recorded
command line, with this CPU's features, must give the extra buffers (AMX / CPU_REPACK)
llama.cpp logged, exactly, and none where it logged none. On a machine with an NVIDIA GPU
and nvcc the same script builds for CUDA and records the GPU matrix too
(tests/fixtures/llamalog/hardware/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from collectors.cpuinfo import llama_cpu_features, read_cpu_flags
from monitor.estimate import estimate_command, features_of
from monitor.logs.server_log import parse_llama_log

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def test_the_kit_records_this_cpu_and_the_estimate_matches(
    llama_server_bin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rec"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-capture"), "--cpu-only", "--out", str(out),
         "--only", "cpu-qwen3-0.6b-repack|cpu-tiny-bert"],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "the CPU path" in run.stderr and "llama.cpp-relevant flags" in run.stderr
    prov = json.loads((out / "provenance-cpu.json").read_text())
    assert prov["mode"] == "cpu" and "llama.cpp commit" in prov["build_info"]
    assert set(prov["cpu_flags"]) == read_cpu_flags()
    cpu = features_of(llama_cpu_features(read_cpu_flags()))
    docs = [json.loads(p.read_text()) for p in sorted(out.glob("cpu-*.json"))]
    assert {d["id"] for d in docs} == {"cpu-qwen3-0.6b-repack", "cpu-tiny-bert-embedding"}
    for doc in docs:
        assert doc["rss_anon_bytes"] > 0 and doc["returncode"] == 0
        if doc["model"].startswith("tiny:"):
            continue  # its path is gone with the kit's temporary folder
        from arch_models import model_for

        model = str(model_for(doc["model"]).write(tmp_path))
        argv = [model if a == "{model}" else "8080" if a == "{port}" else a for a in doc["argv"]]
        est = estimate_command(argv, env={}, devices=(), cpu=cpu)
        logged = {
            b.backend: b.mib
            for b in parse_llama_log(doc["log_lines"]).buffers
            if b.kind == "model" and b.backend in ("AMX", "CPU_REPACK")
        }
        mine = {
            c.buffer: round(c.bytes / MIB, 2)
            for c in est.components
            if c.buffer in ("AMX", "CPU_REPACK")
        }
        assert mine.keys() == logged.keys()
        assert all(abs(mine[k] - logged[k]) <= 0.011 for k in logged), (mine, logged)
