"""`vramscope estimate` as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import gguf_models as g
import pytest

ROOT = Path(__file__).resolve().parents[3]
MIB = 1024**2


Runner = Callable[
    ..., subprocess.CompletedProcess[str]
]  # the vramscope fixture (tests/conftest.py)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    md, tensors = g.qwen3_8b()
    return g.write_model(
        tmp_path_factory.mktemp("m") / "qwen3-8b.gguf", "qwen3", md, tensors, vocab_size=151936
    )[0]


def test_estimate_table_and_json(model: Path, vramscope: Runner) -> None:
    args = [
        "estimate",
        "--cpu-only",
        "--",
        "llama-server",
        "-m",
        str(model),
        "-c",
        "8192",
        "-np",
        "24",
        "-fa",
        "on",
    ]
    text = vramscope(*args)
    assert text.returncode == 0, text.stderr
    assert "context: 12288 cells = 512 per stream x 24 stream(s)" in text.stdout
    kv_line = next(line for line in text.stdout.splitlines() if line.startswith("kv "))
    assert "1728.00" in kv_line and "llama-kv-cache.cpp" in kv_line
    assert "total on host:" in text.stdout
    doc = json.loads(vramscope(*args[:1], "--json", *args[1:]).stdout)
    assert doc["schema"] == "vramscope.estimate/1"
    assert doc["context"]["cells"] == 12288
    kv = sum(c["bytes"] for c in doc["components"] if c["name"] == "kv")
    assert kv == 1728 * MIB
    assert doc["totals_with_growth"]["host"] - doc["totals_at_load"]["host"] == 8192 * MIB


def test_estimate_pid_uses_the_real_arguments_and_llama_arg_env(
    model: Path, tmp_path: Path, vramscope: Runner
) -> None:
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)  # a real process whose executable is llama-server
    code = "import time; print('ready', flush=True); time.sleep(60)"
    env = {**os.environ, "LLAMA_ARG_N_PARALLEL": "16", "HF_TOKEN": "hf_secret"}
    # Python runs `-c code`; the llama.cpp parser sees the later -c 8192 (the last wins).
    child = subprocess.Popen(
        [str(exe), "-c", code, "-m", str(model), "-c", "8192", "-kvu"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        result = vramscope("estimate", "--json", "--cpu-only", "--pid", str(child.pid))
    finally:
        child.kill()
        child.wait()
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["context"]["n_seq_max"] == 16  # from LLAMA_ARG_N_PARALLEL in its environment
    assert (doc["context"]["kv_unified"], doc["context"]["cells"]) == (True, 8192)
    assert "hf_secret" not in result.stdout + result.stderr


def test_estimate_pid_of_something_else(tmp_path: Path, vramscope: Runner) -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        result = vramscope("estimate", "--cpu-only", "--pid", str(child.pid))
    finally:
        child.kill()
        child.wait()
    assert result.returncode == 2 and "not an inference server command" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--", "llama-server", "-m", "/no/such/model.gguf"], "/no/such/model.gguf"),
        (["--", "ls", "-l"], "not an inference server command"),
        ([], "nothing to estimate"),
        (["--pid", "999999999"], "cannot read the command line of pid 999999999"),
    ],
)
def test_estimate_errors_are_one_line(args: list[str], message: str, vramscope: Runner) -> None:
    result = vramscope("estimate", "--cpu-only", *args)
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: error: ")
    assert message in lines[0]


def test_malformed_gguf_is_one_line(tmp_path: Path, vramscope: Runner) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(64))
    result = vramscope("estimate", "--cpu-only", "--", "llama-server", "-m", str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith("vramscope: error: ") and str(bad) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_estimate_beside_what_llama_cpp_reported(tmp_path: Path, vramscope: Runner) -> None:
    """The real CPU llama-server log in the fixtures, and the same tiny model rebuilt: every
    target component agrees with llama.cpp's own numbers."""
    import tiny_models

    model = tiny_models.write_llama(
        tmp_path / "tiny-llama.gguf",
        n_layer=4,
        n_embd=1024,
        n_head=16,
        n_head_kv=4,
        n_ff=2816,
        n_vocab=2048,
    )
    log = ROOT / "tests" / "fixtures" / "llamalog" / "real-cpu-draft.log"
    result = vramscope(
        "estimate",
        "--json",
        "--cpu-only",
        "--log",
        str(log),
        "--",
        "llama-server",
        "-m",
        str(model.path),
        "-c",
        "2048",
        "-np",
        "1",
    )
    assert result.returncode == 0, result.stderr
    rows = {r["component"]: r for r in json.loads(result.stdout)["reported_by_llama_cpp"]}
    for name in ("weights", "kv + kv_swa", "compute", "output"):
        assert abs(rows[name]["delta_mib"]) <= 0.01, rows[name]
    text = vramscope(
        "estimate",
        "--cpu-only",
        "--log",
        str(log),
        "--",
        "llama-server",
        "-m",
        str(model.path),
        "-c",
        "2048",
        "-np",
        "1",
    ).stdout
    assert "estimated vs reported by llama.cpp" in text
    missing = vramscope(
        "estimate",
        "--cpu-only",
        "--log",
        str(tmp_path / "none.log"),
        "--",
        "llama-server",
        "-m",
        str(model.path),
    )
    assert missing.returncode == 2 and "cannot read the log" in missing.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-c", "abc"], "-c abc: expected an integer (llama-server would refuse it)"),
        (["-c", "1e5"], "-c 1e5: expected an integer (llama-server would read it as 1)"),
        (["-c", "-5"], "-c -5: expected a context size >= 0"),
        (["-np", "abc"], "-np abc: expected an integer (llama-server would refuse it)"),
        (["-ngl", "abc"], "-ngl abc: expected an integer, 'auto' or 'all'"),
        (["--spec-type", "warp"], "--spec-type warp: expected speculative types from none,"),
        (["-ctk", "q2_k"], "-ctk q2_k: expected one of f32, f16, bf16, q8_0"),
        (["-b", "2k"], "-b 2k: expected an integer (llama-server would read it as 2)"),
        (["--draft-max", "x"], "--draft-max x: expected an integer"),
        (["-ub"], "-ub: missing value (llama-server would refuse it)"),
    ],
)
def test_estimate_refuses_what_llama_server_refuses(
    model: Path, flags: list[str], message: str, vramscope: Runner
) -> None:
    result = vramscope("estimate", "--cpu-only", "--", "llama-server", "-m", str(model), *flags)
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vramscope: error: {message}"), lines
    assert result.stdout == ""


