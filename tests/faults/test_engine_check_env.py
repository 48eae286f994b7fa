"""``estimate --pid N --engine-check`` on a hostile target (issue 28, item 1).

A real target process whose command line reads ``env LD_PRELOAD=... FOO=1 ./llama-server
-m m.gguf`` (``/bin/sh`` run under the name ``env``, so the words stay in its
``/proc/PID/cmdline``), a real fake ``llama-fit-params`` (a shell script that writes the
environment and uid it got) beside a fake ``llama-server``, and the real CLI. The child
must see none of the target's words; another user's target is refused.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import cli_runner
import pytest
from arch_models import model_for
from unprivileged import NOBODY

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "fixtures" / "llamalog" / "fit-params" / "qwen3moe-c8192-np2.log"


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    """The server's folder (0755, ours) with a fake llama-server and llama-fit-params."""
    folder = tmp_path / "srv"
    folder.mkdir(mode=0o755)
    model_for("qwen3-0.6b").write(folder).rename(folder / "m.gguf")
    (folder / "llama-server").write_text("#!/bin/sh\nsleep 30\n")
    (folder / "llama-server").chmod(0o755)
    seen = tmp_path / "seen.txt"
    tool = folder / "llama-fit-params"
    tool.write_text(f"#!/bin/sh\n{{ id -u; env; }} > {seen}\ncat {LOG} >&2\n")
    tool.chmod(0o755)
    return folder, seen


def _target(folder: Path, as_nobody: bool) -> subprocess.Popen[bytes]:
    argv = [
        "env", "-c", "sleep 30; :", "LD_PRELOAD=/tmp/x/evil.so", "FOO=1",
        "LLAMA_ARG_CTX_SIZE=2048", "./llama-server", "-m", "m.gguf",
    ]  # fmt: skip
    extra = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if as_nobody else {}
    return subprocess.Popen(argv, executable="/bin/sh", cwd=folder, **extra)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def _estimate(pid: int) -> subprocess.CompletedProcess[str]:
    return cli_runner.vramscope("estimate", "--cpu-only", "--engine-check", "--pid", str(pid))


@pytest.mark.skipif(os.geteuid() != 0, reason="the issue is a root vramscope")
def test_the_child_gets_none_of_the_targets_environment_words(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    folder, seen = _folder(tmp_path)
    target = _target(folder, as_nobody=False)
    started.append(target)
    out = _estimate(target.pid)
    assert out.returncode == 0, out.stderr
    got = seen.read_text().splitlines()
    env = dict(line.partition("=")[::2] for line in got[1:] if "=" in line)
    assert got[0] == "0"
    assert "LD_PRELOAD" not in env and "FOO" not in env, env
    assert env.get("LLAMA_ARG_CTX_SIZE") == "2048"  # an allow-listed key still goes
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "HOME", "LLAMA_ARG_CTX_SIZE", "PWD", "SHLVL"}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as nobody")
def test_another_users_target_is_refused_in_one_line(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    folder, seen = _folder(tmp_path)
    target = _target(folder, as_nobody=True)
    started.append(target)
    out = _estimate(target.pid)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"runs as uid {NOBODY}" in lines[0], out.stderr
    assert not seen.exists()  # never run


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership checks as root")
def test_a_tool_in_a_folder_others_can_write_is_not_run(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    folder, seen = _folder(tmp_path)
    folder.chmod(0o777)  # anyone could swap the binary between the check and the run
    target = _target(folder, as_nobody=False)
    started.append(target)
    out = _estimate(target.pid)
    assert out.returncode != 0 and "writable by others" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not seen.exists()
