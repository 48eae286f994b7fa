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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from monitor.analysis.picture import Picture, ProcessUse, picture_from_snapshot
from monitor.analysis.throughput import DevicePeak, Speculation, Work
from monitor.engines.spec import LaunchSpec
from monitor.errors import VramscopeError
from monitor.estimate import CpuFeatures, MemoryEstimate, estimate, features_from_flags
from monitor.estimate.kv import EstimateError
from monitor.estimate.model import HOST, DeviceInfo
from monitor.units import GIB, MIB
from monitor.units import gib_number as _gib

if TYPE_CHECKING:
    from collectors.base import CgroupMemory, Snapshot
    from monitor.analysis.router_predict import RouterView

FIT_TARGET_MIB = 1024  # llama.cpp -fitt default, per device (common/common.h)
FIT_MIN_CTX = 4096  # llama.cpp -fitc default

# "thrash": what must be resident fits, but not the mmap'd weights every token reads: the
# kernel evicts their clean file pages instead of killing (memcg reclaim, mm/vmscan.c),
# so the server runs and re-reads them from disk at each token.
Verdict = Literal["fits", "tight", "thrash", "oom"]
_ORDER = {"fits": 0, "tight": 1, "thrash": 2, "oom": 3}


@dataclass(frozen=True, slots=True)
class DeviceVerdict:
    device_id: str
    verdict: Verdict
    need_bytes: int
    room_bytes: int  # available now + freed by evictions
    margin_bytes: int
    freed_bytes: int = 0
    binding: str = ""
    # of ``need_bytes``, the mmap'd weights the kernel may evict (page cache), and of those
    # the ones read at every token (token_embd is read a row at a time)
    evictable_bytes: int = 0
    hot_evictable_bytes: int = 0

    @property
    def must_fit_bytes(self) -> int:
        """What the kernel cannot evict: anonymous memory, VRAM, GTT, locked pages."""
        return self.need_bytes - self.evictable_bytes

    @property
    def not_resident_bytes(self) -> int:
        """Of the weights read at every token, how much cannot stay in memory."""
        return max(0, self.must_fit_bytes + self.hot_evictable_bytes - self.room_bytes)

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
    # distinct prompt tokens cached before what grows passes the room (0: the checkpoints
    # alone do); None when nothing passes it or no per-token figure is known
    overflow_tokens: int | None = None
    evictor: str = "llama-swap"  # who unloads ``evicted`` first: "llama-swap", "the router"

    @property
    def verdict(self) -> Verdict:
        return _worst(self.devices)

    @property
    def grown_verdict(self) -> Verdict | None:
        """The verdict once every growing cache is full; None when nothing grows."""
        return _worst(self.grown) if self.grown else None


def _unified_ids(picture: Picture) -> set[str]:
    return {d.device_id for d in picture.devices.values() if d.memory_kind == "unified"}


def need_by_device(
    est: MemoryEstimate, picture: Picture, include_growth: bool = False
) -> dict[str, int]:
    """Load-time bytes per picture device (with ``include_growth``: once the caches fill);
    host components also load a unified pool."""
    need = est.by_device(include_growth)
    host_need = need.get(HOST, 0)
    for device_id in _unified_ids(picture):
        need[device_id] = need.get(device_id, 0) + host_need
    return need


def evictable_host_bytes(est: MemoryEstimate) -> tuple[int, int]:
    """(mmap'd weights in host memory the kernel may evict, of those the ones every token
    reads): components with ``file`` residency, unless ``--mlock`` pins them."""
    if est.weights_locked:
        return 0, 0
    mapped = sum(c.bytes for c in est.components if c.residency == "file" and c.when == "load")
    return mapped, max(0, mapped - est.host_sparse_bytes)


def _verdict(must: int, hot: int, need: int, room: int, margin: int) -> Verdict:
    if must > room:
        return "oom"
    if must + hot > room:
        return "thrash"
    return "tight" if must + hot > room - margin else "fits"


