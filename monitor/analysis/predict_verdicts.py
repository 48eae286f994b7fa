"""Per-device verdicts (fits / tight / thrash / oom) of an estimate against the memory
picture, the result types, and the searches (largest -c, largest -ngl) that use them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from monitor.analysis.picture import Picture, ProcessUse
from monitor.estimate import MemoryEstimate
from monitor.estimate.kv import EstimateError
from monitor.estimate.model import HOST
from monitor.servers.spec import LaunchSpec

if TYPE_CHECKING:
    from monitor.analysis.predict_fix_types import Fix as Fix
    from monitor.analysis.predict_fix_types import LlamaFit as LlamaFit


def __getattr__(name: str) -> Any:
    """Fix and LlamaFit live in monitor/analysis/predict_fix_types.py, built only when a
    launch needs a fix or llama.cpp's fit picks its -c (issue 32 item 4)."""
    if name in ("Fix", "LlamaFit"):
        from monitor.analysis import predict_fix_types

        return getattr(predict_fix_types, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
