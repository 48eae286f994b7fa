"""Expected tokens/s for a predicted launch: the roofline (monitor/analysis/throughput.py) fed
with the estimate's placement and the model's facts, with and without a draft model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from monitor.analysis.picture import Picture
from monitor.analysis.predict_request import PredictRequest, Throughput
from monitor.analysis.predict_verdicts import Estimator, Prediction, _largest_ngl
from monitor.errors import VramscopeError
from monitor.estimate import MemoryEstimate
from monitor.estimate.kv import EstimateError
from monitor.estimate.model import HOST, DeviceInfo
from monitor.servers.spec import LaunchSpec

if TYPE_CHECKING:
    from monitor.analysis.throughput import DevicePeak, Work


def _train_ctx(spec: LaunchSpec, estimator: Estimator) -> int:
    try:
        est = estimator(replace(spec, ctx_size=0))
    except EstimateError:
        return 0
    return est.n_ctx or 0


def _peaks(
    req: PredictRequest, devices: list[DeviceInfo], names: dict[str, str | None]
) -> dict[str, DevicePeak]:
    """Per device: ``--bw``/``--flops`` (``gpu`` = every GPU), else the GPU table by the
    device's name; the host's peak from this machine's physical cores."""
    import psutil  # type: ignore[import-untyped]

    from monitor.analysis import throughput as tp

    def given(table: dict[str, float], device: str, scale: float) -> float | None:
        key = device if device in table else ("gpu" if device != HOST else None)
        return table[key] * scale if key in table else None

    out: dict[str, DevicePeak] = {}
    for device in [d.device_id for d in devices] + [HOST]:
        listed = tp.gpu_peak(names.get(device)) if device != HOST else None
        bw = given(req.bandwidth_gbs, device, 1e9)
        flops = given(req.flops_tflops, device, 1e12)
        where = []
        if bw is not None:
            where.append(f"--bw {bw / 1e9:g} GB/s")
        if flops is not None:
            where.append(f"--flops {flops / 1e12:g} TFLOPS")
        if device == HOST and flops is None:
            cores = psutil.cpu_count(logical=False)
            flops = tp.host_flops(cores)
            if flops is not None:
                where.append(
                    f"{cores} physical cores of this machine x "
                    f"{tp.HOST_GFLOPS_PER_CORE:g} GFLOP/s (an assumption)"
                )
        if listed is not None and (bw is None or flops is None):
            bw = bw if bw is not None else listed.bandwidth_bytes_per_s
            flops = flops if flops is not None else listed.flops_per_s
            where.append(listed.source)
        about = f"{device}: " + ("; ".join(where) or "nothing known")
        out[device] = tp.DevicePeak(bw, flops, about)
    return out


def _model_facts(
    path: str | None, read_header: Callable[[str], Any] | None
) -> tuple[float, float, int, int]:
    """(bytes per parameter, the share of weight bytes read per token, token_embd bytes,
    block_count)
    from the GGUF header. MoE: non-expert + expert x used/count (spread evenly over the
    devices: -cmoe/-ot placements are not told apart)."""
    from monitor.gguf.reader import read_header as read_gguf

    header = (read_header or read_gguf)(path or "")
    params = 0
    experts = embd = 0
    for t in header.tensors:
        n = 1
        for d in t.shape:
            n *= d
        params += n
        if "_exps" in t.name:
            experts += t.n_bytes
        if t.name == "token_embd.weight":
            embd = t.n_bytes
    total = max(1, header.tensor_bytes)
    count = header.arch_get("expert_count") or 0
    used = header.arch_get("expert_used_count") or 0
    active = 1.0
    if isinstance(count, int) and isinstance(used, int) and count > 0 and experts:
        active = 1 - experts / total * (1 - used / count)
    n_layer = header.arch_get("block_count")
    return total / max(1, params), active, embd, n_layer if isinstance(n_layer, int) else 0


def _work(est: MemoryEstimate, name: str, facts: tuple[float, float, int, int]) -> list[Work]:
    """What one token reads and computes per device; token_embd (on the host, read a row at
    a time) is left out."""
    from monitor.analysis import throughput as tp

    per_param, active, embd, _ = facts
    out = []
    for c in est.components:
        if c.name == name and c.when == "load":
            size = max(0.0, (c.bytes - (embd if c.device == HOST else 0)) * active)
            out.append(tp.Work(c.device, size, size / per_param))
    return out


def _throughput(
    spec: LaunchSpec,
    estimator: Estimator,
    devices: list[DeviceInfo],
    picture: Picture,
    result: Prediction,
    req: PredictRequest,
    names: dict[str, str | None],
    read_header: Callable[[str], Any] | None,
) -> Throughput:
    """Tokens/s of this launch without drafting, and with its draft against the same model
    without it at the most GPU layers that fit (the placement the draft displaces)."""
    from monitor.analysis import throughput as tp
    from monitor.estimate.llamacpp import n_draft_max

    peaks = _peaks(req, devices, names)
    sources = tuple(p.source for p in peaks.values())
    stray = sorted((set(req.bandwidth_gbs) | set(req.flops_tflops)) - set(peaks) - {"gpu", "disk"})
    strays = tuple(f"--bw/--flops {k}: no such device here ({', '.join(peaks)})" for k in stray)
    try:
        if not any(c.name == "weights" for c in result.estimate.components):
            return Throughput(
                None, unknown="the estimate places no weights (per device)", sources=sources
            )
        target = _model_facts(spec.model_path, read_header)
        mine = _work(result.estimate, "weights", target)
        plain = tp.plain_tokens_per_s(mine, peaks)
        if not spec.draft_model:
            return Throughput(round(plain, 2), sources=sources, notes=strays)
        found = _best_baseline(spec, estimator, picture, target[3])
        if found is not None:
            ngl, est = found
            change = f"no draft, -ngl {ngl}, the most layers that fit without it"
        else:
            est = estimator(replace(spec, draft_model=None))
            change = "no draft, the same -ngl (nothing fits without it either)"
        draft = _work(result.estimate, "draft_weights", _model_facts(spec.draft_model, read_header))
        n = spec.spec_draft_n_max if spec.spec_draft_n_max is not None else tp.DEFAULT_N_DRAFT
        accept = req.accept if req.accept is not None else tp.DEFAULT_ACCEPT
        spec_ = tp.speculate(mine, draft, _work(est, "weights", target), peaks, accept, max(1, n))
    except tp.Unknown as exc:
        return Throughput(None, unknown=str(exc), sources=sources, notes=strays)
    except (VramscopeError, OSError, ValueError) as exc:  # a header the estimator did not read
        return Throughput(None, unknown=f"the model files cannot be read: {exc}", sources=sources)
    notes = (
        ()
        if n_draft_max(spec)
        else (
            "-md alone enables no speculative type in current llama.cpp (add --spec-type "
            "draft-simple); these figures assume drafting is on",
        )
    )
    return Throughput(round(plain, 2), spec_, change, sources=sources, notes=strays + notes)


def _best_baseline(
    spec: LaunchSpec, estimator: Estimator, picture: Picture, n_layer: int
) -> tuple[int, MemoryEstimate] | None:
    """The most GPU layers that fit without the draft (the placement a draft displaces)."""
    plain = replace(spec, draft_model=None)
    ngl = _largest_ngl(plain, estimator, picture, {})
    if ngl is None:
        return None
    ngl = min(ngl, n_layer + 1)
    return ngl, estimator(replace(plain, n_gpu_layers=ngl))