def judge(
    est: MemoryEstimate,
    picture: Picture,
    freed: dict[str, int] | None = None,
    include_growth: bool = False,
) -> tuple[DeviceVerdict, ...]:
    """Per device: ``oom`` when what cannot be evicted passes the room, ``thrash`` when
    that fits but not with the weights read at every token, ``tight`` inside the margin."""
    freed = freed or {}
    mapped, hot = evictable_host_bytes(est)
    out = []
    for device_id, need in sorted(need_by_device(est, picture, include_growth).items()):
        pic = picture.get(device_id)
        if pic is None or pic.available_bytes is None or need <= 0:
            continue
        extra = freed.get(device_id, 0)
        if pic.memory_kind == "unified":
            extra += freed.get(HOST, 0)
        room = pic.available_bytes + extra
        evict, evict_hot = (mapped, hot) if pic.memory_kind in ("host", "unified") else (0, 0)
        verdict = _verdict(need - evict, evict_hot, need, room, pic.margin_bytes)
        out.append(
            DeviceVerdict(
                device_id,
                verdict,
                need,
                room,
                pic.margin_bytes,
                extra,
                pic.binding,
                evict,
                evict_hot,
            )
        )
    return tuple(out)


def freed_by(processes: Iterable[ProcessUse], picture: Picture) -> dict[str, int]:
    """Bytes each device gets back when these processes stop (as measured). Where a
    cgroup binds the new load, only what a process in that cgroup frees makes room."""
    pids = {p.pid for p in processes}
    out: dict[str, int] = {}
    for pic in picture.devices.values():
        in_cgroup = (
            pic.binding.removeprefix("cgroup ") if pic.binding.startswith("cgroup ") else None
        )
        for use in pic.processes:
            if use.pid in pids and (in_cgroup is None or use.cgroup_path == in_cgroup):
                out[pic.device_id] = out.get(pic.device_id, 0) + use.bytes
    return out


def _worst(verdicts: Sequence[DeviceVerdict]) -> Verdict:
    return max((d.verdict for d in verdicts), key=_ORDER.__getitem__, default="fits")


Estimator = Callable[[LaunchSpec], MemoryEstimate]


def fit_ctx(
    spec: LaunchSpec, estimator: Estimator, picture: Picture, freed: dict[str, int], ceiling: int
) -> int | None:
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


def _offload_ngl(
    spec: LaunchSpec,
    base: MemoryEstimate,
    estimator: Estimator,
    picture: Picture,
    freed: dict[str, int],
) -> int | None:
    """When host memory (or its cgroup) is what is short and a dedicated GPU is there: the
    fewest GPU layers above the launch's -ngl with which everything fits (the host keeps
    less as -ngl rises, the GPU more), or None. Unset/auto/all -ngl: nothing to add."""
    host = next((v for v in judge(base, picture, freed) if v.device_id == HOST), None)
    gpus = [p for p in picture.devices.values() if p.memory_kind == "dedicated"]
    now = spec.n_gpu_layers
    if host is None or host.verdict == "fits" or not gpus:
        return None
    if not isinstance(now, int) or now < 0:
        return None

    def fits(ngl: int) -> bool:
        try:
            changed = estimator(replace(spec, n_gpu_layers=ngl))
        except EstimateError:
            return False
        return _worst(judge(changed, picture, freed)) == "fits"

    for ngl in (*range(now + 1, now + 8), *range(now + 8, now + 258, 4)):
        if fits(ngl):
            return int(ngl)
    return None


def _largest_ngl(
    spec: LaunchSpec, estimator: Estimator, picture: Picture, freed: dict[str, int]
) -> int | None:
    """The most GPU layers (-ngl) that fit: GPU need grows with -ngl, so bisect."""

    def fits(ngl: int) -> bool:
        try:
            return (
                _worst(judge(estimator(replace(spec, n_gpu_layers=ngl)), picture, freed)) == "fits"
            )
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


RELEVANT_MIN_BYTES = 64 * MIB
"""A fix must give a device that does not fit at least this much room (or its whole
shortfall, when that is less); one that frees nothing there is not offered."""


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
    minimum = min(full, spec.fit_ctx if spec.fit_ctx is not None else FIT_MIN_CTX)
    ids = tuple(view.devices)
    if _worst(judge(base, view, freed)) == "fits":
        return LlamaFit(full, full, minimum, targets, ids)
    best = fit_ctx(spec, estimator, view, freed, full) or 0
    return LlamaFit(max(best, minimum), full, minimum, targets, ids)


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

