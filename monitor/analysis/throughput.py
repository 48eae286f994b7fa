"""Decode speed as a roofline per device, and whether a draft model can win.

One forward pass over ``tokens`` tokens takes, on each device that holds layers,
``max(bytes read / bandwidth, FLOPs / peak FLOP/s)``: the active weights there are read
once whatever the batch, and each token costs ``2 x active parameters`` FLOPs. The devices
run one after the other (a layer split), so the pass takes the sum. KV reads are left out:
they depend on how full the context is and are small next to the weights at short ones.

Speculative decoding (Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via
Speculative Decoding", ICML, eq. 1): with ``n`` tokens drafted per cycle and each accepted
with probability ``a``, a cycle yields ``(1 - a^(n+1)) / (1 - a)`` tokens on average, and
takes ``n`` draft passes of 1 token plus one target pass verifying ``n + 1`` tokens. On a
bandwidth-bound device the verification costs what one token does; on a compute-bound one
(layers in host RAM on a CPU) it costs ``n + 1`` times as much, and the draft loses.

Pure: the peaks and the bytes come in, seconds and tokens/s go out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from monitor.errors import VramscopeError

# Per GPU: (memory bandwidth in GB/s and dense FP16 tensor TFLOPS with FP16 accumulate, no
# sparsity), from the vendors' spec sheets and architecture whitepapers; the GeForce Ada
# figures are their "AI TOPS" (FP8/INT4 with sparsity) scaled down to dense FP16, so they
# are approximate. Matched by name, the longest key first ("RTX 4060 Ti" before "RTX 4060").
GPU_TABLE: dict[str, tuple[float, float]] = {
    "RTX 3060": (360.0, 51.0),
    "RTX 3090": (936.0, 142.0),
    "RTX 4060 Laptop": (256.0, 29.0),
    "RTX 4060 Ti": (288.0, 44.0),
    "RTX 4060": (272.0, 30.0),
    "RTX 4070": (504.0, 58.0),
    "RTX 4090": (1008.0, 165.0),
    "A100-PCIE-40GB": (1555.0, 312.0),
    "A100-SXM4-40GB": (1555.0, 312.0),
    "A100": (2039.0, 312.0),
    "H100 PCIe": (2000.0, 756.0),
    "H100": (3350.0, 989.0),
    "H200": (4800.0, 989.0),
}
GPU_MATMUL_EFFICIENCY = 0.5
"""The share of the dense FP16 tensor peak llama.cpp's quantized matmuls reach: an order of
magnitude (prompt processing in llama-bench runs at a third to a half of it). Decode and
small verification batches are bandwidth-bound on a GPU, so the figure rarely decides."""

HOST_GFLOPS_PER_CORE = 50.0
"""Host peak = physical cores x this. An assumption, not a measurement: AVX2 FMA at ~3 GHz
peaks near 96 fp32 GFLOP/s per core and llama.cpp's quantized CPU matmuls reach a fraction
of it; 50 is the order of magnitude. The cores are this machine's (for ``--state`` of
another box, give ``--flops host=TFLOPS``)."""

DEFAULT_ACCEPT = 0.7  # per drafted token: an assumed typical same-family draft, --accept
DEFAULT_N_DRAFT = 3  # llama.cpp's --spec-draft-n-max default (estimation.md 1f)


@dataclass(frozen=True, slots=True)
class DevicePeak:
    """What one device can do; None: not known (no table entry, no flag)."""

    bandwidth_bytes_per_s: float | None
    flops_per_s: float | None
    source: str  # where the figures come from, for the notes


@dataclass(frozen=True, slots=True)
class Work:
    """What a pass reads and computes on one device, per token."""

    device: str
    weight_bytes: float  # active weights, read once per pass
    params: float  # active parameters: 2 x params FLOPs per token


def gpu_peak(name: str | None) -> DevicePeak | None:
    """The table's figures for a GPU by its reported name (``NVIDIA GeForce RTX 4060``)."""
    if not name:
        return None
    low = name.lower()
    for key in sorted(GPU_TABLE, key=len, reverse=True):
        if key.lower() in low:
            gbs, tflops = GPU_TABLE[key]
            return DevicePeak(
                gbs * 1e9,
                tflops * 1e12 * GPU_MATMUL_EFFICIENCY,
                f"table: {key} {gbs:g} GB/s, {tflops:g} TFLOPS FP16 x {GPU_MATMUL_EFFICIENCY:g}",
            )
    return None


