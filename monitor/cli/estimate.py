"""The work behind ``vramscope estimate``: command or pid in, rendered estimate out."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys

from collectors.base import CollectorOptions
from collectors.procfs import parse_cmdline
from monitor.config import Config
from monitor.estimate import EstimateError, estimate_command
from monitor.estimate.model import DeviceInfo, devices_from_samples
from monitor.report.estimate import compare_with_log, render_comparison, render_text, to_json


def live_devices(cfg: Config) -> list[DeviceInfo]:
    """The GPUs the collectors see now, with their free memory (host RAM is implicit)."""
    from monitor.daemon.sampler import Sampler

    wanted = [n for n in ("nvml", "drm", "amdsmi") if cfg.collectors is None or n in cfg.collectors]
    sampler = Sampler(cfg.roots, CollectorOptions(), wanted)
    try:
        snap = sampler.sample()
    finally:
        sampler.close()
    return devices_from_samples(snap.devices, cfg.gpu_overhead_mib * 1024 * 1024)


def argv_of(cfg: Config, pid: int) -> tuple[list[str], dict[str, str]]:
    """A running process's command line and allow-listed environment."""
    from collectors import _fs
    from monitor.engines import read_llama_env

    try:
        raw = _fs.read_bytes(cfg.roots.proc / str(pid) / "cmdline")
    except OSError as exc:
        raise EstimateError(
            f"cannot read the command line of pid {pid}: {exc.strerror or exc}"
        ) from None
    argv = list(parse_cmdline(raw))
    if not argv:
        raise EstimateError(f"pid {pid} has no command line (a kernel thread or a zombie)")
    return argv, read_llama_env(cfg.roots.proc, pid)


def cwd_of(cfg: Config, pid: int) -> str | None:
    """The target of ``/proc/PID/cwd`` (readlink only, never followed): what the server's
    relative paths (``-m x.gguf``) are relative to; None when it cannot be read."""
    from collectors.procfs import read_cwd

    return read_cwd(str(cfg.roots.proc / str(pid) / "cwd"))


def refused_values(command: list[str], env: dict[str, str] | None = None) -> tuple[str, ...]:
    """One line per value the engine would refuse or misread (``-c abc``)."""
    from monitor.engines import parse_command

    spec = parse_command(command, env)
    return spec.refused if spec is not None else ()


def refuse_bad_values(command: list[str]) -> None:
    """Stop on the first value the engine would refuse or misread."""
    refused = refused_values(command)
    if refused:
        raise EstimateError(refused[0])


def run_estimate(
    cfg: Config,
    command: list[str],
    pid: int | None,
    as_json: bool,
    cpu_only: bool,
    log_path: str | None = None,
) -> str:
    if pid is not None and command:
        raise EstimateError("give either --pid or a command after --, not both")
    env = cwd = None
    if pid is not None:
        command, env = argv_of(cfg, pid)
        cwd = cwd_of(cfg, pid)
    if not command:
        raise EstimateError("nothing to estimate: give a command after -- or --pid N")
    if pid is None:  # typed by the user: a value the engine refuses is an error here
        refuse_bad_values(command)
    devices = [] if cpu_only else live_devices(cfg)
    est = estimate_command(command, env, devices, cwd=cwd)
    if pid is not None:  # a running process: its odd values were skipped; say which
        skipped = tuple(f"skipped the process's {r}" for r in refused_values(command, env))
        est = dataclasses.replace(est, notes=est.notes + skipped)
    rows = None
    if log_path is not None:
        from monitor.logs.engine import parse_llama_log

        try:
            with open(log_path, encoding="utf-8", errors="replace") as handle:
                report = parse_llama_log(handle)
        except OSError as exc:
            raise EstimateError(f"cannot read the log {log_path}: {exc.strerror}") from None
        if not report.buffers and not report.kv:
            raise EstimateError(
                f"{log_path}: no llama.cpp memory lines in this log (the '... buffer size = "
                "N MiB' and 'llama_kv_cache: size = ...' lines llama-server prints as it "
                "loads); nothing to compare"
            )
        rows = compare_with_log(est, report)
    if as_json:
        doc = to_json(est)
        if rows is not None:
            doc["reported_by_llama_cpp"] = rows
        return json.dumps(doc, indent=2)
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    text = render_text(est, width)
    return text + render_comparison(rows) if rows is not None else text
