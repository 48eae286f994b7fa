"""Will a load fit? Estimate + the memory picture (+ what llama-swap unloads first) -> verdict.

Per device: ``need`` = the estimate's load-time bytes on it; a unified-memory GPU shares its
pool with the host, so host components count against it too. ``room`` = what the picture
says a new load can get (``available``), plus what the evicted models free. Verdict:
``oom`` when need > room, ``tight`` when need eats into the safety margin, else ``fits``.

Fixes are priced by re-running the estimator on a changed launch (``dataclasses.replace``
of the spec), so each one says exactly how many bytes it frees on each device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from monitor.engines.spec import LaunchSpec
from monitor.estimate import MemoryEstimate, estimate
from monitor.estimate.kv import EstimateError
from monitor.estimate.model import HOST, DeviceInfo
from monitor.picture import Picture, ProcessUse

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
class Prediction:
    estimate: MemoryEstimate
    devices: tuple[DeviceVerdict, ...]
    evicted: tuple[str, ...] = ()
    fixes: tuple[Fix, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> Verdict:
        worst = max((d.verdict for d in self.devices), key=_ORDER.__getitem__, default="fits")
        return worst


def _unified_ids(picture: Picture) -> set[str]:
    return {d.device_id for d in picture.devices.values() if d.memory_kind == "unified"}


def need_by_device(est: MemoryEstimate, picture: Picture) -> dict[str, int]:
    """Load-time bytes per picture device; host components also load a unified pool."""
    need = est.by_device()
    host_need = need.get(HOST, 0)
    for device_id in _unified_ids(picture):
        need[device_id] = need.get(device_id, 0) + host_need
    return need


def judge(est: MemoryEstimate, picture: Picture, freed: dict[str, int] | None = None
          ) -> tuple[DeviceVerdict, ...]:
    freed = freed or {}
    out = []
    for device_id, need in sorted(need_by_device(est, picture).items()):
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
        from monitor.gguf import read_header as reader
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


def predict(spec: LaunchSpec, picture: Picture, devices: Sequence[DeviceInfo],
            evicted: Sequence[ProcessUse] = (), running: Sequence[ProcessUse] = (),
            read_header: Callable[[str], Any] | None = None,
            with_fixes: bool = True) -> Prediction:
    def estimator(s: LaunchSpec) -> MemoryEstimate:
        return estimate(s, devices, read_header)

    base = estimator(spec)
    freed = freed_by(evicted, picture)
    verdicts = judge(base, picture, freed)
    fixes: list[Fix] = []
    if with_fixes and _worst(verdicts) != "fits":
        evicted_pids = {p.pid for p in evicted}
        fixes = suggest(spec, base, estimator, picture, freed,
                        [p for p in running if p.pid not in evicted_pids], read_header)
    notes = [] if verdicts else ["no device with a known free figure: nothing to judge"]
    return Prediction(base, verdicts, tuple(p.name for p in evicted), tuple(fixes),
                      tuple(notes))