EXIT_FITS, EXIT_OOM = 0, 1
EXIT_GROWS_OOM = 3  # fits at load, not once the prompt cache / checkpoints fill
EXIT_THRASH = 4  # runs, but its mmap'd weights cannot all stay resident: slow, not killed


@dataclass
class PredictRequest:
    """One question: will this launch (``command``, or llama-swap's ``model_id``) fit?
    ``state``/``at`` and the cgroup fields are read by the CLI's edge (what box state, which
    cgroup); :func:`answer` reads the rest."""

    command: list[str]
    model_id: str | None = None
    state: Path | None = None
    at: str | None = None
    swap_config: Path | None = None
    swap_url: str | None = None
    # a llama-server router's model id (monitor/analysis/router_predict.py): --router URL,
    # --router-config FILE.ini, or (both None, no swap_config) the router on this box
    router_url: str | None = None
    router_config: Path | None = None
    ask_routers: bool = True  # False: a recorded state (the TUI's replay): files only
    # a live process's allow-listed environment (environ.read_llama_env): a router's
    # children inherit the router's LLAMA_ARG_* (router_predict.py); None: none read
    env_for: Callable[[int], Mapping[str, str]] | None = None
    margin_gib: float = 0.5
    want_fit_ctx: bool = False
    bandwidth_gbs: dict[str, float] = field(default_factory=dict)
    flops_tflops: dict[str, float] = field(default_factory=dict)  # --flops DEV=TFLOPS
    accept: float | None = None  # --accept RATE (None: DEFAULT_ACCEPT)
    cgroup: str | None = None  # --cgroup PATH: the memory cgroup the launch will run in
    unit: str | None = None  # --unit NAME: a systemd unit's cgroup (system.slice/NAME)
    # --growth-horizon / [predict] growth_horizon_tokens: a cache that overflows only after
    # more distinct prompt tokens than this is a note, not exit 3/4
    growth_horizon_tokens: int = 1_000_000
    # ask the llama-server binary the command names which flags it takes (its --help):
    # the CLI on the launching box does; the daemon's HTTP API never runs a named binary
    check_engine_flags: bool = False
    # --cpu-features: the CPU that will run the server; None: the box state's
    cpu_features: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Throughput:
    """Expected decode speed by the roofline (monitor/analysis/throughput.py). ``unknown``:
    why there is no figure (a device with no bandwidth or peak known), else None."""

    tokens_per_s: float | None  # this launch, drafting off (or no draft)
    speculation: Speculation | None = None  # with the draft vs its baseline
    baseline: str = ""  # the placement the draft is judged against: "no draft, -ngl 27"
    unknown: str | None = None
    sources: tuple[str, ...] = ()  # where each device's figures come from
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PredictResult:
    """The answer to a :class:`PredictRequest`: the verdicts (``prediction``), the picture
    they were judged against, the workflow's own notes (the launch's cgroup, llama-swap),
    ``--fit-ctx``'s answer, the expected tokens/s, and the exit code a script reads."""

    prediction: Prediction
    picture: Picture
    notes: tuple[str, ...] = ()  # before the prediction's and the estimate's own notes
    want_fit_ctx: bool = False
    fit_ctx: int | None = None  # the largest -c that fits (asked with want_fit_ctx)
    throughput: Throughput | None = None
    growth_horizon_tokens: int = 1_000_000
    command: tuple[str, ...] = ()  # the launch judged (a model id's: as its config renders it)

    @property
    def growth_within_horizon(self) -> bool:
        """Can the caches pass the room within the horizon (or is that unknown)?"""
        tokens = self.prediction.overflow_tokens
        return tokens is None or tokens <= self.growth_horizon_tokens

    @property
    def verdict(self) -> Verdict:
        return self.prediction.verdict

    @property
    def all_notes(self) -> tuple[str, ...]:
        return self.notes + self.prediction.notes + tuple(self.prediction.estimate.notes)

    @property
    def exit_code(self) -> int:
        """0 fits (at load and once the caches fill), 1 OOM at load (or no -c fits when
        ``--fit-ctx`` asked), 3 OOM once the caches fill, 4 runs but thrashes, at load or
        once the caches fill (its mmap'd weights do not all stay resident)."""
        if self.verdict == "oom" or (self.want_fit_ctx and self.fit_ctx is None):
            return EXIT_OOM
        grown = self.prediction.grown_verdict if self.growth_within_horizon else None
        if grown == "oom":
            return EXIT_GROWS_OOM
        return EXIT_THRASH if "thrash" in (self.verdict, grown) else EXIT_FITS


