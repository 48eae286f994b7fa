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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from monitor.analysis.picture import Picture, ProcessUse
from monitor.engines.spec import LaunchSpec
from monitor.estimate import MemoryEstimate, estimate
from monitor.estimate.kv import EstimateError
from monitor.estimate.model import HOST, DeviceInfo
from monitor.units import MIB

FIT_TARGET_MIB = 1024  # llama.cpp -fitt default, per device (common/common.h)
FIT_MIN_CTX = 4096  # llama.cpp -fitc default

Verdict = Literal["fits", "tight", "oom"]
_ORDER = {"fits": 0, "tight": 1, "oom": 2}


@dataclass(frozen=True, slots=True)
class DeviceVerdict:
    device_id: str
    verdict: Verdict
    need_bytes: int
    room_bytes: int  # available now + freed by evictions
    margin_bytes: int
    freed_bytes: int = 0
    binding: str = ""

    @property
    def slack_bytes(self) -> int:
        """Room left after the load and the margin (negative: short by this much)."""
        return self.room_bytes - self.margin_bytes - self.need_bytes


@dataclass(frozen=True, slots=True)
class Fix:
    change: str  # e.g. "-c 16384", "-ctk q8_0 -ctv q8_0", "stop llama-server (pid 42)"
    frees: dict[str, int]  # device -> bytes freed
    verdict: Verdict  # the verdict with this change alone


@dataclass(frozen=True, slots=True)
class LlamaFit:
    """What llama.cpp's fit will choose for a launch with no ``-c``."""

    ctx: int  # the -c it will run with
    full_ctx: int  # n_ctx_train x streams: where it starts
    min_ctx: int  # -fitc
    target_mib: tuple[int, ...]  # -fitt, per device
    devices: tuple[str, ...]  # the devices it fits on


