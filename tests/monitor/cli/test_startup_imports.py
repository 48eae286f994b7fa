"""One-shot commands import only what they need (issue 32 item 4), pinned without timing:
each command runs in a fresh interpreter and reports which heavy modules it loaded.

- ``status`` / ``status --json`` / ``predict``: no Textual, APScheduler, Jinja2,
  prometheus_client, sqlite-utils; ``predict`` also no ``gguf`` package (its ``__init__``
  imports numpy and yaml: monitor/gguf/ggml_types.py loads only its type tables).
- ``--help``: not even the collectors (pynvml), nor collectors.base (16 dataclasses and
  the collector threads' concurrent.futures: the config builds its Roots on first use).
- No command that works loads what only a failure, a config file or another command
  needs: ``logging`` (only a bug logs on the CLI's edge; the NVML collector's debug lines
  use it only where a program loaded it; the collector threads do without
  concurrent.futures, which loads it), ``tomllib (no config file here), monitor.exits on
  ``status`` (only an exited process is classified).
- Each command imports only its own command module (monitor/cli/main.py COMMANDS); a cold
  ``predict`` not monitor/cli/estimate.py (only --cpu-features/--engine-check use it);
  ``--help`` no ``traceback`` (--debug's); a plain ``status`` no ``json``.
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
import contextlib, io, os, sys
if os.environ.get("PROBE_NVML"):  # the fake driver (tests/fakes/nvml_fake.py): one idle GPU
    import json, nvml_fake
    nvml_fake.install(json.loads(os.environ["PROBE_NVML"]))
from monitor.cli.main import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        cli.main(sys.argv[1:], prog_name="vramscope", standalone_mode=False)
    except SystemExit:
        pass
modules = sorted(sys.modules)  # before the probe's own imports below
import dataclasses, json
built = sorted(
    obj.__qualname__
    for name, module in list(sys.modules.items())
    if name.split(".")[0] in ("collectors", "monitor")
    for obj in list(vars(module).values())
    if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == name
)
print(json.dumps({"modules": modules, "out": out.getvalue()[:2000], "built": built}))
"""


def run_probe(
    args: list[str], cwd: Path, extra_env: dict[str, str] | None = None
) -> dict[str, list[str] | str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd), **(extra_env or {})}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    doc: dict[str, list[str] | str] = json.loads(done.stdout.splitlines()[-1])
    return doc


def loaded(args: list[str], cwd: Path) -> tuple[set[str], str]:
    doc = run_probe(args, cwd)
    return set(doc["modules"]), str(doc["out"])


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


# Dataclasses a live ``status`` / cold ``predict`` with nothing odd on the box never uses
# (issue 32 item 4, bench/RESULTS.md "Fourth pass"): each costs ~1 ms to build at import,
# so each sits in a module imported only when one is needed.
UNUSED_BY_A_LIVE_LOOK = {
    # collectors/base_rare.py: a hidden, exited or cgroup-limited process, a device event,
    # a pool filling towards OOM
    "HiddenProcess", "ExitedProcess", "DeviceEvent", "ProcessCgroup", "OomForecast",
    # monitor/analysis/origins.py: the box state from a file, the database, a daemon
    "StatusFile", "DatabaseMoment", "Remote", "Daemon",
    # monitor/servers/recognise_table.py, router_types.py
    "EngineMatch", "_Scope", "Router", "RouterChild",
    # collectors/drm.py, amdsmi.py: no AMD/Intel card, no amdsmi package (collectors/probes.py)
    "DrmDevice", "ClientMemory", "ClientRef", "_PidScan", "_Gpu", "_Entry",
}  # fmt: skip


# One H100 with no process on it (the fake driver), a /proc of only meminfo and an empty
# /sys: what the box runs (another engineer's router, a zombie, an AMD card) cannot add a
# class; the live look still samples, judges and renders.
IDLE_GPU = {
    "driver": "550.54.15",
    "devices": [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-test-0000-1111-2222-333344445555",
            "bus_id": "00000000:18:00.0",
            "memory": {"total": 85520809984, "used": 629145600, "free": 84891664384},
            "util": {"gpu": 0, "memory": 0},
            "temp_c": 30,
            "power_mw": 70000,
            "mig": [0, 0],
            "event_types": 0,
            "compute": [],
            "graphics": [],
        }
    ],
}