def _model_of(argv: tuple[str, ...] | list[str]) -> str | None:
    from monitor.engines import parse_command

    spec = parse_command(list(argv))
    return spec.model_path if spec is not None else None


def _spec_of(
    command: list[str], on_the_launching_box: bool, inherited: Mapping[str, str] | None = None
) -> LaunchSpec:
    """The launch asked about. ``-hf``: the CLI on the launching box finds the model in its
    user's llama.cpp cache (monitor/engines/hf_cache.py); the daemon's HTTP API does not
    look in its own. ``inherited``: the environment the launch inherits (a router's child:
    the router's allow-listed environment, router_predict.py); the command line wins."""
    from monitor.engines import parse_command
    from monitor.engines.hf_cache import own_cache_env

    env = {**(own_cache_env() if on_the_launching_box else {}), **(inherited or {})}
    spec = parse_command(list(command), env or None)
    if spec is None:
        raise EstimateError(f"not an inference server command: {' '.join(command[:3])} ...")
    return spec


def running_servers(picture: Picture) -> list[ProcessUse]:
    seen: dict[int, ProcessUse] = {}
    for pic in picture.devices.values():
        for use in pic.processes:
            if use.engine is not None and use.pid not in seen:
                seen[use.pid] = use
    return list(seen.values())


def swap_target(
    req: PredictRequest, picture: Picture, snap: Snapshot | None = None
) -> tuple[list[str], list[ProcessUse], list[str]]:
    """(command, processes llama-swap would stop first, notes) for ``predict MODEL_ID``.
    With ``snap``: a llama-swap model that runs a router runs when its router does, and
    stopping it stops the router's children too (monitor/analysis/swap_router.py)."""
    from monitor.integrations import llamaswap

    if req.swap_config is None:
        raise EstimateError(
            "predicting a llama-swap model needs --swap-config FILE (or "
            "[llama_swap] config in the config file)"
        )
    config = llamaswap.load_config(req.swap_config)
    target = llamaswap.resolve(config, req.model_id or "")
    servers = running_servers(picture)
    by_path = {p: u for u in servers if (p := _model_of(u.argv)) is not None}  # no -m: none
    running: dict[str, ProcessUse] = {}
    notes = []
    if req.swap_url:
        states = llamaswap.fetch_running(req.swap_url)
        ids = [m for m, state in states.items() if state not in ("stopped", "shutdown")]
    else:
        ids = [m.model_id for m in config.models.values() if _model_of(m.cmd) in by_path]
        notes.append(
            "running models matched by their -m path (give --swap-url for "
            "llama-swap's own /running)"
        )
    for model_id in ids:
        model = config.models.get(model_id)
        path = _model_of(model.cmd) if model else None
        if path is not None and path in by_path:
            running[model_id] = by_path[path]
    routed = _routed(config, snap, picture)
    if not req.swap_url:
        ids += [m for m in routed if m not in ids]
    evict_ids = llamaswap.evictions(config, list(ids), target.model_id)
    evicted = [running[m] for m in evict_ids if m in running]
    evicted += [u for m in evict_ids if m not in running for u in routed.get(m, ())]
    if evict_ids:
        notes.append(f"llama-swap unloads first: {', '.join(evict_ids)}")
    return list(target.cmd), evicted, notes


