"""Will a load fit? Estimate + the memory picture (+ what llama-swap unloads first) -> verdict.

Per device: ``need`` = the estimate's load-time bytes on it; a unified-memory GPU shares its
pool with the host, so host components count against it too. ``room`` = what the picture
says a new load can get (``available``), plus what the evicted models free. Verdict:
``oom`` when need > room, ``tight`` when need eats into the safety margin, else ``fits``.

Fixes are priced by re-running the estimator on a changed launch (``dataclasses.replace``
of the spec), so each one says exactly how many bytes it frees on each device.

Two moments are judged: at load (the components llama.cpp allocates at start) and once
the caches fill (plus the components that grow with use: the ``--cache-ram`` prompt
cache, context checkpoints). A load that fits but grows past the room is named with the
flag that bounds the growth and a value that fits (:func:`bound_growth`).

With no ``-c`` and ``--fit`` on, llama.cpp's own fit chooses the context: the largest (in
steps of 256 per stream) that leaves ``-fitt`` MiB (1024) free on each device, never
below ``-fitc`` (4096) (estimation.md 1e). :func:`llama_fit` simulates it, and that
context is what is judged.

The one workflow: a :class:`PredictRequest` and the box state (a snapshot) go into
:func:`answer`, a :class:`PredictResult` comes out; the CLI (monitor/cli/predict.py adds
the live sample, ``--state``/``--at`` and the launch's cgroup), the HTTP API and the TUI's
what-if dialog all call it, and monitor/report/predict.py renders the result as text or
as the ``vramscope.predict/1`` JSON document.

The pieces live beside it: predict_request.py (request, result, exit codes),
predict_verdicts.py (verdicts, searches), predict_fixes.py (fixes, growth bounds, llama.cpp's
fit), predict_target.py (the launch a model id names), predict_throughput.py (tokens/s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from monitor.analysis.picture import Picture, ProcessUse, picture_from_snapshot
from monitor.analysis.predict_fixes import _fit_targets, _grows, bound_growth, llama_fit, suggest
from monitor.analysis.predict_request import PredictRequest, PredictResult
from monitor.analysis.predict_target import _refuse, _spec_of, _target, running_servers, swap_cgroup
from monitor.analysis.predict_throughput import _throughput, _train_ctx
from monitor.analysis.predict_verdicts import (
    Prediction,
    _unified_ids,
    _worst,
    fit_ctx,
    freed_by,
    judge,
)
from monitor.estimate import CpuFeatures, MemoryEstimate, estimate, features_from_flags
from monitor.estimate.kv import EstimateError
from monitor.estimate.model import HOST, DeviceInfo
from monitor.servers.spec import LaunchSpec
from monitor.units import GIB
from monitor.units import gib_number as _gib

if TYPE_CHECKING:
    from collectors.base import CgroupMemory, Snapshot
    from monitor.analysis.predict_fix_types import Fix


def predict(
    spec: LaunchSpec,
    picture: Picture,
    devices: Sequence[DeviceInfo],
    evicted: Sequence[ProcessUse] = (),
    running: Sequence[ProcessUse] = (),
    read_header: Callable[[str], Any] | None = None,
    with_fixes: bool = True,
    fit_view: Picture | None = None,
    cpu: CpuFeatures | None = None,
) -> Prediction:
    """``fit_view``: the box as llama.cpp's fit sees it, when that differs from
    ``picture`` (fit reads device free memory; it does not know the launch's cgroup).
    ``cpu``: the box's CPU features (which weights llama.cpp repacks); None: unknown."""

    def estimator(s: LaunchSpec) -> MemoryEstimate:
        return estimate(s, devices, read_header, cpu=cpu)

    base = estimator(spec)
    freed = freed_by(evicted, picture)
    notes: list[str] = []
    fit = llama_fit(spec, base, estimator, fit_view or picture, freed)
    if fit is not None and fit.ctx < fit.full_ctx:
        spec = replace(spec, ctx_size=fit.ctx)
        base = estimator(spec)
        target = (
            f"-fitt {'/'.join(str(t) for t in fit.target_mib)} MiB free on {', '.join(fit.devices)}"
        )
        if (
            fit.ctx > fit.min_ctx
            or _worst(judge(base, _fit_targets(spec, base, fit_view or picture)[0], freed))
            == "fits"
        ):
            notes.append(
                f"no -c: llama.cpp's fit will shrink the context from "
                f"{fit.full_ctx} to -c {fit.ctx}, the largest that leaves {target} "
                f"(not below -fitc {fit.min_ctx}); judged at -c {fit.ctx}"
            )
        else:
            notes.append(
                f"no -c: llama.cpp's fit cannot leave {target} even at -fitc "
                f"{fit.min_ctx}; it runs at -c {fit.ctx}, judged here"
            )
        if fit.ctx == fit.min_ctx and spec.n_gpu_layers is None and fit.devices != (HOST,):
            notes.append(
                "at its minimum context llama.cpp's fit may also move layers to the "
                "CPU (-ngl unset); that is not simulated here"
            )
    verdicts = judge(base, picture, freed)
    grown = judge(base, picture, freed, include_growth=True) if _grows(base) else ()
    overflow = None
    if grown and _worst(grown) in ("oom", "thrash") and _worst(verdicts) not in ("oom", "thrash"):
        overflow = overflow_tokens(base, picture, freed)
        notes += growth_notes(base, overflow)
    fixes: list[Fix] = []
    if with_fixes and _worst(verdicts) != "fits":
        evicted_pids = {p.pid for p in evicted}
        fixes = suggest(
            spec,
            base,
            estimator,
            picture,
            freed,
            [p for p in running if p.pid not in evicted_pids],
            read_header,
        )
    bounds: list[Fix] = []
    if grown and _worst(verdicts) != "oom" and _worst(grown) == "oom":
        evicted_pids = {p.pid for p in evicted}
        bounds = bound_growth(
            spec, base, estimator, picture, freed, [p for p in running if p.pid not in evicted_pids]
        )
    if not verdicts:
        notes.append("no device with a known free figure: nothing to judge")
    return Prediction(
        base,
        verdicts,
        tuple(p.name for p in evicted),
        tuple(fixes),
        tuple(notes),
        grown,
        tuple(bounds),
        fit,
        overflow,
    )


def prompt_cache_bytes_per_token(est: MemoryEstimate) -> int | None:
    """What one cached prompt token costs in llama-server's prompt cache: a slot's saved
    state holds its KV cells over every full-attention layer (llama_state_seq_get_data;
    SWA layers keep only their window, recurrent state is one fixed block), so the full
    cache's bytes per cell. None when the launch has no per-token KV."""
    cells = est.cells
    kv = sum(c.bytes for c in est.components if c.name == "kv" and c.when == "load")
    return kv // cells if cells and kv else None


def overflow_tokens(
    est: MemoryEstimate, picture: Picture, freed: dict[str, int] | None = None
) -> int | None:
    """Distinct prompt tokens the prompt cache holds before what must stay resident passes
    the room (server_prompt_cache::update fills to --cache-ram, tools/server/server-task.cpp):
    0 when the other growth (context checkpoints) already does."""
    per_token = prompt_cache_bytes_per_token(est)
    if per_token is None or not est.total_bytes("cache_ram", include_growth=True):
        return None
    others = replace(est, components=tuple(c for c in est.components if c.name != "cache_ram"))
    rest = judge(others, picture, freed, include_growth=True)
    if _worst(rest) in ("oom", "thrash"):
        return 0
    shared = {HOST} | _unified_ids(picture)
    slack = [
        v.room_bytes - v.must_fit_bytes - v.hot_evictable_bytes
        for v in rest
        if v.device_id in shared
    ]
    return max(0, min(slack)) // per_token if slack else None


def growth_notes(est: MemoryEstimate, overflow: int | None) -> list[str]:
    """The prompt cache's ceiling in tokens, and when it passes the room."""
    per_token = prompt_cache_bytes_per_token(est)
    cache = est.total_bytes("cache_ram", include_growth=True)
    if per_token is None or not cache:
        return []
    notes = [
        f"the {cache / GIB:.1f} GiB prompt cache (--cache-ram) fills after ~{cache // per_token:,} "
        f"distinct prompt tokens ({per_token / 1024:.0f} KiB of KV state each)"
    ]
    if overflow:
        notes.append(f"it passes the room after ~{overflow:,} distinct prompt tokens")
    return notes


# --------------------------------------------------------------------------- the workflow
def answer(
    req: PredictRequest,
    snap: Snapshot,
    devices: list[DeviceInfo],
    launch: tuple[CgroupMemory | None, str | None] | None = None,
    read_header: Callable[[str], Any] | None = None,
) -> PredictResult:
    """The predict workflow on one box state. ``devices``: the GPUs the estimator places
    on (from ``snap``); ``launch``: (the memory cgroup the launch runs under, the note
    saying which), None for what ``snap`` alone tells (llama-swap's, for a model id).
    Raises :class:`EstimateError` (a user-facing InputError) when there is no verdict."""
    limit, cgroup_note = launch if launch is not None else swap_cgroup(req, snap)
    margin = int(req.margin_gib * GIB)
    picture = picture_from_snapshot(snap, margin, limit)
    # llama.cpp's fit reads device free memory: it does not know the launch's cgroup
    fit_view = picture_from_snapshot(snap, margin) if limit else None
    notes: list[str] = [cgroup_note] if cgroup_note else []
    if limit is not None and limit.memory_max_bytes is not None:
        notes.append(limit.room_parts())
    command, evicted, target_notes, view = _target(req, snap, picture)
    notes += target_notes
    if not command:
        raise EstimateError(
            "nothing to predict: give a command after -- or a llama-swap "
            "model id with --swap-config"
        )
    spec = _spec_of(command, req.check_engine_flags, view.env if view is not None else None)
    _refuse(spec, req, view is not None)
    if req.check_engine_flags and spec.engine == "llama.cpp":
        refuse_unknown_flags(list(command), req.model_id)
    running = [u for u in running_servers(picture) if u.pid not in {e.pid for e in evicted}]
    named = req.cpu_features if req.cpu_features is not None else snap.cpu_features
    cpu = features_from_flags(named) if named is not None else None
    result = predict(
        spec,
        picture,
        devices,
        evicted,
        running,
        read_header=read_header,
        fit_view=fit_view,
        cpu=cpu,
    )
    if limit is not None and limit.memory_high_bytes is not None:
        host_need = result.estimate.by_device(include_growth=True).get("host", 0)
        over = host_need - max(0, limit.memory_high_bytes - (limit.memory_current_bytes or 0))
        if over > 0:
            notes.append(
                f"the cgroup {limit.path} has memory.high (MemoryHigh=) "
                f"{_gib(limit.memory_high_bytes)} GiB: this load passes it by "
                f"{_gib(over)} GiB, so the kernel throttles and reclaims (slow, "
                "no kill) before memory.max"
            )
    if not result.devices:  # no verdict is not "fits"
        raise EstimateError("nothing to judge: " + _why_nothing(result))
    if view is not None:  # the router unloads, its children by id
        from monitor.analysis.router_predict import as_router

        result = as_router(result, view, snap, picture, req.model_id or "")

    def estimator(s: LaunchSpec) -> MemoryEstimate:
        return estimate(s, devices, read_header, cpu=cpu)

    best_ctx = None
    if req.want_fit_ctx:
        ceiling_cells = result.estimate.n_ctx or 0
        best_ctx = fit_ctx(
            spec,
            estimator,
            picture,
            freed_by(evicted, picture),
            max(ceiling_cells, _train_ctx(spec, estimator)),
        )
    speed = None
    if req.bandwidth_gbs or req.flops_tflops or req.accept is not None or spec.draft_model:
        names = {d.device_id: d.name for d in snap.devices}
        speed = _throughput(spec, estimator, devices, picture, result, req, names, read_header)
    notes += thrash_notes(result, req.bandwidth_gbs.get("disk"))
    horizon = req.growth_horizon_tokens
    if result.overflow_tokens is not None and result.overflow_tokens > horizon:
        notes.append(
            f"beyond the growth horizon of {horizon:,} distinct prompt "
            "tokens ([predict] growth_horizon_tokens, --growth-horizon): not counted as an "
            "OOM; watch it live (the daemon's time-to-OOM)"
        )
    return PredictResult(
        result,
        picture,
        tuple(notes),
        req.want_fit_ctx,
        best_ctx,
        speed,
        req.growth_horizon_tokens,
        tuple(command),
    )


def thrash_notes(result: Prediction, disk_gbs: float | None) -> list[str]:
    """What a THRASH verdict costs per token: the weights that do not stay resident are
    read from disk again for every token, so decoding is bound by the disk's bandwidth
    (the roofline at ``--bw disk=GB/s``: at most bandwidth / bytes re-read per token)."""
    out = []
    for d in result.devices:
        if d.verdict != "thrash" or d.not_resident_bytes <= 0:
            continue
        reread = d.not_resident_bytes
        if disk_gbs:
            out.append(
                f"{d.device_id}: each token re-reads ~{reread / GIB:.2f} GiB of weights from "
                f"disk: at {disk_gbs:g} GB/s that is at most ~{disk_gbs * 1e9 / reread:.2f} "
                "tokens/s; the fix: more room, fewer layers on this memory (-ngl), or a "
                "smaller quant"
            )
        else:
            out.append(
                f"{d.device_id}: each token re-reads ~{reread / GIB:.2f} GiB of weights from "
                "disk (give --bw disk=GB/s for the tokens/s that leaves); the fix: more room, "
                "fewer layers on this memory (-ngl), or a smaller quant"
            )
    return out


def refuse_unknown_flags(command: list[str], model_id: str | None = None) -> None:
    """EstimateError (exit 2) in the engine's own words when the llama-server the command
    names does not list one of its flags in ``--help`` (monitor/servers/server_help.py);
    nothing when the binary cannot be found or safely asked (the built-in table stands)."""
    from monitor.servers.recognise import unwrapped_command
    from monitor.servers.server_help import locate, server_flags, unknown_flags

    argv, _ = unwrapped_command(command)
    binary = locate(argv[0]) if argv else None
    known = server_flags(binary) if binary is not None else None
    if known is None:
        return
    unknown = unknown_flags(argv, known)
    if unknown:
        where = f"llama-swap model {model_id}: " if model_id is not None else ""
        raise EstimateError(
            f"{where}{known.binary} would refuse this launch: error: invalid argument: "
            f"{unknown[0]} (not in its --help; this llama.cpp build does not take it)"
        )


def _why_nothing(result: Prediction) -> str:
    est = result.estimate
    if not est.components and est.notes:
        return est.notes[0]  # vLLM with no GPU total known: "vLLM takes 92% of each GPU..."
    return (
        "no device with a known free figure holds any part of this load (the box state "
        "has no free memory figure for " + ", ".join(sorted(est.by_device())) + ")"
        if est.by_device()
        else "the estimate places nothing on any device"
    )
