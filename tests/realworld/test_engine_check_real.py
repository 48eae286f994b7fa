"""Real-world tier: ``estimate --engine-check`` with the real llama-fit-params.

``scripts/build-llama-server`` builds llama-fit-params beside llama-server; the check runs
it on real-architecture headers (tests/fakes/arch_models.py) and every figure of its
memory breakdown must be within 5 % of the estimate of the same arguments. Two MoE models
whose experts go to the ``CPU_REPACK`` row, one dense.

Run: ``bash scripts/build-llama-server && bash scripts/test --slow -k engine_check``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from arch_models import model_for  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("model", "args"),
    [
        ("qwen3-8b", ("-c", "4096", "-np", "1")),
        ("qwen3moe-30b-a3b", ("-c", "8192", "-np", "2", "--port", "8080")),
        ("gpt-oss-20b", ("-c", "8192", "-np", "4", "-kvu")),
    ],
)
def test_llama_fit_params_agrees_within_5_percent(
    llama_server_bin: Path, tmp_path_factory: pytest.TempPathFactory, model: str, args: tuple
) -> None:
    if not (llama_server_bin.parent / "llama-fit-params").exists():
        pytest.skip(f"no llama-fit-params beside {llama_server_bin} (an older build)")
    path = model_for(model).write(tmp_path_factory.mktemp("engine-check"))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "estimate",
            "--cpu-only",
            "--engine-check",
            "--json",
            "--",
            str(llama_server_bin),
            "-m",
            str(path),
            *args,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    check = json.loads(out.stdout)["engine_check"]
    parts = {r["part"] for r in check["rows"]}
    assert parts == {"weights", "context", "compute"}
    assert all(r["vramscope_mib"] is not None for r in check["rows"])
    assert not [r for r in check["rows"] if r["over_5pct"]], check["rows"]


def test_predict_says_the_real_llama_fit_params_checked_it(
    llama_server_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``predict --engine-check`` with the real llama-fit-params beside the real
    llama-server, on the CPU path (only the procfs collector: ``-dev none``): the verdict
    says it was checked, every figure within 5 %; the verdict itself is this box's."""
    if not (llama_server_bin.parent / "llama-fit-params").exists():
        pytest.skip(f"no llama-fit-params beside {llama_server_bin} (an older build)")
    folder = tmp_path_factory.mktemp("predict-check")
    path = model_for("qwen3-8b").write(folder)
    cfg = folder / "config.toml"
    cfg.write_text('[collectors]\nenabled = ["procfs"]\n')
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "predict",
            "--config",
            str(cfg),
            "--engine-check",
            "--json",
            "--",
            str(llama_server_bin),
            "-m",
            str(path),
            "-c",
            "4096",
            "-np",
            "1",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode in (0, 1, 3, 4), out.stderr
    doc = json.loads(out.stdout)
    check = doc["engine_check"]
    assert check["checked"] is True, check["line"]
    assert check["line"].startswith("checked by llama-fit-params (")
    assert check["line"] in doc["notes"]
    assert check["args"][-2:] == ["-dev", "none"]
    assert {r["part"] for r in check["rows"]} == {"weights", "context", "compute"}
    assert check["over_5pct"] == 0, check["rows"]