@dataclass(frozen=True, slots=True)
class Prediction:
    estimate: MemoryEstimate
    devices: tuple[DeviceVerdict, ...]
    evicted: tuple[str, ...] = ()
    fixes: tuple[Fix, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    grown: tuple[DeviceVerdict, ...] = ()  # once the caches fill; () when nothing grows
    growth_bounds: tuple[Fix, ...] = ()  # --cache-ram N / -ctxcp N that make it fit then
    fit: LlamaFit | None = None

    @property
    def verdict(self) -> Verdict:
        worst = max((d.verdict for d in self.devices), key=_ORDER.__getitem__, default="fits")
        return worst

    @property
    def grown_verdict(self) -> Verdict | None:
        """The verdict once every growing cache is full; None when nothing grows."""
        return _worst(self.grown) if self.grown else None


def _unified_ids(picture: Picture) -> set[str]:
    return {d.device_id for d in picture.devices.values() if d.memory_kind == "unified"}


def need_by_device(est: MemoryEstimate, picture: Picture, include_growth: bool = False
                   ) -> dict[str, int]:
    """Load-time bytes per picture device (with ``include_growth``: once the caches fill);
    host components also load a unified pool."""
    need = est.by_device(include_growth)
    host_need = need.get(HOST, 0)
    for device_id in _unified_ids(picture):
        need[device_id] = need.get(device_id, 0) + host_need
    return need


def judge(est: MemoryEstimate, picture: Picture, freed: dict[str, int] | None = None,
          include_growth: bool = False) -> tuple[DeviceVerdict, ...]:
    freed = freed or {}
    out = []
    for device_id, need in sorted(need_by_device(est, picture, include_growth).items()):
        pic = picture.get(device_id)
        if pic is None or pic.available_bytes is None or need <= 0:
            continue
        extra = freed.get(device_id, 0)
        if pic.memory_kind == "unified":
            extra += freed.get(HOST, 0)
        room = pic.available_bytes + extra
        if need > room:
            verdict: Verdict = "oom"
        elif need > room - pic.margin_bytes:
            verdict = "tight"
        else:
            verdict = "fits"
        out.append(DeviceVerdict(device_id, verdict, need, room, pic.margin_bytes, extra,
                                 pic.binding))
    return tuple(out)


def freed_by(processes: Iterable[ProcessUse], picture: Picture) -> dict[str, int]:
    """Bytes each device gets back when these processes stop (as measured). Where a
    cgroup binds the new load, only what a process in that cgroup frees makes room."""
    pids = {p.pid for p in processes}
    out: dict[str, int] = {}
    for pic in picture.devices.values():
        in_cgroup = pic.binding.removeprefix("cgroup ") if pic.binding.startswith(
            "cgroup ") else None
        for use in pic.processes:
            if use.pid in pids and (in_cgroup is None or use.cgroup_path == in_cgroup):
                out[pic.device_id] = out.get(pic.device_id, 0) + use.bytes
    return out


def _worst(verdicts: Sequence[DeviceVerdict]) -> Verdict:
    return max((d.verdict for d in verdicts), key=_ORDER.__getitem__, default="fits")


Estimator = Callable[[LaunchSpec], MemoryEstimate]


def fit_ctx(spec: LaunchSpec, estimator: Estimator, picture: Picture, freed: dict[str, int],
            ceiling: int) -> int | None:
    """The largest -c (a multiple of 256 per stream) whose load fits without eating the
    margin, as llama.cpp's fit would pick it, for this picture; None if even 256 does not."""
    def fits(ctx: int) -> bool:
        try:
            verdicts = judge(estimator(replace(spec, ctx_size=ctx)), picture, freed)
        except EstimateError:
            return False
        return _worst(verdicts) == "fits"

    streams = 1 if spec.kv_unified or not spec.n_parallel else spec.n_parallel
    step = 256 * streams
    low, high = 0, max(1, ceiling // step)
    if not fits(step):
        return None
    low = 1
    while low < high:  # largest k with fits(k * step)
        mid = (low + high + 1) // 2
        if fits(mid * step):
            low = mid
        else:
            high = mid - 1
    return low * step


def _largest_ngl(spec: LaunchSpec, estimator: Estimator, picture: Picture,
                 freed: dict[str, int]) -> int | None:
    """The most GPU layers (-ngl) that fit: GPU need grows with -ngl, so bisect."""
    def fits(ngl: int) -> bool:
        try:
            return _worst(judge(estimator(replace(spec, n_gpu_layers=ngl)), picture,
                                freed)) == "fits"
        except EstimateError:
            return False

    if not fits(0):
        return None
    low, high = 0, 256
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _fix(label: str, base: MemoryEstimate, changed: MemoryEstimate, picture: Picture,
         freed: dict[str, int]) -> Fix | None:
    before, after = need_by_device(base, picture), need_by_device(changed, picture)
    frees = {d: before.get(d, 0) - after.get(d, 0) for d in before}
    frees = {d: v for d, v in frees.items() if v > 0}
    if not frees:
        return None
    return Fix(label, frees, _worst(judge(changed, picture, freed)))


def smaller_drafts(spec: LaunchSpec, read_header: Callable[[str], Any] | None,
                   limit: int = 4) -> list[str]:
    """GGUF files in the draft's folder with the target's vocabulary (a valid -md) and
    fewer weight bytes than the current draft, smallest last so the list reads down."""
    if not spec.draft_model or not spec.model_path:
        return []
    if read_header is None:
        from monitor.gguf.reader import read_header as reader
    else:
        reader = read_header
    from pathlib import Path

    try:
        target = reader(spec.model_path)
        current = reader(spec.draft_model)
    except Exception:  # unreadable files offer no candidates
        return []
    found = []
    folder = Path(spec.draft_model).parent
    for path in sorted(folder.glob("*.gguf"))[:64]:
        if str(path) in (spec.draft_model, spec.model_path) or "-of-0" in path.name and \
                "-00001-of-" not in path.name:
            continue
        try:
            header = reader(str(path))
        except Exception:
            continue
        if header.n_vocab == target.n_vocab and header.tensor_bytes < current.tensor_bytes:
            found.append((header.tensor_bytes, str(path)))
    return [p for _, p in sorted(found, reverse=True)[:limit]]


def suggest(spec: LaunchSpec, base: MemoryEstimate, estimator: Estimator, picture: Picture,
            freed: dict[str, int], running: Sequence[ProcessUse] = (),
            read_header: Callable[[str], Any] | None = None) -> list[Fix]:
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
        attempt(f"-np {max(1, spec.n_parallel // 2)}",
                replace(spec, n_parallel=max(1, spec.n_parallel // 2)))
    narrower = {"f32": "f16", "f16": "q8_0", "bf16": "q8_0", "q8_0": "q4_0"}
    if spec.cache_type_k in narrower:
        kt = narrower[spec.cache_type_k]
        vt = narrower.get(spec.cache_type_v, spec.cache_type_v)
        attempt(f"-ctk {kt} -ctv {vt} -fa on",
                replace(spec, cache_type_k=kt, cache_type_v=vt, flash_attn="on"))
    if spec.flash_attn == "off":
        attempt("-fa on", replace(spec, flash_attn="on"))
    if (spec.n_ubatch or 512) > 512:
        attempt("-ub 512", replace(spec, n_ubatch=512))
    gpu_ids = {c.device for c in base.components if c.device != HOST}
    if gpu_ids and not any(picture.get(d) and picture.devices[d].memory_kind == "unified"
                           for d in gpu_ids):
        ngl = _largest_ngl(spec, estimator, picture, freed)
        if ngl is not None:
            attempt(f"-ngl {ngl} (the most layers that fit; the rest run from host RAM)",
                    replace(spec, n_gpu_layers=ngl))
    if spec.draft_model:
        for candidate in smaller_drafts(spec, read_header):
            attempt(f"-md {candidate} (a smaller draft beside the current one)",
                    replace(spec, draft_model=candidate))
        attempt("without the draft model (-md)", replace(spec, draft_model=None))
        if spec.draft_cache_type_k == "f16":
            attempt("-ctkd q8_0 -ctvd q8_0",
                    replace(spec, draft_cache_type_k="q8_0", draft_cache_type_v="q8_0"))
    for use in running:
        gain = freed_by([use], picture)
        if gain:
            merged = {d: freed.get(d, 0) + gain.get(d, 0) for d in set(freed) | set(gain)}
            fixes.append(Fix(f"stop {use.name} (pid {use.pid})", gain,
                             _worst(judge(base, picture, merged))))
    fixes.sort(key=lambda f: (_ORDER[f.verdict], -sum(f.frees.values())))
    return fixes


def _grows(est: MemoryEstimate) -> bool:
    return any(c.when == "grows" for c in est.components)


def bound_growth(spec: LaunchSpec, base: MemoryEstimate, estimator: Estimator,
                 picture: Picture, freed: dict[str, int]) -> list[Fix]:
    """The flags that bound what grows, each with the largest value whose full caches
    still fit (``fits``: the margin kept): ``--cache-ram N`` (MiB), ``-ctxcp N`` (per
    slot), and both together when neither alone is enough. Priced by re-estimating."""
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
        if n is not None and (f := fix(f"--cache-ram 0 -ctxcp {n}",
                                       replace(spec, cache_ram_mib=0, ctx_checkpoints=n))):
            out.append(f)
    return out


def _fit_targets(spec: LaunchSpec, base: MemoryEstimate, picture: Picture
                 ) -> tuple[Picture, tuple[int, ...]]:
    """The picture as llama.cpp's fit sees it: the devices it fits on (the GPUs the model
    uses; the host when it runs on CPU only), each with its -fitt margin."""
    on = sorted({c.device for c in base.components if c.device != HOST} & set(picture.devices))
    if not on:
        on = [HOST] if HOST in picture.devices else []
    given = spec.fit_target_mib or (FIT_TARGET_MIB,)
    targets = tuple(given[min(i, len(given) - 1)] for i in range(len(on)))
    devices = {d: replace(picture.devices[d], margin_bytes=t * MIB)
               for d, t in zip(on, targets, strict=True)}
    return Picture(picture.ts_ms, devices), targets


def llama_fit(spec: LaunchSpec, base: MemoryEstimate, estimator: Estimator, picture: Picture,
              freed: dict[str, int]) -> LlamaFit | None:
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
    minimum = min(full, spec.fit_ctx if spec.fit_ctx is not None else FIT_MIN_CTX)
    ids = tuple(view.devices)
    if _worst(judge(base, view, freed)) == "fits":
        return LlamaFit(full, full, minimum, targets, ids)
    best = fit_ctx(spec, estimator, view, freed, full) or 0
    return LlamaFit(max(best, minimum), full, minimum, targets, ids)


def predict(spec: LaunchSpec, picture: Picture, devices: Sequence[DeviceInfo],
            evicted: Sequence[ProcessUse] = (), running: Sequence[ProcessUse] = (),
            read_header: Callable[[str], Any] | None = None,
            with_fixes: bool = True, fit_view: Picture | None = None) -> Prediction:
    """``fit_view``: the box as llama.cpp's fit sees it, when that differs from
    ``picture`` (fit reads device free memory; it does not know the launch's cgroup)."""
    def estimator(s: LaunchSpec) -> MemoryEstimate:
        return estimate(s, devices, read_header)

    base = estimator(spec)
    freed = freed_by(evicted, picture)
    notes: list[str] = []
    fit = llama_fit(spec, base, estimator, fit_view or picture, freed)
    if fit is not None and fit.ctx < fit.full_ctx:
        spec = replace(spec, ctx_size=fit.ctx)
        base = estimator(spec)
        target = f"-fitt {'/'.join(str(t) for t in fit.target_mib)} MiB free on " \
                 f"{', '.join(fit.devices)}"
        if fit.ctx > fit.min_ctx or _worst(judge(base, _fit_targets(spec, base, fit_view or
                                                                    picture)[0], freed)) \
                == "fits":
            notes.append(f"no -c: llama.cpp's fit will shrink the context from "
                         f"{fit.full_ctx} to -c {fit.ctx}, the largest that leaves {target} "
                         f"(not below -fitc {fit.min_ctx}); judged at -c {fit.ctx}")
        else:
            notes.append(f"no -c: llama.cpp's fit cannot leave {target} even at -fitc "
                         f"{fit.min_ctx}; it runs at -c {fit.ctx}, judged here")
        if fit.ctx == fit.min_ctx and spec.n_gpu_layers is None and fit.devices != (HOST,):
            notes.append("at its minimum context llama.cpp's fit may also move layers to the "
                         "CPU (-ngl unset); that is not simulated here")
    verdicts = judge(base, picture, freed)
    grown = judge(base, picture, freed, include_growth=True) if _grows(base) else ()
    fixes: list[Fix] = []
    if with_fixes and _worst(verdicts) != "fits":
        evicted_pids = {p.pid for p in evicted}
        fixes = suggest(spec, base, estimator, picture, freed,
                        [p for p in running if p.pid not in evicted_pids], read_header)
    bounds: list[Fix] = []
    if grown and _worst(verdicts) != "oom" and _worst(grown) == "oom":
        bounds = bound_growth(spec, base, estimator, picture, freed)
    if not verdicts:
        notes.append("no device with a known free figure: nothing to judge")
    return Prediction(base, verdicts, tuple(p.name for p in evicted), tuple(fixes),
                      tuple(notes), grown, tuple(bounds), fit)
