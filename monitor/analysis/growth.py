"""Why a server holds more than its estimate at load: growth split into named causes, each
with the line of evidence it comes from (issue 18 point 5).

growth = measured (monitor/analysis/measured.py) - the estimate's load total. llama-server
grows at run time by host buffers it fills with use (estimation.md 1c): the prompt cache
(``--cache-ram``, 8192 MiB by default) and the context checkpoints of its slots
(``-ctxcp``, 32 per slot). What they hold now is read from the server's own log
(monitor/logs/server_cache.py); each becomes a cause priced in bytes, with the fix that bounds
*that* buffer (``--cache-ram N``, ``-ctxcp N``; never a KV type for prompt-cache growth).
The rest is "unaccounted" only when it is beyond the tolerance (monitor/analysis/judge.py),
and then says what was checked and where the rest sits (GPU or host RAM).
Pure: the evidence is gathered at the edges (monitor/cli/diagnose.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from monitor.analysis.judge import Tolerance, is_over
from monitor.analysis.measured import Measured
from monitor.estimate.model import HOST, MemoryEstimate
from monitor.logs.server_cache import ServerCacheReport
from monitor.units import MIB, gib, mib

PROMPT_CACHE = "prompt_cache"
CHECKPOINTS = "checkpoints"
UNACCOUNTED = "unaccounted"
GROWTH_COMPONENTS = (PROMPT_CACHE, CHECKPOINTS, UNACCOUNTED)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One run-time buffer as the server reports it."""

    cause: str  # PROMPT_CACHE | CHECKPOINTS
    bytes: int  # what it holds now
    source: str  # where it was read: "llama.cpp log /var/log/llama.log"
    quote: str  # the line it comes from (bounded; escaped when printed)
    count: int | None = None  # prompts cached, or checkpoints held
    limit_bytes: int | None = None  # prompt cache: the --cache-ram limit
    per_slot_max: int | None = None  # checkpoints: -ctxcp
    slot_sizes: tuple[tuple[int, ...], ...] = ()  # checkpoints: each slot's, oldest first


@dataclass(frozen=True, slots=True)
class Cause:
    component: str  # PROMPT_CACHE | CHECKPOINTS | UNACCOUNTED
    bytes: int
    cause: str  # one sentence
    evidence: str | None  # 'llama.cpp log /x: "cache state: ..."'; None for the remainder
    fix: str | None = None
    frees_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Growth:
    growth_bytes: int  # measured - the estimate at load
    causes: tuple[Cause, ...]
    checked: tuple[str, ...]  # every source looked at, and what it said


def evidence_from_log(report: ServerCacheReport, source: str) -> tuple[list[Evidence], list[str]]:
    """The log's figures as evidence, and one line per thing checked in it."""
    out: list[Evidence] = []
    checked: list[str] = []
    if report.cache_bytes is not None and report.cache_line is not None:
        out.append(
            Evidence(
                PROMPT_CACHE,
                report.cache_bytes,
                source,
                report.cache_line,
                report.cache_prompts,
                report.cache_limit_bytes,
            )
        )
        checked.append(f"{source}: prompt cache holds {mib(report.cache_bytes, 0)}")
    elif report.cache_disabled:
        checked.append(f"{source}: the prompt cache is disabled")
    else:
        checked.append(f"{source}: no 'cache state' line (some builds print it only at -lv 4)")
    if report.checkpoints:
        last = max(report.checkpoints, key=lambda s: s.bytes)
        n = sum(len(s.sizes_bytes) for s in report.checkpoints)
        out.append(
            Evidence(
                CHECKPOINTS,
                report.checkpoint_bytes,
                source,
                last.line,
                n,
                None,
                report.checkpoints_max,
                tuple(s.sizes_bytes for s in report.checkpoints),
            )
        )
        checked.append(
            f"{source}: {n} context checkpoints in {len(report.checkpoints)} slot(s), "
            f"{mib(report.checkpoint_bytes, 0)}"
        )
    elif report.checkpoint_lines == 0:
        checked.append(f"{source}: no context checkpoint created")
    return out, checked


