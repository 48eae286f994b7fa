"""monitor/servers/server_help.py: predict asks the llama-server a launch names which flags
it takes, and refuses (exit 2, the engine's own words) a flag that build would refuse.

The help text is the real ``llama-server --help`` of the build this project makes
(llama.cpp 0c1e57098, tests/fixtures/llamalog/llama-server-help-0c1e57098.txt); the binary
is a script that prints it, so the real subprocess, permission and cache paths run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf_models as g
import pytest

from monitor.servers.server_help import parse_help, server_flags, unknown_flags

ROOT = Path(__file__).resolve().parents[3]
HELP = ROOT / "tests" / "fixtures" / "llamalog" / "llama-server-help-0c1e57098.txt"


def test_the_real_help_lists_every_name_of_every_option() -> None:
    flags = parse_help(HELP.read_text())
    assert {"-c", "--ctx-size", "-lm", "--load-mode", "-nr", "--no-repack", "--repack"} <= flags
    assert {"--spec-draft-hf", "-hfd", "--hf-repo-draft", "-h", "--help", "--usage"} <= flags
    assert "--no-mmap" not in flags and "--mlock" not in flags  # gone in this build
    assert not {f for f in flags if not f.startswith("-") or f in ("N", "FNAME")}


def fake_server(folder: Path, mode: int = 0o755) -> Path:
    """A 'llama-server' that prints the real help and counts how often it was asked."""
    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / "llama-server"
    binary.write_text(
        f'#!/bin/sh\necho run >> "{folder}/runs"\n'
        f'[ "$1" = "--help" ] && exec cat "{HELP}"\necho "error: invalid argument: $1"; exit 1\n'
    )
    binary.chmod(mode)
    return binary


def test_flags_are_read_once_per_binary_version_and_unknown_ones_named(tmp_path: Path) -> None:
    binary = fake_server(tmp_path / "bin")
    known = server_flags(binary)
    assert known is not None and server_flags(binary) == known
    assert (tmp_path / "bin" / "runs").read_text().count("run") == 1  # cached
    argv = ["llama-server", "-m", "m.gguf", "--no-mmap", "-ngl", "-1", "--ctx_size=4096"]
    assert unknown_flags(argv, known) == ["--no-mmap"]
    os.utime(binary, ns=(0, 10**9))  # another mtime: asked again
    assert server_flags(binary) == known
    assert (tmp_path / "bin" / "runs").read_text().count("run") == 2


def test_a_binary_anyone_may_change_is_never_run(tmp_path: Path) -> None:
    writable = fake_server(tmp_path / "w", 0o777)
    assert server_flags(writable) is None
    link = tmp_path / "l" / "llama-server"
    link.parent.mkdir()
    link.symlink_to(fake_server(tmp_path / "real"))
    assert server_flags(link) is None
    assert not (tmp_path / "w" / "runs").exists()


def predict(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "monitor", "predict", *args],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip


@pytest.fixture
def launch(tmp_path: Path) -> list[str]:
    metadata, tensors = g.qwen3_8b(n_layer=2)
    model = g.write_model(tmp_path / "m.gguf", "qwen3", metadata, tensors, vocab_size=151936)[0]
    return [str(fake_server(tmp_path / "bin")), "-m", str(model), "-c", "4096", "-np", "1"]


def test_predict_refuses_a_flag_the_named_build_would_refuse(launch: list[str]) -> None:
    refused = predict("--", *launch, "--no-mmap")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "error: invalid argument: --no-mmap" in refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    taken = predict("--", *launch, "-lm", "none")
    assert taken.returncode in (0, 1, 3, 4), taken.stderr
    assert "verdict:" in taken.stdout


def test_without_a_binary_to_ask_the_built_in_table_stands(launch: list[str]) -> None:
    # a binary that is not there: nothing to run, the launch is judged by the built-in
    # table (which still knows the older builds' --no-mmap)
    judged = predict("--", "/nonexistent/bin/llama-server", *launch[1:], "--no-mmap")
    assert judged.returncode in (0, 1, 3, 4), judged.stderr
    assert "verdict:" in judged.stdout