def host_flops(physical_cores: int | None) -> float | None:
    return None if not physical_cores else physical_cores * HOST_GFLOPS_PER_CORE * 1e9


def pass_seconds(work: Iterable[Work], peaks: Mapping[str, DevicePeak], tokens: int) -> float:
    """The roofline time of one pass over ``tokens`` tokens. Raises :class:`Unknown` naming
    the first device whose bandwidth or peak is not known."""
    total = 0.0
    for w in work:
        if w.weight_bytes <= 0:
            continue
        peak = peaks.get(w.device)
        if peak is None or peak.bandwidth_bytes_per_s is None:
            raise Unknown(w.device, "bandwidth", "--bw")
        if peak.flops_per_s is None:
            raise Unknown(w.device, "peak FLOP/s", "--flops")
        read = w.weight_bytes / peak.bandwidth_bytes_per_s
        compute = 2 * w.params * tokens / peak.flops_per_s
        total += max(read, compute)
    return total


class Unknown(VramscopeError):
    """A device's figure is not known: the throughput is "unknown", not a guess (predict
    shows the message in place of a figure; it never ends a command)."""

    def __init__(self, device: str, what: str, flag: str) -> None:
        unit = "GB/s" if flag == "--bw" else "TFLOPS"
        super().__init__(f"no {what} known for {device} (give {flag} {device}={unit})")


def expected_tokens(accept: float, n_draft: int) -> float:
    """Tokens per cycle: ``(1 - a^(n+1)) / (1 - a)`` (Leviathan et al. 2023, eq. 1)."""
    if accept >= 1.0:
        return n_draft + 1.0
    return (1 - accept ** (n_draft + 1)) / (1 - accept)


def break_even_accept(cycle_seconds: float, plain_seconds: float, n_draft: int) -> float | None:
    """The acceptance rate at which drafting matches ``plain_seconds`` per token; 0.0 when it
    wins at any rate, None when it cannot win even with every draft token accepted."""
    needed = cycle_seconds / plain_seconds  # tokens a cycle must yield
    if needed <= 1.0:
        return 0.0
    if needed > n_draft + 1:
        return None
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if expected_tokens(mid, n_draft) < needed:
            low = mid
        else:
            high = mid
    return high


@dataclass(frozen=True, slots=True)
class Speculation:
    """Expected decode speed with and without the draft (rounded to 0.01)."""

    plain_tokens_per_s: float
    draft_tokens_per_s: float
    accept: float
    n_draft: int
    gain_pct: float  # (with / without - 1) x 100
    break_even_accept: float | None  # None: cannot win even at 1.0
    target_bound: str  # "compute" / "bandwidth": what limits the verification pass

    @property
    def wins(self) -> bool:
        return self.draft_tokens_per_s > self.plain_tokens_per_s

    @property
    def verdict(self) -> str:
        if self.wins:
            return f"the draft wins (+{self.gain_pct:.0f} %)"
        return f"the draft loses ({self.gain_pct:.0f} %)".replace("-", "\u2212")


def plain_tokens_per_s(target: Iterable[Work], peaks: Mapping[str, DevicePeak]) -> float:
    return 1 / pass_seconds(target, peaks, 1)


def speculate(
    target: Iterable[Work],
    draft: Iterable[Work],
    baseline: Iterable[Work],
    peaks: Mapping[str, DevicePeak],
    accept: float,
    n_draft: int,
) -> Speculation:
    """``target``/``draft``: the placement with the draft; ``baseline``: the target's
    placement without it (the layers the draft displaced back on the GPU)."""
    target, draft = list(target), list(draft)
    plain = pass_seconds(baseline, peaks, 1)
    verify = pass_seconds(target, peaks, n_draft + 1)
    reads = sum(
        w.weight_bytes / (peaks[w.device].bandwidth_bytes_per_s or 1)
        for w in target
        if w.weight_bytes > 0
    )
    cycle = verify + n_draft * pass_seconds(draft, peaks, 1)
    with_draft = expected_tokens(accept, n_draft) / cycle
    base = 1 / plain
    return Speculation(
        round(base, 2),
        round(with_draft, 2),
        accept,
        n_draft,
        round((with_draft / base - 1) * 100, 1),
        None if (even := break_even_accept(cycle, plain, n_draft)) is None else round(even, 2),
        "compute" if verify > reads * 1.0001 else "bandwidth",
    )