def _prompt_cache_cause(ev: Evidence) -> Cause:
    """The fix caps the cache at half of what it holds (256 MiB steps; 0 turns it off)."""
    cap_mib = int(ev.bytes / MIB / 2) // 256 * 256
    limit = f"limit {mib(ev.limit_bytes, 0)}" if ev.limit_bytes is not None else "its limit"
    prompts = f" for {ev.count} prompt(s)" if ev.count is not None else ""
    return Cause(
        PROMPT_CACHE,
        ev.bytes,
        f"prompt cache: {mib(ev.bytes, 0)} of host RAM held{prompts}; it fills up to "
        f"--cache-ram ({limit}) and stays",
        f"{ev.source}: '{ev.quote}'",
        f"--cache-ram {cap_mib}" + (" (off)" if cap_mib == 0 else ""),
        max(0, ev.bytes - cap_mib * MIB),
    )


def _checkpoints_cause(ev: Evidence) -> Cause:
    """The fix keeps a quarter of -ctxcp per slot (of the most a slot holds when -ctxcp is
    not logged); it frees each slot's oldest beyond that."""
    most = max((len(s) for s in ev.slot_sizes), default=0)
    per_slot = ev.per_slot_max if ev.per_slot_max and ev.per_slot_max > 0 else most
    keep = max(1, per_slot // 4)
    frees = sum(sum(s[: max(0, len(s) - keep)]) for s in ev.slot_sizes)
    return Cause(
        CHECKPOINTS,
        ev.bytes,
        f"context checkpoints: {ev.count} held by {len(ev.slot_sizes)} slot(s), "
        f"{mib(ev.bytes, 0)} of host RAM (-ctxcp {per_slot or '?'} per slot)",
        f"{ev.source}: '{ev.quote}'",
        f"-ctxcp {keep}",
        frees,
    )


def _where(measured: Measured, est: MemoryEstimate) -> str:
    """Which side of the estimate the excess sits on: the GPUs or host RAM."""
    loads = est.by_device()
    parts = []
    on_gpus = sum(b for d, b in loads.items() if d != HOST)
    if measured.device_bytes is not None and (measured.device_bytes or on_gpus):
        dev = measured.device_bytes - on_gpus
        parts.append(f"{'+' if dev >= 0 else '-'}{gib(abs(dev))} on the GPUs")
    if measured.host_anon_bytes is not None or measured.host_file_bytes is not None:
        host = (measured.host_anon_bytes or 0) + (measured.host_file_bytes or 0)
        host -= loads.get(HOST, 0)
        parts.append(f"{'+' if host >= 0 else '-'}{gib(abs(host))} in host RAM")
    return ", ".join(parts)


def attribute_growth(
    measured: Measured,
    est: MemoryEstimate,
    evidence: Sequence[Evidence] = (),
    checked: Sequence[str] = (),
    tolerance: Tolerance | None = None,
) -> Growth:
    """Growth over the estimate at load, split into the causes the evidence names; the
    remainder is "unaccounted" only when it is over ``tolerance``."""
    tol = tolerance or Tolerance()
    total = measured.total_bytes
    estimated = est.total_bytes()
    if total is None:
        return Growth(0, (), tuple(checked))
    growth = total - estimated
    causes: list[Cause] = []
    for ev in evidence:
        if ev.bytes <= 0:
            continue
        if ev.cause == PROMPT_CACHE:
            causes.append(_prompt_cache_cause(ev))
        elif ev.cause == CHECKPOINTS:
            causes.append(_checkpoints_cause(ev))
    explained = sum(c.bytes for c in causes)
    rest = growth - explained
    if is_over(total, estimated + explained, tol):
        bound = est.total_bytes("cache_ram", include_growth=True) + est.total_bytes(
            "checkpoints", include_growth=True
        )
        named = {c.component for c in causes}
        unknown = [
            name
            for name, comp in (("prompt cache", PROMPT_CACHE), ("checkpoints", CHECKPOINTS))
            if comp not in named
        ]
        looked = "; ".join(checked) if checked else "no server log known"
        maybe = (
            f"; the {' and '.join(unknown)} may hold up to {gib(bound)} (not in the evidence: "
            "start llama-server with --log-file and -lv 4, or pass diagnose --log)"
            if bound and unknown and not evidence
            else ""
        )
        causes.append(
            Cause(
                UNACCOUNTED,
                rest,
                f"{gib(rest)} measured beyond the model's own buffers and explained by no "
                f"evidence ({_where(measured, est)}); checked: {looked}{maybe}",
                None,
            )
        )
    return Growth(growth, tuple(causes), tuple(checked))
