"""The work behind ``vramscope estimate``: command or pid in, rendered estimate out."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from collectors.base import CollectorOptions, Snapshot
from collectors.cpuinfo import LLAMA_CPU_FEATURES, llama_cpu_features, read_cpu_flags
from collectors.procfs import parse_cmdline
from monitor.config import Config
from monitor.estimate import CpuFeatures, EstimateError, estimate_command, features_of
from monitor.estimate.model import DeviceInfo, devices_from_samples
from monitor.report.estimate import (
    compare_with_log,
    render_comparison,
    render_measured,
    render_text,
    to_json,
)

if TYPE_CHECKING:
    from monitor.analysis.predict_request import PredictRequest
    from monitor.cli.engine_check import EngineCheck, PredictCheck


def live_snapshot(cfg: Config, gpus: bool = True, processes: bool = False) -> Snapshot:
    """One tick of the collectors this needs: the GPUs (``gpus``) and the processes'
    host memory (``processes``, the procfs collector)."""
    from monitor.daemon.sampler import Sampler

    names = (("nvml", "drm", "amdsmi") if gpus else ()) + (("procfs",) if processes else ())
    wanted = [n for n in names if cfg.collectors is None or n in cfg.collectors]
    sampler = Sampler(cfg.roots, CollectorOptions(), wanted)
    try:
        return sampler.sample()
    finally:
        sampler.close()


def live_devices(cfg: Config, snap: Snapshot | None = None) -> list[DeviceInfo]:
    """The GPUs the collectors see now, with their free memory (host RAM is implicit)."""
    snap = snap if snap is not None else live_snapshot(cfg)
    return devices_from_samples(snap.devices, cfg.gpu_overhead_mib * 1024 * 1024)


def measured_now(snap: Snapshot, pid: int) -> dict[str, int | None]:
    """What the running server ``pid`` holds on each device in ``snap`` (its forked
    helpers' GPU memory included: monitor/analysis/measured.py)."""
    from monitor.analysis.measured import measured_by_device
    from monitor.servers.recognise import helper_parents

    helpers = helper_parents({p.pid: p for p in snap.processes})
    return measured_by_device(pid, snap.memory, [h for h, top in helpers.items() if top == pid])


def argv_of(cfg: Config, pid: int) -> tuple[list[str], dict[str, str]]:
    """A running process's command line and allow-listed environment."""
    from collectors import _fs
    from monitor.servers import read_llama_env

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
    from monitor.servers import parse_command

    spec = parse_command(command, env)
    return spec.refused if spec is not None else ()


def refuse_bad_values(command: list[str]) -> None:
    """Stop on the first value the engine would refuse or misread."""
    refused = refused_values(command)
    if refused:
        raise EstimateError(refused[0])


def box_cpu(cfg: Config, given: str | None = None) -> CpuFeatures | None:
    """The CPU features llama.cpp repacks for: ``--cpu-features LIST`` when given, else the
    box's (or the --proc-root tree's)."""
    if given is None:
        return features_of(llama_cpu_features(read_cpu_flags(cfg.roots)))
    return features_of(parse_cpu_features(given))


def parse_cpu_features(given: str) -> tuple[str, ...]:
    """``--cpu-features amx_int8,avx2`` / ``none``; EstimateError naming the known ones."""
    words = [w.strip() for w in given.split(",") if w.strip()]
    if words == ["none"]:
        return ()
    unknown = [w for w in words if w not in LLAMA_CPU_FEATURES]
    if unknown or not words:
        raise EstimateError(
            f"--cpu-features {given!r}: expected a comma-separated list of "
            f"{', '.join(LLAMA_CPU_FEATURES)}, or none"
        )
    return tuple(f for f in LLAMA_CPU_FEATURES if f in words)


def run_estimate(
    cfg: Config,
    command: list[str],
    pid: int | None,
    as_json: bool,
    cpu_only: bool,
    log_path: str | None = None,
    engine_check: bool = False,
    cpu_features: str | None = None,
) -> str:
    if pid is not None and command:
        raise EstimateError("give either --pid or a command after --, not both")
    env = cwd = None
    if pid is not None:
        command, env = argv_of(cfg, pid)
        cwd = cwd_of(cfg, pid)
    if not command:
        raise EstimateError("nothing to estimate: give a command after -- or --pid N")
    if pid is not None and engine_check:
        from monitor.cli.engine_check import refuse_foreign

        refuse_foreign(cfg.roots.proc, pid)
    if pid is None:  # typed by the user: a value the engine refuses is an error here
        refuse_bad_values(command)
    sampled = not cpu_only or pid is not None  # --cpu-only and a typed command: no tick
    snap = live_snapshot(cfg, gpus=not cpu_only, processes=pid is not None) if sampled else None
    devices = [] if cpu_only or snap is None else live_devices(cfg, snap)
    measured = measured_now(snap, pid) if pid is not None and snap is not None else None
    cpu = box_cpu(cfg, cpu_features)
    if env is None:  # a typed command: -hf is looked up in this user's llama.cpp cache
        from monitor.servers.hf_cache import own_cache_env

        env = own_cache_env()
    est = estimate_command(command, env, devices, cwd=cwd, cpu=cpu)
    if pid is not None:  # a running process: its odd values were skipped; say which
        skipped = tuple(f"skipped the process's {r}" for r in refused_values(command, env))
        est = dataclasses.replace(est, notes=est.notes + skipped)
    rows = None
    if log_path is not None:
        from monitor.logs.server_log import parse_llama_log

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
    check = check_with_engine(command, env, cwd, devices, cpu_only, cpu) if engine_check else None
    if as_json:
        doc = to_json(est)
        if measured is not None:
            doc["measured_now"] = {"pid": pid, "by_device": measured}
        if rows is not None:
            doc["reported_by_llama_cpp"] = rows
        if check is not None:
            from monitor.cli import engine_check as ec

            doc["engine_check"] = ec.to_json(check)
        return json.dumps(doc, indent=2)
    import shutil  # with bz2 and lzma: only for a terminal's width

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    text = render_text(est, width)
    if measured is not None and pid is not None and snap is not None:
        from monitor.device_names import device_labels

        labels = device_labels((d.device_id, d.name) for d in snap.devices)
        text += render_measured(est, measured, labels, pid)
    if rows is not None:
        text += render_comparison(rows)
    if check is not None:
        from monitor.cli import engine_check as ec

        text += ec.render(check)
    return text


def check_with_engine(
    command: list[str],
    env: dict[str, str] | None,
    cwd: str | None,
    devices: list[DeviceInfo],
    cpu_only: bool,
    cpu: CpuFeatures | None = None,
) -> EngineCheck:
    """llama-fit-params beside the server, on the arguments it takes, against the
    estimate of those same arguments (monitor/cli/engine_check.py)."""
    import os

    from monitor.cli import engine_check as ec
    from monitor.servers import parse_command
    from monitor.servers.recognise import unwrapped_command

    argv, merged = unwrapped_command(command, env)
    spec = parse_command(command, env, cwd=cwd)
    if spec is None or spec.engine != "llama.cpp":
        raise EstimateError("--engine-check needs a llama.cpp server command (llama-server ...)")
    binary = ec.fit_params_beside(argv[0], cwd)
    args, not_passed = ec.fit_params_args(argv, spec.n_parallel or 4)
    if cpu_only:
        args += ["-dev", "none"]
    mine = estimate_command(
        ["llama-server", *args], merged, devices, outputs="batch", cwd=cwd, cpu=cpu
    )
    report = ec.run_fit_params(binary, args, ec.child_env(merged, os.environ), cwd)
    rows, note = ec.compare(report, mine)
    notes = (
        "llama-fit-params reserves logits for n_batch outputs (llama-server for np x "
        "(1 + n_draft)): the vramscope column is the estimate of these arguments at that "
        "count, not the llama-server estimate above",
    )
    return ec.EngineCheck(
        str(binary), tuple(args), tuple(not_passed), rows, notes + ((note,) if note else ())
    )


def check_predicted_launch(
    cfg: Config, req: PredictRequest, cpu_features: str | None
) -> PredictCheck:
    """Run llama-fit-params on the launch ``predict`` judged, under the rules of ``estimate
    --engine-check`` (the binary beside the named llama-server, safe to run, on the options
    it takes; :func:`check_with_engine`), or say why it did not: a llama-swap MODEL_ID (its
    command is llama-swap's, not run here), a recorded box state (``--state``/``--at``:
    llama-fit-params measures this box now), or the check's own one-line reason."""
    from monitor.cli.engine_check import PredictCheck  # only with --engine-check
    from monitor.errors import VramscopeError

    why = None
    if req.model_id is not None:
        why = f"llama-swap model {req.model_id}: give the command after -- to check it"
    elif req.state is not None or req.at is not None:
        why = "the verdict judges a recorded box state (--state/--at); it measures this box"
    if why is not None:
        return PredictCheck(False, f"not checked by llama-fit-params: {why}")
    argv = req.command[1:] if req.command[:1] == ["--"] else req.command
    try:
        devices = live_devices(cfg)
        check = check_with_engine(
            argv, None, None, devices, not devices, box_cpu(cfg, cpu_features)
        )
    except VramscopeError as exc:
        reason = str(exc).removeprefix("--engine-check: ")
        return PredictCheck(False, f"not checked by llama-fit-params: {reason}")
    flagged = [r for r in check.rows if r.flagged]
    if not flagged:
        said = "every figure within 5 % (or the 1 MiB its table rounds to)"
    else:
        said = f"{len(flagged)} figure(s) more than 5 % apart: " + "; ".join(
            f"{r.device} {r.part} llama.cpp {r.engine_mib} MiB, vramscope {r.estimate_mib:.2f} MiB"
            for r in flagged[:3]
        )
    return PredictCheck(True, f"checked by llama-fit-params ({check.binary}): {said}", check)