def quiet_box(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    (tmp_path / "proc").mkdir()
    (tmp_path / "sys").mkdir()
    (tmp_path / "proc/meminfo").write_bytes(Path("/proc/meminfo").read_bytes())
    roots = ["--proc-root", str(tmp_path / "proc"), "--sys-root", str(tmp_path / "sys")]
    env = {"PROBE_NVML": json.dumps(IDLE_GPU), "PYTHONPATH": f"{ROOT}:{ROOT}/tests/fakes"}
    return roots, env


@pytest.mark.parametrize("args", [["status"], ["status", "--json"]])
def test_status_builds_no_dataclass_it_does_not_use(tmp_path: Path, args: list[str]) -> None:
    roots, env = quiet_box(tmp_path)
    doc = run_probe([*args, *roots], tmp_path, env)
    built = set(doc["built"])
    assert "Snapshot" in built and "BoxState" in built and "H100" in str(doc["out"])
    assert not built & UNUSED_BY_A_LIVE_LOOK, sorted(built & UNUSED_BY_A_LIVE_LOOK)
    modules = set(doc["modules"])
    assert not modules & {"collectors.drm", "collectors.amdsmi"}


def test_a_cold_predict_builds_no_class_it_does_not_use(tmp_path: Path) -> None:
    tiny_models.write_llama(tmp_path / "x.gguf")
    roots, env = quiet_box(tmp_path)
    argv = ["predict", "--json", *roots, "--", "llama-server", "-m", "x.gguf", "-c", "512"]
    doc = run_probe(argv, tmp_path, env)
    built = set(doc["built"])
    assert "vramscope.predict" in doc["out"] and "PredictResult" in built
    assert "GPU-test-0000" in str(doc["out"])  # judged against the idle GPU
    # the roofline (no --throughput); a fix or llama.cpp's own fit (it fits, -c given);
    # --engine-check's result
    unused = UNUSED_BY_A_LIVE_LOOK | {"DevicePeak", "Work", "Speculation", "Fix", "LlamaFit"}
    unused |= {"PredictCheck"}
    assert not built & unused, sorted(built & unused)
    assert "monitor.analysis.throughput" not in set(doc["modules"])


# Each command's module is imported when that command runs (monitor/cli/main.py COMMANDS):
# the other commands' modules, their options and help are not built (issue 32 item 4,
# bench/RESULTS.md "Fifth pass").
COMMAND_MODULES = {
    f"monitor.cli.{m}"
    for m in ("commands_box", "commands_predict", "commands_history", "commands_admin")
}


@pytest.mark.parametrize("args", [["status"], ["status", "--json"]])
def test_status_imports_only_its_own_commands_module(tmp_path: Path, args: list[str]) -> None:
    modules, out = loaded(args, tmp_path)
    assert "monitor.cli.commands_box" in modules and out
    assert not modules & (COMMAND_MODULES - {"monitor.cli.commands_box"})


def test_a_cold_predict_loads_neither_other_commands_nor_estimates_cli(tmp_path: Path) -> None:
    """predict's --cpu-features and --engine-check take their helpers from
    monitor/cli/estimate.py; without them it is not loaded (nor estimate's renderer)."""
    tiny_models.write_llama(tmp_path / "x.gguf")
    modules, out = loaded(
        ["predict", "--json", "--", "llama-server", "-m", "x.gguf", "-c", "512"], tmp_path
    )
    assert "vramscope.predict" in out and "monitor.cli.commands_predict" in modules
    assert not modules & (COMMAND_MODULES - {"monitor.cli.commands_predict"})
    assert not modules & {"monitor.cli.estimate", "monitor.report.estimate"}


def test_predict_with_cpu_features_still_parses_them(tmp_path: Path) -> None:
    """The other side: --cpu-features loads estimate's parser and its refusal stays."""
    tiny_models.write_llama(tmp_path / "x.gguf")
    argv = ["predict", "--json", "--cpu-features", "avx2", "--"]
    modules, out = loaded([*argv, "llama-server", "-m", "x.gguf", "-c", "512"], tmp_path)
    assert "vramscope.predict" in out and "monitor.cli.estimate" in modules
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "monitor", *argv[:2], "--cpu-features", "avx9000", "--"]
        + ["llama-server", "-m", "x.gguf", "-c", "512"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "avx9000" in done.stderr and "Traceback" not in done.stderr


def test_help_loads_no_traceback_module(tmp_path: Path) -> None:
    """traceback is for --debug's traceback of a bug only (linecache and tokenize come
    with click's inspect anyway)."""
    modules, out = loaded(["--help"], tmp_path)
    assert "predict" in out
    assert "traceback" not in modules


def test_plain_status_loads_no_json_and_status_json_still_prints_it(tmp_path: Path) -> None:
    modules, out = loaded(["status"], tmp_path)
    assert "DEVICE" in out
    assert not modules & {"json.decoder", "json.encoder", "json.scanner"}
    modules, out = loaded(["status", "--json"], tmp_path)
    assert out.startswith("{") and '"schema": "vramscope.status/' in out


@pytest.mark.parametrize("args", [["status"], ["predict", "--json"]])
def test_a_live_look_loads_neither_logging_nor_concurrent_futures(
    tmp_path: Path, args: list[str]
) -> None:
    """The collector threads hand results back without concurrent.futures (its import
    loads logging), and the NVML collector's debug lines need logging only where a
    program loaded it (the daemon): ~30 M instructions of each (bench/RESULTS.md "Sixth
    pass"). The fake GPU makes the NVML collector run (and log its device count)."""
    tiny_models.write_llama(tmp_path / "x.gguf")
    roots, env = quiet_box(tmp_path)
    model = ["--", "llama-server", "-m", "x.gguf", "-c", "512"] if args[0] == "predict" else []
    doc = run_probe([*args, *roots, *model], tmp_path, env)
    assert "H100" in str(doc["out"]) or "GPU-test-0000" in str(doc["out"])
    modules = set(doc["modules"])
    assert "collectors.nvml" in modules and "collectors.base" in modules
    assert not modules & {"logging", "concurrent.futures", "concurrent.futures._base"}