def _routed(config: Any, snap: Snapshot | None, picture: Picture) -> dict[str, list[ProcessUse]]:
    """llama-swap model ID -> the router and children it stops with that model."""
    if snap is None:
        return {}
    from monitor.analysis.swap_router import running_router_models

    uses = {u.pid: u for u in running_servers(picture)}
    return {
        m: [uses[p] for p in pids if p in uses]
        for m, pids in running_router_models(config, snap).items()
    }


def _target(
    req: PredictRequest, snap: Snapshot, picture: Picture
) -> tuple[list[str], list[ProcessUse], list[str], RouterView | None]:
    """(the launch, what is unloaded first, notes, the router or None): the command as
    given, or a model id's (a llama-server router's, else llama-swap's)."""
    if req.model_id is None:
        return req.command, [], [], None
    if _for_router(req):
        from monitor.analysis.router_predict import router_target

        return router_target(
            req.model_id,
            snap,
            picture,
            req.router_url,
            req.router_config,
            live=req.ask_routers and req.state is None and req.at is None,
            env_for=req.env_for,
        )
    from monitor.analysis.swap_router import swap_router_target

    routed = swap_router_target(req, snap, picture)
    if routed is not None:  # an id the router of a llama-swap model serves
        return routed
    command, evicted, notes = swap_target(req, picture, snap)
    return command, evicted, notes, None


def _refuse(spec: LaunchSpec, req: PredictRequest, router: bool) -> None:
    """EstimateError (one line) for a launch with no verdict to give."""
    if spec.role == "router":  # loads no model itself: its models are predicted by id
        where = f"llama-swap model {req.model_id} runs" if req.model_id else "the command is"
        raise EstimateError(
            f"{where} a llama-server router (--models-dir/--models-preset, no -m), which loads "
            "no model itself: predict one of its models by id (vramscope predict MODEL_ID, "
            "--router http://127.0.0.1:PORT or --router-config FILE.ini)"
        )
    if spec.refused:  # the engine would not start: no verdict to give
        what = "router" if router else "llama-swap"
        where = f"{what} model {req.model_id}: " if req.model_id is not None else ""
        raise EstimateError(where + spec.refused[0])


def _for_router(req: PredictRequest) -> bool:
    """A model id goes to a router when one is named, or no llama-swap config is."""
    return req.router_url is not None or req.router_config is not None or req.swap_config is None


def swap_cgroup(req: PredictRequest, snap: Snapshot) -> tuple[CgroupMemory | None, str | None]:
    """For ``predict MODEL_ID``: llama-swap's memory cgroup, as the snapshot recorded it
    (the models it starts inherit it); (None, None) otherwise."""
    if req.model_id is None:
        return None, None
    limits = {c.pid: c.cgroup for c in snap.cgroups}
    if _for_router(req):
        from monitor.engines.router import snapshot_links

        routers = [pid for pid in snapshot_links(snap, req.env_for)[0] if pid in limits]
        if len(routers) == 1:
            found = limits[routers[0]]
            return found, (
                f"the llama-server router (pid {routers[0]}) runs in the memory cgroup "
                f"{found.path}; the children it starts inherit it"
            )
        return None, None
    for proc in snap.processes:
        if proc.engine == "llama-swap" and proc.pid in limits:
            found = limits[proc.pid]
            return found, (
                f"llama-swap (pid {proc.pid}) runs in the memory cgroup "
                f"{found.path}; the models it starts inherit it"
            )
    return None, None


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
    names does not list one of its flags in ``--help`` (monitor/engines/server_help.py);
    nothing when the binary cannot be found or safely asked (the built-in table stands)."""
    from monitor.engines.recognise import unwrapped_command
    from monitor.engines.server_help import locate, server_flags, unknown_flags

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
        out[device] = DevicePeak(bw, flops, f"{device}: " + ("; ".join(where) or "nothing known"))
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
    per_param, active, embd, _ = facts
    out = []
    for c in est.components:
        if c.name == name and c.when == "load":
            size = max(0.0, (c.bytes - (embd if c.device == HOST else 0)) * active)
            out.append(Work(c.device, size, size / per_param))
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
