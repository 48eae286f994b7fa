"""Estimate what a launch should cost, per component and device (estimation.md section 8).

``estimate(spec, devices)`` works from a parsed :class:`LaunchSpec`;
``estimate_command(argv)`` parses a command line first. Engines: llama.cpp / llama-server
and ollama's llama-server child (the same binary: ollama passes ``-c NumCtx x parallel``), and
vLLM / SGLang (a share of each GPU, whatever the model).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from monitor.estimate.kv import EstimateError
from monitor.estimate.llamacpp import estimate_llamacpp
from monitor.estimate.model import ESTIMATOR_VERSION, HOST, Component, DeviceInfo, MemoryEstimate
from monitor.estimate.repack import CpuFeatures, features_from_flags, features_of
from monitor.servers.capabilities import ENGINES
from monitor.servers.spec import LaunchSpec

__all__ = [
    "Component",
    "CpuFeatures",
    "DeviceInfo",
    "ESTIMATOR_VERSION",
    "EstimateError",
    "MemoryEstimate",
    "estimate",
    "estimate_command",
    "features_from_flags",
    "features_of",
    "HOST",
]

VLLM_DEFAULT_UTILIZATION = 0.92  # vllm/config/cache.py (0.90 in older releases)


def _default_reader(path: str) -> Any:
    from monitor.gguf.reader import read_header

    return read_header(path)


def estimate(
    spec: LaunchSpec,
    devices: Sequence[DeviceInfo] = (),
    read_header: Callable[[str], Any] | None = None,
    outputs: str = "server",
    cpu: CpuFeatures | None = None,
) -> MemoryEstimate:
    """``outputs``: "server" (llama-server's logit reservation) or "batch" (llama.cpp's
    library default, what llama-fit-params measures). ``cpu``: the features of the CPU that
    runs the server (``features_from_flags(collectors.cpuinfo.read_cpu_flags())``): which
    weights llama.cpp repacks into anonymous buffers; None when unknown."""
    reader = read_header or _default_reader
    estimator = ENGINES[spec.engine].estimator if spec.engine in ENGINES else None
    if spec.role == "router":
        raise EstimateError(
            "a llama-server router (--models-dir/--models-preset, no -m) loads no model "
            "itself: estimate one of its models' command lines"
        )
    if estimator == "llama.cpp" and spec.role != "proxy":
        spec = _from_hf_cache(spec)
        return estimate_llamacpp(spec, devices, reader, outputs, cpu)
    if estimator == "vllm":
        return estimate_vllm(spec, devices)
    raise EstimateError(f"no estimator for {spec.engine} ({spec.role})")


def _from_hf_cache(spec: LaunchSpec) -> LaunchSpec:
    """``-hf``/``-hfd`` without ``-m``/``-md``: the files llama-server loads from its cache
    (monitor/servers/hf_cache.py); a draft repo's model GGUF only (a repo of mtp-/eagle3-
    sidecars alone is not found: said so)."""
    from monitor.servers.hf_cache import resolve

    if not spec.model_path and spec.hf_repo:
        path = resolve(spec.hf_repo, spec.hf_file, dict(spec.hf_env))
        spec = dataclasses.replace(spec, model_path=path)
    if not spec.draft_model and spec.hf_draft_repo:
        draft = resolve(spec.hf_draft_repo, None, dict(spec.hf_env), flag="-hfd")
        spec = dataclasses.replace(spec, draft_model=draft)
    return spec


def estimate_vllm(spec: LaunchSpec, devices: Sequence[DeviceInfo]) -> MemoryEstimate:
    """vLLM pre-allocates ``ceil(total x gpu_memory_utilization)`` on each of its GPUs
    whatever the model (weights + activations + the rest as KV blocks), or weights + the
    ``--kv-cache-memory-bytes`` it is given (estimation.md section 4)."""
    tp = max(1, spec.tensor_parallel_size or 1)
    gpus = list(devices)[:tp]
    notes = []
    parts = []
    if spec.kv_cache_memory_bytes:
        for dev in gpus or [DeviceInfo("gpu0")]:
            parts.append(
                Component(
                    "kv",
                    dev.device_id,
                    spec.kv_cache_memory_bytes,
                    "--kv-cache-memory-bytes (per GPU)",
                )
            )
        notes.append(
            "weights and activations come on top of --kv-cache-memory-bytes; vLLM's "
            "log line 'Model loading took X GiB' gives the weights"
        )
    else:
        util = spec.gpu_memory_utilization or VLLM_DEFAULT_UTILIZATION
        for dev in gpus:
            if dev.total_bytes:
                parts.append(
                    Component(
                        "budget",
                        dev.device_id,
                        math.ceil(dev.total_bytes * util),
                        f"ceil(total x gpu_memory_utilization {util}): "
                        "weights + activations + KV blocks fill it",
                    )
                )
        if not parts:
            notes.append(f"vLLM takes {util:.0%} of each GPU's total; no GPU total known here")
    for dev in gpus:
        if dev.overhead_bytes and parts:
            parts.append(
                Component(
                    "overhead",
                    dev.device_id,
                    dev.overhead_bytes,
                    "CUDA context and CUDA graphs outside the budget",
                )
            )
    return MemoryEstimate(
        engine=spec.engine,
        model_path=spec.model_path or spec.model_name,
        components=tuple(parts),
        notes=tuple(notes),
        devices=tuple(d.device_id for d in gpus),
    )


def estimate_command(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    devices: Sequence[DeviceInfo] = (),
    read_header: Callable[[str], Any] | None = None,
    outputs: str = "server",
    cwd: str | None = None,
    cpu: CpuFeatures | None = None,
) -> MemoryEstimate:
    """``cwd``: the directory relative model paths are relative to (a running server's
    ``/proc/PID/cwd``); None leaves them relative to ours."""
    from monitor.servers import parse_command

    spec = parse_command(list(argv), env, cwd=cwd)
    if spec is None:
        raise EstimateError(f"not an inference server command: {' '.join(argv[:3])} ...")
    return estimate(spec, devices, read_header, outputs, cpu)
