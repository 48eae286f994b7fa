"""``--config`` pointing at something that is not a small TOML file (issue 28, item 11):
``/dev/zero``, a FIFO nobody writes to, a 2 MiB file, a deeply nested TOML. The real CLI
must end non-zero within seconds with one line on stderr, never grow, hang or trace back."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cli_runner
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _status(config: Path | str) -> subprocess.CompletedProcess[str]:
    return cli_runner.vramscope("status", "--config", str(config))


def _one_line(out: subprocess.CompletedProcess[str], *words: str) -> None:
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_dev_zero_is_refused() -> None:
    _one_line(_status("/dev/zero"), "not a regular file")


def test_dev_null_is_an_empty_config() -> None:
    out = _status("/dev/null")
    assert "config" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    _one_line(_status(fifo), "not a regular file")


def test_a_file_over_one_mib_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "config.toml"
    big.write_text("# padding\n" * ((2 << 20) // 10) + "[http]\n")
    assert big.stat().st_size >= 2 << 20
    _one_line(_status(big), "larger than")


@pytest.mark.parametrize(
    "value",
    ["[" * 100_000 + "]" * 100_000, "{a = " * 5000 + "1" + "}" * 5000],
    ids=["arrays", "inline-tables"],
)
def test_deeply_nested_toml_is_one_line(tmp_path: Path, value: str) -> None:
    deep = tmp_path / "config.toml"
    deep.write_text(f"[http]\nlisten = {value}\n")
    _one_line(_status(deep), "nested too deeply")