def test_estimate_keeps_an_unknown_flag_as_no_error(model: Path, vramscope: Runner) -> None:
    result = vramscope(
        "estimate",
        "--cpu-only",
        "--",
        "llama-server",
        "-m",
        str(model),
        "-c",
        "4096",
        "--frobnicate",
        "3",
    )
    assert result.returncode == 0, result.stderr
    assert "context: 4096 cells" in result.stdout


def test_estimate_pid_with_odd_arguments_is_not_an_error(
    model: Path, tmp_path: Path, vramscope: Runner
) -> None:
    """A running process is what it is: its odd values are skipped, not refused."""
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    code = "import time; print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen(
        [str(exe), "-c", code, "-m", str(model), "-c", "abc", "-np", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        result = vramscope("estimate", "--json", "--cpu-only", "--pid", str(child.pid))
    finally:
        child.kill()
        child.wait()
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["model_path"] == str(model) and doc["context"]["n_seq_max"] == 4  # -np default
    assert (
        "skipped the process's -c abc: expected an integer (llama-server would refuse it)"
    ) in doc["notes"]


def _cut_model(tmp_path: Path) -> tuple[Path, int, int]:
    md, tensors = g.qwen3_8b(n_layer=2)
    path = g.write_model(tmp_path / "cut.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    full = path.stat().st_size
    os.truncate(path, full // 2)  # a download that stopped half way
    return path, full // 2, full


def test_truncated_model_is_one_line_with_both_sizes(tmp_path: Path, vramscope: Runner) -> None:
    path, size, full = _cut_model(tmp_path)
    result = vramscope("estimate", "--cpu-only", "--", "llama-server", "-m", str(path))
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    line = result.stderr.strip()
    assert line.startswith(
        f"vramscope: error: {path}: truncated: the file is {size:,} bytes "
        "but its tensor data ends at byte "
    ), line
    ends_at = int(line.split("ends at byte ")[1].split(" ")[0].replace(",", ""))
    assert full - 32 < ends_at <= full  # the last tensor's end, before its padding
    predicted = vramscope("predict", "--", "llama-server", "-m", str(path))
    assert predicted.returncode == 2 and predicted.stderr.strip() == line


def test_log_without_memory_lines_says_so(model: Path, tmp_path: Path, vramscope: Runner) -> None:
    """vLLM's startup log (or any text): no llama.cpp buffer line, so nothing to compare;
    not a table of 0.00 'reported' figures."""
    log = ROOT / "tests" / "fixtures" / "llamalog" / "vllm-startup.log"
    for extra in ([], ["--json"]):
        result = vramscope(
            "estimate",
            "--cpu-only",
            *extra,
            "--log",
            str(log),
            "--",
            "llama-server",
            "-m",
            str(model),
            "-c",
            "4096",
        )
        assert result.returncode == 2, result.stdout
        assert result.stdout == ""
        assert result.stderr.strip() == (
            f"vramscope: error: {log}: no llama.cpp memory lines in this log (the '... buffer "
            "size = N MiB' and 'llama_kv_cache: size = ...' lines llama-server prints as it "
            "loads); nothing to compare"
        )


def test_estimate_and_predict_say_what_is_approximate(tmp_path: Path, vramscope: Runner) -> None:
    """A launch of an architecture whose compute peak is not derived (the Qwen3 header
    relabelled qwen2) is marked approximate in ``estimate`` and ``predict``, text and JSON;
    a Qwen3 launch on the CPU is not, nor is a Nemotron-H one (its Mamba2 peak is derived,
    monitor/estimate/replay.py)."""
    import dataclasses

    from arch_models import model_for

    qwen3 = model_for("qwen3-0.6b")
    meta = {
        ("qwen2." + k.removeprefix("qwen3.") if k.startswith("qwen3.") else k): v
        for k, v in qwen3.metadata.items()
    }
    qwen2 = dataclasses.replace(qwen3, key="qwen3-as-qwen2", arch="qwen2", metadata=meta)
    nemotron = str(model_for("nemotron-nano-9b-v2").write(tmp_path))
    qwen = str(qwen3.write(tmp_path))
    unsure = str(qwen2.write(tmp_path))
    for path, marked in ((unsure, True), (qwen, False), (nemotron, False)):
        launch = ["--", "llama-server", "-m", path, "-c", "4096", "-np", "1"]
        text = vramscope("estimate", *launch)
        doc = json.loads(vramscope("estimate", "--json", *launch).stdout)
        pred = vramscope("predict", "--json", *launch)
        assert text.returncode == 0, text.stderr
        assert ("approximate: compute buffer: qwen2" in text.stdout) is marked
        assert bool(doc["approximate"]) is marked
        assert pred.returncode in (0, 3, 4), pred.stderr
        assert bool(json.loads(pred.stdout)["approximate"]) is marked
