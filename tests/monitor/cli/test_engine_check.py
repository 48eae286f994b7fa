"""``estimate --engine-check``: llama-fit-params beside the server, its table beside ours.

The real binary runs in the slow tier (tests/realworld/test_llama_server.py); here its
recorded output (tests/fixtures/llamalog/fit-params/README.md) stands in for the engine
only: the finding of the binary, the arguments, the parsing and the comparison are ours.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from arch_models import model_for  # noqa: E402

from monitor.cli import engine_check as ec  # noqa: E402
from monitor.errors import InputError, SetupError  # noqa: E402
from monitor.estimate.model import HOST, Component, MemoryEstimate  # noqa: E402
from monitor.logs.server_log import parse_llama_log  # noqa: E402
from monitor.units import MIB  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "llamalog" / "fit-params"


def test_only_the_options_it_takes_are_passed_and_the_fit_is_off() -> None:
    argv = [
        "/opt/llama/llama-server", "-m", "x.gguf", "--ctx-size=4096", "--port", "8080",
        "-kvu", "-fa", "on", "--spec-type", "draft-mtp", "-md", "d.gguf", "--fit", "on",
        "--metrics", "-ngl", "99", "-ot", "exps=CPU", "--future-flag", "v",
    ]  # fmt: skip
    kept, dropped = ec.fit_params_args(argv, 4)
    assert kept == [
        "-m", "x.gguf", "--ctx-size=4096", "-fa", "on", "-ngl", "99", "-ot", "exps=CPU",
        "-np", "4", "-fit", "off",
    ]  # fmt: skip
    assert dropped == [
        "--port", "8080", "-kvu", "--spec-type", "draft-mtp", "-md", "d.gguf", "--metrics",
        "--future-flag", "v",
    ]  # fmt: skip
    assert ec.fit_params_args(["llama-server", "-m", "x", "-np", "2"], 2)[0][-4:] == [
        "-np", "2", "-fit", "off",
    ]  # fmt: skip


def _tool(folder: Path, mode: int = 0o755) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "llama-server").write_text("#!/bin/sh\n")
    tool = folder / ec.FIT_PARAMS
    tool.write_text("#!/bin/sh\n")
    tool.chmod(mode)
    return tool


def test_the_binary_is_found_beside_the_server_and_only_if_safe(tmp_path: Path) -> None:
    tool = _tool(tmp_path / "ok")
    assert ec.fit_params_beside(str(tmp_path / "ok" / "llama-server")) == tool
    assert ec.fit_params_beside("./llama-server", cwd=str(tmp_path / "ok")) == tool
    with pytest.raises(SetupError, match="no llama-fit-params beside"):
        ec.fit_params_beside(str(tmp_path / "none" / "llama-server"))
    _tool(tmp_path / "gw", 0o775)
    with pytest.raises(SetupError, match="writable by others"):
        ec.fit_params_beside(str(tmp_path / "gw" / "llama-server"))
    (tmp_path / "ln").mkdir()
    (tmp_path / "ln" / ec.FIT_PARAMS).symlink_to(tool)
    with pytest.raises(SetupError, match="symbolic link"):
        ec.fit_params_beside(str(tmp_path / "ln" / "llama-server"))
    _tool(tmp_path / "nx", 0o644)
    with pytest.raises(SetupError, match="not an executable"):
        ec.fit_params_beside(str(tmp_path / "nx" / "llama-server"))
    with pytest.raises(InputError, match="not on PATH"):
        ec.fit_params_beside("no-such-llama-server-here")


def test_host_rows_are_summed_and_gpu_rows_pair_in_order() -> None:
    report = parse_llama_log((FIXTURES / "rtx4090-readme.log").read_text().splitlines())
    gpu = "nvml:GPU-0"
    est = MemoryEstimate(
        engine="llama.cpp",
        model_path="m.gguf",
        components=(
            Component("weights", gpu, 17904 * MIB, ""),
            Component("kv", gpu, 300 * MIB, ""),
            Component("rs", gpu, 84 * MIB, ""),
            Component("compute", gpu, 1000 * MIB, ""),
            Component("weights", HOST, 58259 * MIB, ""),
            Component("compute", HOST, 12 * MIB, ""),
        ),
        devices=(gpu, HOST),
    )
    rows, note = ec.compare(report, est)
    assert note is None
    got = {(r.device, r.part): (r.engine_mib, r.estimate_mib, r.flagged) for r in rows}
    assert got[("CUDA0 (RTX 4090)", "weights")] == (17904, 17904, False)
    assert got[("CUDA0 (RTX 4090)", "context")] == (384, 384, False)  # kv + rs
    assert got[("CUDA0 (RTX 4090)", "compute")] == (898, 1000, True)  # +11 %
    assert got[("Host", "context")] == (0, 0, False)
    cpu_only = MemoryEstimate("llama.cpp", "m.gguf", est.components[4:], devices=(HOST,))
    rows, note = ec.compare(report, cpu_only)
    assert note and "not compared" in note
    assert all(r.estimate_mib is None for r in rows if r.device.startswith("CUDA0"))


def test_one_mib_of_rounding_is_not_flagged() -> None:
    assert not ec.CheckRow("Host", "compute", 20, 20.9).flagged
    assert ec.CheckRow("Host", "compute", 20, 22.1).flagged
    assert not ec.CheckRow("Host", "weights", 10000, 10400).flagged
    assert ec.CheckRow("Host", "weights", 10000, 10600).flagged


def test_estimate_engine_check_end_to_end(tmp_path: Path) -> None:
    """The CLI runs the llama-fit-params beside the given llama-server with the arguments
    it takes and prints its recorded table beside the estimate of those arguments."""
    model = model_for("qwen3moe-30b-a3b").write(tmp_path)
    folder = tmp_path / "bin"
    tool = _tool(folder)
    seen = tmp_path / "argv.txt"
    tool.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\ncat {FIXTURES / "qwen3moe-c8192-np2.log"} >&2\n'
    )
    # the recording's CPU (an AVX2 EPYC: the Q4_K experts repacked, nothing in AMX), not
    # whatever CPU runs this test: on an AMX box the estimate would pack the Q4_K attention
    cmd = [
        sys.executable, "-m", "monitor", "estimate", "--cpu-only", "--engine-check",
        "--cpu-features", "avx2",
        "--", str(folder / "llama-server"), "-m", str(model), "-c", "8192", "-np", "2",
        "--port", "8080",
    ]  # fmt: skip
    env = {**os.environ, "LLAMA_ARG_N_PARALLEL": "9"}  # not the command's: stripped
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert seen.read_text().split() == [
        "-m", str(model), "-c", "8192", "-np", "2", "-fit", "off", "-dev", "none", "-lv", "4",
    ]  # fmt: skip
    assert "Host + CPU_REPACK" in out.stdout and "not passed" in out.stdout
    assert "every figure within 5 %" in out.stdout
    js = subprocess.run(
        [*cmd[:4], "--json", *cmd[4:]], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    doc = json.loads(js.stdout)["engine_check"]
    rows = {r["part"]: r for r in doc["rows"]}
    assert rows["weights"]["llama_cpp_mib"] == 8019 + 10854
    assert abs(rows["weights"]["vramscope_mib"] - 18873.15) < 0.01
    assert not any(r["over_5pct"] for r in doc["rows"])
    assert doc["not_passed"] == ["--port", "8080"]


def test_a_tool_that_prints_no_table_is_one_line(tmp_path: Path) -> None:
    model = model_for("qwen3-0.6b").write(tmp_path)
    tool = _tool(tmp_path / "bin")
    tool.write_text("#!/bin/sh\necho 'error: invalid argument: --whatever' >&2\nexit 1\n")
    tool.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP)
    out = subprocess.run(
        [
            sys.executable, "-m", "monitor", "estimate", "--cpu-only", "--engine-check",
            "--", str(tmp_path / "bin" / "llama-server"), "-m", str(model),
        ],  # fmt: skip
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "printed no memory breakdown (exit 1)" in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def _predict(tmp_path: Path, folder: Path, model: Path, *extra: str) -> subprocess.CompletedProcess:
    """``predict`` on this box with only the procfs collector (no GPU, whatever the box
    has): llama-fit-params gets ``-dev none``, the CPU path."""
    cfg = tmp_path / "config.toml"
    cfg.write_text('[collectors]\nenabled = ["procfs"]\n')
    cmd = [
        sys.executable, "-m", "monitor", "predict", "--config", str(cfg),
        "--cpu-features", "avx2", *extra,
        "--", str(folder / "llama-server"), "-m", str(model), "-c", "8192", "-np", "2",
        "--port", "8080",
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_predict_says_its_estimate_was_checked_by_llama_fit_params(tmp_path: Path) -> None:
    """``predict --engine-check`` runs the llama-fit-params beside the server as estimate
    does (recorded table, the CPU path) and says so with the verdict, text and JSON;
    without the flag it runs nothing and says nothing of it."""
    model = model_for("qwen3moe-30b-a3b").write(tmp_path)
    folder = tmp_path / "bin"
    tool = _tool(folder)
    seen = tmp_path / "argv.txt"
    log = FIXTURES / "qwen3moe-c8192-np2.log"
    tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\ncat {log} >&2\n')
    plain = _predict(tmp_path, folder, model, "--json")
    assert plain.returncode in (0, 1, 3, 4), plain.stderr
    assert "engine_check" not in json.loads(plain.stdout)
    assert "llama-fit-params" not in plain.stdout and not seen.exists()

    out = _predict(tmp_path, folder, model, "--engine-check", "--json")
    assert out.returncode in (0, 1, 3, 4), out.stderr
    doc = json.loads(out.stdout)
    check = doc["engine_check"]
    assert check["checked"] is True and check["over_5pct"] == 0
    assert check["line"].startswith(f"checked by llama-fit-params ({tool}): every figure")
    assert check["line"] in doc["notes"]
    assert {r["part"] for r in check["rows"]} == {"weights", "context", "compute"}
    assert "-dev" in seen.read_text().split()  # the CPU path: -dev none
    text = _predict(tmp_path, folder, model, "--engine-check")
    lines = text.stdout.strip().splitlines()
    assert f"note: {check['line']}" in lines
    assert lines[-1].startswith("verdict: ")


def test_predict_says_why_llama_fit_params_did_not_check_it(tmp_path: Path) -> None:
    """No llama-fit-params beside the server, or one writable by others: the verdict is
    given and says why it was not checked; with --remote the flag is one line, exit 2."""
    model = model_for("qwen3-0.6b").write(tmp_path)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "llama-server").write_text("#!/bin/sh\n")
    (bare / "llama-server").chmod(0o755)
    unsafe = tmp_path / "unsafe"
    _tool(unsafe, stat.S_IRWXU | stat.S_IRWXG)
    for folder, why in (
        (bare, f"no llama-fit-params beside the server in {bare}"),
        (unsafe, "writable by others; not run"),
    ):
        out = _predict(tmp_path, folder, model, "--engine-check", "--json")
        assert out.returncode in (0, 1, 3, 4), out.stderr
        check = json.loads(out.stdout)["engine_check"]
        assert check["checked"] is False
        assert check["line"].startswith("not checked by llama-fit-params: ")
        assert why in check["line"], check["line"]
        assert "rows" not in check
    remote = subprocess.run(
        [
            sys.executable, "-m", "monitor", "predict", "--engine-check", "--remote",
            "http://127.0.0.1:9", "--", "llama-server", "-m", str(model),
        ],  # fmt: skip
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert remote.returncode == 2
    assert remote.stderr.strip().splitlines() == [
        "vramscope: error: --engine-check judges on this box; with --remote each box's "
        "daemon judges against its own state (leave it out)"
    ]
