"""One-shot commands import only what they need (issue 32 item 4), pinned without timing:
each command runs in a fresh interpreter and reports which heavy modules it loaded.

- ``status`` / ``status --json`` / ``predict``: no Textual, APScheduler, Jinja2,
  prometheus_client, sqlite-utils; ``predict`` also no ``gguf`` package (its ``__init__``
  imports numpy and yaml: monitor/gguf/ggml_types.py loads only its type tables).
- ``--help``: not even the collectors (pynvml), nor collectors.base (16 dataclasses and
  the collector threads' concurrent.futures: the config builds its Roots on first use).
- No command that works loads what only a failure, a config file or another command
  needs: ``logging`` on the CLI's edge (only a bug logs; the NVML collector's own logger
  still loads it for status/predict), ``tomllib`` (no config file here), monitor.exits on
  ``status`` (only an exited process is classified).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_models

ROOT = Path(__file__).resolve().parents[3]

HEAVY = ("textual", "apscheduler", "jinja2", "prometheus_client", "sqlite_utils")

PROBE = """
import contextlib, io, json, sys
from monitor.cli.main import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        cli.main(sys.argv[1:], prog_name="vramscope", standalone_mode=False)
    except SystemExit:
        pass
print(json.dumps({"modules": sorted(sys.modules), "out": out.getvalue()[:2000]}))
"""


def loaded(args: list[str], cwd: Path) -> tuple[set[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout.splitlines()[-1])
    return set(doc["modules"]), doc["out"]


def tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("args", [["status"], ["status", "--json"]])
def test_status_leaves_the_heavy_libraries_out(tmp_path: Path, args: list[str]) -> None:
    modules, out = loaded(args, tmp_path)
    assert "monitor.report.status" in modules and out  # it did run status
    assert not tops(modules) & set(HEAVY)
    assert "tui" not in tops(modules)


def test_a_cold_predict_leaves_numpy_and_the_gguf_package_out(tmp_path: Path) -> None:
    tiny_models.write_llama(tmp_path / "x.gguf")
    modules, out = loaded(
        ["predict", "--json", "--", "llama-server", "-m", "x.gguf", "-c", "512"], tmp_path
    )
    assert "monitor.estimate.llamacpp" in modules and "vramscope.predict" in out
    assert not tops(modules) & {*HEAVY, "gguf", "numpy", "yaml"}


def test_help_loads_no_collector(tmp_path: Path) -> None:
    modules, out = loaded(["--help"], tmp_path)
    assert "status" in out
    assert "collectors.registry" not in modules and "pynvml" not in modules
    assert not modules & {"collectors.base", "concurrent.futures", "logging", "tomllib"}


@pytest.mark.parametrize("args", [["status"], ["status", "--json"]])
def test_status_without_config_or_exits_loads_neither(tmp_path: Path, args: list[str]) -> None:
    modules, out = loaded(args, tmp_path)
    assert "monitor.report.status" in modules and out
    assert not modules & {"tomllib", "monitor.exits", "monitor.estimate", "monitor.http"}


def test_a_config_file_still_loads_tomllib(tmp_path: Path) -> None:
    """The other side of the lazy import: a config file is still read and checked."""
    (tmp_path / "vs.toml").write_text("[collectors]\ntop_n = 3\n")
    modules, out = loaded(["--config", "vs.toml", "status", "--json"], tmp_path)
    assert "tomllib" in modules and out.startswith("{")
    (tmp_path / "bad.toml").write_text("[collectors]\ntop_n = 'x'\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "--config", "bad.toml", "status"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "top_n" in done.stderr and "Traceback" not in done.stderr


def test_a_cold_predict_loads_no_config_reader_or_status_renderer(tmp_path: Path) -> None:
    tiny_models.write_llama(tmp_path / "x.gguf")
    modules, out = loaded(
        ["predict", "--json", "--", "llama-server", "-m", "x.gguf", "-c", "512"], tmp_path
    )
    assert "vramscope.predict" in out
    assert not modules & {"tomllib", "monitor.exits", "monitor.report.status", "monitor.http"}
