"""What an estimate is made of: components per device, each with the formula behind it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from collectors.base import DeviceSample

HOST = "host"
ESTIMATOR_VERSION = 5  # bump when a formula changes; stored with every estimate (2-4: issue 17)

Residency = Literal["device", "anon", "file"]
When = Literal["load", "grows"]


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """A GPU the estimate may place memory on. ``overhead_bytes`` is the per-process
    driver context (CUDA context + cuBLAS workspaces: ~0.25-0.6 GiB, estimation.md 1c) that no
    llama.cpp number includes; calibrate it per GPU."""

    device_id: str
    total_bytes: int | None = None
    free_bytes: int | None = None
    memory_kind: str = "dedicated"
    overhead_bytes: int = 300 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Component:
    name: str  # weights, kv, kv_swa, rs, compute, output, draft_weights, draft_kv, ...
    device: str  # a DeviceInfo.device_id or "host"
    bytes: int
    formula: str  # how the number was computed, with its source
    residency: Residency = "device"  # host memory: anonymous or page cache (mmap)
    when: When = "load"  # "grows": an upper bound reached at run time, not at load
    buffer: str | None = None  # llama.cpp's buffer type where it says (AMX, CPU_REPACK, CPU)


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    engine: str
    model_path: str | None
    components: tuple[Component, ...]
    notes: tuple[str, ...] = ()
    n_ctx: int | None = None  # total cells of the full-attention cache
    n_ctx_seq: int | None = None  # cells per stream = the most one slot can use
    n_seq_max: int | None = None
    n_stream: int | None = None
    kv_unified: bool | None = None
    flash_attn: bool | None = None
    version: int = ESTIMATOR_VERSION
    devices: tuple[str, ...] = field(default_factory=tuple)
    # Of the mmap'd host weights, the bytes read a row at a time (token_embd: get_rows), so
    # never wholly resident; the rest is read in full for every token.
    host_sparse_bytes: int = 0
    # --mlock with mmap: the mapped weights are locked in memory, so they must fit
    weights_locked: bool = False
    # what is not derived for this launch, or rests on a default for a key the file lacks
    # (monitor/estimate/certainty.py); empty: every component follows a checked rule
    approximate: tuple[str, ...] = ()

    @property
    def cells(self) -> int | None:
        if self.n_ctx_seq is None or self.n_stream is None:
            return None
        return self.n_ctx_seq * self.n_stream

    def total_bytes(
        self, name: str | None = None, device: str | None = None, include_growth: bool = False
    ) -> int:
        return sum(
            c.bytes
            for c in self.components
            if (name is None or c.name == name)
            and (device is None or c.device == device)
            and (include_growth or c.when == "load")
        )

    def by_device(self, include_growth: bool = False) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.components:
            if include_growth or c.when == "load":
                out[c.device] = out.get(c.device, 0) + c.bytes
        return out


def devices_from_samples(samples: Iterable[DeviceSample], overhead_bytes: int) -> list[DeviceInfo]:
    """The GPUs of a sample as placement targets (host RAM is implicit)."""
    return [
        DeviceInfo(d.device_id, d.total_bytes, d.free_bytes, d.memory_kind, overhead_bytes)
        for d in samples
        if d.device_id != HOST
    ]
