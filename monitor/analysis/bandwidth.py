"""The bandwidth ceiling of a placement: decode speed cannot beat memory bandwidth.

Each generated token reads every active weight once (and the KV in use), from the memory
that holds it, so ``tokens/s <= 1 / sum(bytes_on_memory / bandwidth_of_memory)``. With a
draft model, one target pass verifies ``n_draft + 1`` tokens at best; the ceiling then is
``(n_draft + 1) / (n_draft * t_draft + t_target)`` with every draft accepted, and the
acceptance the draft must reach just to break even with a placement without it is
``t_with_draft / t_baseline - 1`` extra tokens per pass. Layers pushed to the CPU to make
room for a draft slow every target pass; this shows when speculation cannot win it back.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.errors import UsageError
from monitor.estimate.model import MemoryEstimate


@dataclass(frozen=True, slots=True)
class Ceiling:
    seconds_per_pass: float  # target weights (+ KV) read once
    draft_seconds: float  # one draft token
    n_draft: int
    tokens_per_s: float  # no speculation
    best_tokens_per_s: float  # every draft token accepted

    def break_even_accepted(self, baseline: Ceiling) -> float:
        """Draft tokens that must be accepted per pass just to match ``baseline``."""
        cycle = self.seconds_per_pass + self.n_draft * self.draft_seconds
        return max(0.0, cycle / baseline.seconds_per_pass - 1)


def _seconds(
    est: MemoryEstimate, names: tuple[str, ...], bandwidth: dict[str, float], active: float
) -> float:
    total = 0.0
    for c in est.components:
        if c.name in names and c.when == "load":
            bw = bandwidth.get(c.device) or bandwidth.get("host")
            if not bw:
                raise UsageError(f"no bandwidth known for {c.device} (give --bw {c.device}=GB/s)")
            scale = active if c.name.endswith("weights") else 1.0
            total += c.bytes * scale / bw
    return total


def ceiling(
    est: MemoryEstimate,
    bandwidth: dict[str, float],
    n_draft: int = 3,
    active_fraction: float = 1.0,
    draft_active_fraction: float = 1.0,
) -> Ceiling:
    """``bandwidth``: bytes/s per device id and ``host``. ``active_fraction``: the share of
    weights read per token (MoE: non-expert + expert x used/count)."""
    t = _seconds(est, ("weights",), bandwidth, active_fraction)
    has_draft = any(c.name == "draft_weights" for c in est.components)
    td = _seconds(est, ("draft_weights",), bandwidth, draft_active_fraction) if has_draft else 0.0
    n = n_draft if has_draft else 0
    return Ceiling(
        t, td, n, 1 / t if t else float("inf"), (n + 1) / (t + n * td) if t else float("inf")
    )
