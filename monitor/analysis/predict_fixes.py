"""Fixes for a launch that does not fit, each priced by re-running the estimator on a changed
spec; the bounds for caches that grow past the room; llama.cpp's own fit of the context."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.analysis.picture import Picture, ProcessUse
from monitor.analysis.predict_verdicts import (
    _ORDER,
    FIT_MIN_CTX,
    FIT_TARGET_MIB,
    DeviceVerdict,
    Estimator,
    _largest_ngl,
    _offload_ngl,
    _worst,
    fit_ctx,
    freed_by,
    judge,
    need_by_device,
)
from monitor.estimate import MemoryEstimate
from monitor.estimate.kv import EstimateError
from monitor.estimate.model import HOST
from monitor.servers.spec import LaunchSpec
from monitor.units import MIB

RELEVANT_MIN_BYTES = 64 * MIB
"""A fix must give a device that does not fit at least this much room (or its whole
shortfall, when that is less); one that frees nothing there is not offered."""

if TYPE_CHECKING:
    from monitor.analysis.predict_fix_types import Fix, LlamaFit


def _relieves(before: Sequence[DeviceVerdict], after: Sequence[DeviceVerdict]) -> bool:
    """Does ``after`` give a short device (verdict not "fits") relevant room?"""
    later = {v.device_id: v.slack_bytes for v in after}
    for v in before:
        if v.verdict == "fits":
            continue
        if v.device_id not in later:  # nothing of the load is left there
            return True
        if later[v.device_id] - v.slack_bytes >= min(RELEVANT_MIN_BYTES, max(1, -v.slack_bytes)):
            return True
    return False


def _fix(
    label: str,
    base: MemoryEstimate,
    changed: MemoryEstimate,
    picture: Picture,
    freed: dict[str, int],
) -> Fix | None:
    before, after = need_by_device(base, picture), need_by_device(changed, picture)
    frees = {d: before.get(d, 0) - after.get(d, 0) for d in before}
    frees = {d: v for d, v in frees.items() if v > 0}
    if not frees:
        return None
    verdicts = judge(changed, picture, freed)
    if not _relieves(judge(base, picture, freed), verdicts):
        return None
    from monitor.analysis.predict_fix_types import Fix

    return Fix(label, frees, _worst(verdicts))


def smaller_drafts(
    spec: LaunchSpec, read_header: Callable[[str], Any] | None, limit: int = 4
) -> list[str]:
    """GGUF files in the draft's folder with the target's vocabulary (a valid -md:
    :func:`same_vocabulary`) and fewer weight bytes than the current draft, smallest last
    so the list reads down."""
    if not spec.draft_model or not spec.model_path:
        return []
    reader: Callable[[str], Any]
    if read_header is None:
        from monitor.gguf.reader import read_header as reader
    else:
        reader = read_header

    try:
        target = reader(spec.model_path)
        current = reader(spec.draft_model)
    except Exception:  # unreadable files offer no candidates
        return []
    found = []
    folder = Path(spec.draft_model).parent
    for path in sorted(folder.glob("*.gguf"))[:64]:
        if (
            str(path) in (spec.draft_model, spec.model_path)
            or "-of-0" in path.name
            and "-00001-of-" not in path.name
        ):
            continue
        try:
            header = reader(str(path))
        except Exception:
            continue
        if same_vocabulary(header, target) and header.tensor_bytes < current.tensor_bytes:
            found.append((header.tensor_bytes, str(path)))
    return [p for _, p in sorted(found, reverse=True)[:limit]]


_VOCAB_KEYS = (
    "tokenizer.ggml.model",  # llama_vocab_type: SPM, BPE, WPM, ...
    "tokenizer.ggml.pre",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.eos_token_id",
)


def same_vocabulary(a: Any, b: Any) -> bool:
    """Whether a draft with header ``a`` can speculate for a target with header ``b``, as
    far as GGUF headers tell: llama.cpp refuses a draft whose vocab type, BOS/EOS tokens
    differ or whose token count is off by more than 128, then compares the token texts
    (common/speculative.cpp ``common_speculative_are_compatible``, lines 67-127). The
    texts are not read here, so this asks more: the same token count (known in both), the
    same tokenizer model (known in both) and the same pre-tokenizer and BOS/EOS keys."""
    if a.n_vocab is None or a.n_vocab != b.n_vocab:
        return False
    if a.get("tokenizer.ggml.model") is None:
        return False
    return all(a.get(key) == b.get(key) for key in _VOCAB_KEYS)


def suggest(
    spec: LaunchSpec,
    base: MemoryEstimate,
    estimator: Estimator,
    picture: Picture,
    freed: dict[str, int],
    running: Sequence[ProcessUse] = (),
    read_header: Callable[[str], Any] | None = None,
) -> list[Fix]:
    """What would make it fit, each priced in bytes per device."""
    fixes: list[Fix] = []

    def attempt(label: str, changed_spec: LaunchSpec) -> None:
        try:
            changed = estimator(changed_spec)
        except EstimateError:
            return
        if (fix := _fix(label, base, changed, picture, freed)) is not None:
            fixes.append(fix)

    cells = base.n_ctx or 0
    if cells > 256:
        best = fit_ctx(spec, estimator, picture, freed, cells)
        if best and best < cells:
            attempt(f"-c {best} (the largest that fits)", replace(spec, ctx_size=best))
        elif best is None:
            attempt(f"-c {max(256, cells // 2)}", replace(spec, ctx_size=max(256, cells // 2)))
    if spec.n_parallel and spec.n_parallel > 1:
        attempt(
            f"-np {max(1, spec.n_parallel // 2)}",
            replace(spec, n_parallel=max(1, spec.n_parallel // 2)),
        )
    narrower = {"f32": "f16", "f16": "q8_0", "bf16": "q8_0", "q8_0": "q4_0"}
    if spec.cache_type_k in narrower:
        kt = narrower[spec.cache_type_k]
        vt = narrower.get(spec.cache_type_v, spec.cache_type_v)
        attempt(
            f"-ctk {kt} -ctv {vt} -fa on",
            replace(spec, cache_type_k=kt, cache_type_v=vt, flash_attn="on"),
        )
    if spec.flash_attn == "off":
        attempt("-fa on", replace(spec, flash_attn="on"))
    if (spec.n_ubatch or 512) > 512:
        attempt("-ub 512", replace(spec, n_ubatch=512))
    gpu_ids = {c.device for c in base.components if c.device != HOST}
    if gpu_ids and not any(
        picture.get(d) and picture.devices[d].memory_kind == "unified" for d in gpu_ids
    ):
        ngl = _largest_ngl(spec, estimator, picture, freed)
        if ngl is not None:
            attempt(
                f"-ngl {ngl} (the most layers that fit; the rest run from host RAM)",
                replace(spec, n_gpu_layers=ngl),
            )
    more = _offload_ngl(spec, base, estimator, picture, freed)
    if more is not None:
        attempt(
            f"-ngl {more} (more layers on the GPU: the host keeps less)",
            replace(spec, n_gpu_layers=more),
        )
    if spec.draft_model:
        for candidate in smaller_drafts(spec, read_header):
            attempt(
                f"-md {candidate} (a smaller draft beside the current one)",
                replace(spec, draft_model=candidate),
            )
        attempt("without the draft model (-md)", replace(spec, draft_model=None))
        if spec.draft_cache_type_k == "f16":
            attempt(
                "-ctkd q8_0 -ctvd q8_0",
                replace(spec, draft_cache_type_k="q8_0", draft_cache_type_v="q8_0"),
            )
    now = judge(base, picture, freed)
    for use in running:
        gain = freed_by([use], picture)
        if gain:
            merged = {d: freed.get(d, 0) + gain.get(d, 0) for d in set(freed) | set(gain)}
            then = judge(base, picture, merged)
            if _relieves(now, then):  # stopping a process that frees nothing is no fix
                from monitor.analysis.predict_fix_types import Fix

                fixes.append(Fix(f"stop {use.name} (pid {use.pid})", gain, _worst(then)))
    fixes.sort(key=lambda f: (_ORDER[f.verdict], -sum(f.frees.values())))
    return fixes


def _grows(est: MemoryEstimate) -> bool:
    return any(c.when == "grows" for c in est.components)


def bound_growth(
    spec: LaunchSpec,
    base: MemoryEstimate,
    estimator: Estimator,
    picture: Picture,
    freed: dict[str, int],
    running: Sequence[ProcessUse] = (),
) -> list[Fix]:
    """The flags that bound what grows, each with the largest value whose full caches
    still fit (``fits``: the margin kept): ``--cache-ram N`` (MiB), ``-ctxcp N`` (per
    slot), and both together when neither alone is enough. Priced by re-estimating.
    Then each running process whose memory, given back, leaves room for the full caches
    ("stop X"), priced by what it holds (as measured)."""

    def grown_fits(changed: LaunchSpec) -> MemoryEstimate | None:
        try:
            est = estimator(changed)
        except EstimateError:
            return None
        ok = _worst(judge(est, picture, freed, include_growth=True)) == "fits"
        return est if ok else None

    def largest(make: Callable[[int], LaunchSpec], high: int) -> int | None:
        if grown_fits(make(0)) is None:
            return None
        low = 0
        while low < high:
            mid = (low + high + 1) // 2
            if grown_fits(make(mid)) is not None:
                low = mid
            else:
                high = mid - 1
        return low

    def fix(label: str, changed: LaunchSpec) -> Fix | None:
        est = grown_fits(changed)
        if est is None:
            return None
        before = need_by_device(base, picture, include_growth=True)
        after = need_by_device(est, picture, include_growth=True)
        frees = {d: before[d] - after.get(d, 0) for d in before if before[d] > after.get(d, 0)}
        from monitor.analysis.predict_fix_types import Fix

        return Fix(label, frees, "fits")

    out: list[Fix] = []
    cache = base.total_bytes("cache_ram", include_growth=True) // MIB
    per_slot = spec.ctx_checkpoints if spec.ctx_checkpoints is not None else 32
    checkpoints = base.total_bytes("checkpoints", include_growth=True) > 0
    if cache > 0:
        n = largest(lambda v: replace(spec, cache_ram_mib=v), cache)
        if n is not None and (f := fix(f"--cache-ram {n}", replace(spec, cache_ram_mib=n))):
            out.append(f)
    if checkpoints and per_slot > 0:
        n = largest(lambda v: replace(spec, ctx_checkpoints=v), per_slot)
        if n is not None and (f := fix(f"-ctxcp {n}", replace(spec, ctx_checkpoints=n))):
            out.append(f)
    if not out and cache > 0 and checkpoints:
        n = largest(lambda v: replace(spec, cache_ram_mib=0, ctx_checkpoints=v), per_slot)
        if n is not None and (
            f := fix(f"--cache-ram 0 -ctxcp {n}", replace(spec, cache_ram_mib=0, ctx_checkpoints=n))
        ):
            out.append(f)
    for use in running:
        gain = freed_by([use], picture)
        if not gain:
            continue
        merged = {d: freed.get(d, 0) + gain.get(d, 0) for d in set(freed) | set(gain)}
        if _worst(judge(base, picture, merged, include_growth=True)) == "fits":
            from monitor.analysis.predict_fix_types import Fix

            out.append(Fix(f"stop {use.name} (pid {use.pid})", gain, "fits"))
    return out


def _fit_targets(
    spec: LaunchSpec, base: MemoryEstimate, picture: Picture
) -> tuple[Picture, tuple[int, ...]]:
    """The picture as llama.cpp's fit sees it: the devices it fits on (the GPUs the model
    uses; the host when it runs on CPU only), each with its -fitt margin."""
    on = sorted({c.device for c in base.components if c.device != HOST} & set(picture.devices))
    if not on:
        on = [HOST] if HOST in picture.devices else []
    given = spec.fit_target_mib or (FIT_TARGET_MIB,)
    targets = tuple(given[min(i, len(given) - 1)] for i in range(len(on)))
    devices = {
        d: replace(picture.devices[d], margin_bytes=t * MIB)
        for d, t in zip(on, targets, strict=True)
    }
    return Picture(picture.ts_ms, devices), targets


def llama_fit(
    spec: LaunchSpec,
    base: MemoryEstimate,
    estimator: Estimator,
    picture: Picture,
    freed: dict[str, int],
) -> LlamaFit | None:
    """The context llama.cpp's fit will run with (no -c, --fit on): the full n_ctx_train x
    streams when that leaves -fitt free on every device it fits on; else the largest
    multiple of 256 per stream that does, never below -fitc. None: fit does not apply."""
    if spec.engine != "llama.cpp" or spec.ctx_size is not None or spec.fit is False:
        return None
    full = base.n_ctx or 0
    if full <= 0:
        return None
    view, targets = _fit_targets(spec, base, picture)
    if not view.devices:
        return None
    from monitor.analysis.predict_fix_types import LlamaFit  # only a launch llama.cpp's fit sizes

    minimum = min(full, spec.fit_ctx if spec.fit_ctx is not None else FIT_MIN_CTX)
    ids = tuple(view.devices)
    if _worst(judge(base, view, freed)) == "fits":
        return LlamaFit(full, full, minimum, targets, ids)
    best = fit_ctx(spec, estimator, view, freed, full) or 0
    return LlamaFit(max(best, minimum), full, minimum, targets, ids)
