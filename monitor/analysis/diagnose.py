"""Why does a running model hold more than expected? Measured vs estimate vs budget, the
difference split by component, the cause in one sentence and fixes priced in GiB.

Each finding follows the engine's real rule (estimation.md section 1a, 3): with current
llama.cpp ``-c 8192 -np 16`` holds 8192 cells in total (``n_ctx_seq`` per slot), not 16 x
8192; ollama passes ``-c NumCtx x parallel``, so there parallel does multiply; a server
started without ``-c`` lets fit grow the context toward free memory. Fixes are priced by
re-estimating the changed launch, so "frees X GiB" is the estimator's own difference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from collectors.base import CgroupMemory
from monitor.analysis.growth import GROWTH_COMPONENTS, Evidence, attribute_growth
from monitor.analysis.judge import Tolerance, is_over
from monitor.analysis.measured import Measured
from monitor.estimate import MemoryEstimate
from monitor.estimate.kv import EstimateError
from monitor.servers.spec import LaunchSpec
from monitor.units import MIB
from monitor.units import gib_or_mib as gib  # 33 MiB is '33 MiB', not '0.0 GiB'

# mmap'd weights count as paged out when less than this share of them is resident, and at
# least EVICTED_MIN_BYTES are missing (small files come and go with the page cache).
EVICTED_SHARE = 0.5
EVICTED_MIN_BYTES = 256 * MIB


@dataclass(frozen=True, slots=True)
class Finding:
    component: str
    bytes: int
    cause: str
    fix: str | None = None
    frees_bytes: int = 0
    evidence: str | None = None  # the line a run-time cause was read from (analysis/growth.py)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    pid: int
    model: str
    measured_bytes: int | None  # None: unknown (monitor/analysis/measured.py), never judged as 0
    estimated_bytes: int
    budget_bytes: int | None
    findings: tuple[Finding, ...]
    summary: str
    verdict: str = "as_expected"  # as_expected | over | under | unknown | error
    parts: Measured | None = None  # the parts of measured_bytes (monitor/analysis/measured.py)
    checked: tuple[str, ...] = ()  # the server's sources looked at for growth, what they said
    cgroup: str | None = None  # the memory cgroup that would kill it: limit, room, members

    @property
    def excess_bytes(self) -> int | None:
        if self.measured_bytes is None:
            return None
        expected = self.budget_bytes if self.budget_bytes is not None else self.estimated_bytes
        return self.measured_bytes - expected


def _price(
    spec: LaunchSpec,
    est: MemoryEstimate,
    change: dict[str, Any],
    estimator: Callable[[LaunchSpec], MemoryEstimate],
    include_growth: bool = False,
) -> int:
    try:
        after = estimator(replace(spec, **change))
    except EstimateError:
        return 0
    return est.total_bytes(include_growth=include_growth) - after.total_bytes(
        include_growth=include_growth
    )


def _paged_out(load_mode: str | None, est: MemoryEstimate, m: Measured) -> Finding | None:
    """mmap'd weights the kernel took back from the page cache: the next tokens read them
    from disk. Only when the weights are mmap'd (llama.cpp's default; not --no-mmap, not
    --mlock) and the resident file-backed memory is well below them."""
    mapped = sum(c.bytes for c in est.components if c.residency == "file" and c.when == "load")
    dense = mapped - est.host_sparse_bytes  # token_embd is read by row: never all resident
    if dense <= 0 or m.host_file_bytes is None or load_mode not in (None, "mmap"):
        return None
    missing = dense - m.host_file_bytes
    if m.host_file_bytes >= dense * EVICTED_SHARE or missing < EVICTED_MIN_BYTES:
        return None
    return Finding(
        "weights_paged_out",
        missing,
        f"weights evicted from the page cache: {gib(m.host_file_bytes)} of the "
        f"{gib(dense)} mmap'd weights read every token are resident; the next "
        "tokens read the rest from disk (slow)",
        "--mlock (or free host memory)",
        0,
    )


def kv_over_p99(est: MemoryEstimate, p99_tokens: int | None) -> float | None:
    """How many times the p99 of tokens in use per busy slot (the daemon's /slots polls,
    monitor/cli/diagnose.py ``usage_p99``) one slot's KV cells (``n_ctx_seq``, the most a
    slot can use) hold: the one figure ``diagnose`` and the TUI show (:func:`times`).
    None when either is unknown."""
    if not p99_tokens or not est.n_ctx_seq:
        return None
    return est.n_ctx_seq / p99_tokens


def times(ratio: float) -> str:
    """``2.7×``: one decimal, so 2.7 and 4 are never both rounded to the same word."""
    return f"{ratio:.1f}×"


def _under_because(est: MemoryEstimate, m: Measured, tol: Tolerance) -> str | None:
    """Why a server holds less than its estimate, part by part, each only when it is short
    by more than the tolerance's bytes: mmap'd weights are page cache, read in as tokens
    use them and evictable (only ``host_file_bytes`` of them resident); host buffers take
    pages on first write (llama.cpp clears its KV at load, llama-kv-cache.cpp
    ``ggml_backend_buffer_clear``, but a compute buffer is touched only by the batches
    run); GPU memory below the estimate is said as it is."""
    load = [c for c in est.components if c.when == "load"]
    parts = []
    for residency, held, why in (
        ("file", m.host_file_bytes, "mmap'd weights resident (page cache: read in as tokens "
         "use them, and evictable)"),
        ("anon", m.host_anon_bytes, "host buffers resident (pages are taken on first write: "
         "compute buffers by the batches run so far)"),
        ("device", m.device_bytes, "estimated GPU memory held"),
    ):  # fmt: skip
        want = sum(c.bytes for c in load if c.residency == residency)
        if held is not None and want - held > tol.over_min_bytes:
            parts.append(f"only {gib(held)} of the {gib(want)} {why}")
    return "; ".join(parts) or None


def diagnose(
    pid: int,
    model: str,
    spec: LaunchSpec,
    est: MemoryEstimate,
    measured: Measured,
    estimator: Callable[[LaunchSpec], MemoryEstimate],
    budget: int | None = None,
    usage_p99_tokens: int | None = None,
    tolerance: Tolerance | None = None,
) -> Diagnosis:
    """Measured (monitor/analysis/measured.py) against the budget or the estimate, judged by
    monitor/analysis/judge.py; an unknown measurement is said so, never judged as 0."""
    return judge_findings(
        pid,
        model,
        est,
        launch_findings(spec, est, estimator, usage_p99_tokens),
        measured,
        spec.load_mode,
        budget,
        tolerance,
    )


def in_cgroup(
    d: Diagnosis,
    limit: CgroupMemory,
    members: Sequence[tuple[int, str, int]],
    must_fit_bytes: int,
    mapped_bytes: int,
    version: int | None,
) -> Diagnosis:
    """``d`` with the memory cgroup that would OOM-kill the server named: its limit, its
    room (reclaimable page cache counted as room), the other members and what they hold;
    and no ``--mlock`` where locking the weights would pass the limit (a locked page is
    never reclaimed: the kill comes instead of the slowness)."""
    others = [m for m in members if m[0] != d.pid]
    who = ", ".join(f"{name} (pid {pid}) {gib(held)}" for pid, name, held in others[:8])
    text = limit.room_parts() + (f"; also in it: {who}" if who else "; no other tracked member")
    raise_it = "memory.limit_in_bytes" if version == 1 else "MemoryMax= (memory.max)"
    locked_need = must_fit_bytes + mapped_bytes + sum(m[2] for m in others)
    findings = []
    summary = d.summary
    limited = limit.memory_max_bytes is not None and locked_need > limit.memory_max_bytes
    for f in d.findings:
        if f.fix and "--mlock" in f.fix and limited:
            fix = (
                f"raise the cgroup's {raise_it} to at least {gib(locked_need)}, or stop a "
                "member (--mlock would pass its limit: an OOM kill, not slowness)"
            )
            summary = summary.replace(f.fix, fix)
            f = replace(f, fix=fix)
        findings.append(f)
    return replace(d, findings=tuple(findings), cgroup=text, summary=summary)


def launch_findings(
    spec: LaunchSpec,
    est: MemoryEstimate,
    estimator: Callable[[LaunchSpec], MemoryEstimate],
    usage_p99_tokens: int | None = None,
) -> tuple[Finding, ...]:
    """What the launch itself costs and how to shrink it (KV, compute, draft KV, host
    buffers), each fix priced by re-estimating: it depends on the launch and the model,
    never on what the process holds now, so it is computed once per launch
    (monitor/analysis/assess.py) and stored with the estimate."""
    findings: list[Finding] = []
    kv = est.total_bytes("kv") + est.total_bytes("kv_swa")
    cells = est.cells or 0
    if kv:
        if spec.engine == "ollama":
            rule = (
                f"ollama passes -c NumCtx x parallel: {cells} cells in total over "
                f"{est.n_seq_max} slots"
            )
        elif spec.ctx_size is None:
            rule = (
                f"started without -c: fit let the context grow to {cells} cells toward free memory"
            )
        elif est.kv_unified:
            rule = f"-c {spec.ctx_size} is {cells} cells shared by {est.n_seq_max} slots"
        elif est.n_seq_max == 1:
            rule = f"-c {spec.ctx_size} is {cells} cells for its one slot"
        else:
            rule = (
                f"-c {spec.ctx_size} -np {est.n_seq_max}: {cells} cells in total, "
                f"{est.n_ctx_seq} per slot (not {est.n_seq_max} x {spec.ctx_size})"
            )
        narrower = "q8_0" if spec.cache_type_k in ("f16", "bf16", "f32") else None
        target_ctx = None
        if usage_p99_tokens:
            per_slot = max(256, -(-int(usage_p99_tokens * 1.25) // 256) * 256)
            target_ctx = per_slot * (1 if est.kv_unified else (est.n_seq_max or 1))
        fix, frees = None, 0
        if target_ctx and target_ctx < cells:
            frees = _price(spec, est, {"ctx_size": target_ctx}, estimator)
            fix = f"-c {target_ctx} covers the p99 of {usage_p99_tokens} tokens in use"
        elif narrower:
            frees = _price(
                spec,
                est,
                {"cache_type_k": narrower, "cache_type_v": narrower, "flash_attn": "on"},
                estimator,
            )
            fix = f"-ctk {narrower} -ctv {narrower}"
        elif spec.ctx_size is None:
            frees = _price(spec, est, {"ctx_size": 8192}, estimator)
            fix = "-c 8192 (set a context: fit will not grow it)"
        ratio = kv_over_p99(est, usage_p99_tokens)
        if ratio is not None:
            rule += f" ({times(ratio)} the p99 of {usage_p99_tokens} tokens in use per slot)"
        findings.append(
            Finding(
                "kv",
                kv,
                f"KV cache {gib(kv)}: {rule}, type {spec.cache_type_k}/{spec.cache_type_v}",
                fix,
                frees,
            )
        )
    compute = est.total_bytes("compute")
    ub = spec.n_ubatch or 512
    if compute and (ub > 512 or spec.flash_attn == "off"):
        change = {"n_ubatch": 512} if ub > 512 else {"flash_attn": "on"}
        frees = _price(spec, est, change, estimator)
        why = f"-ub {ub}" if ub > 512 else "-fa off"
        findings.append(
            Finding(
                "compute",
                compute,
                f"compute buffer {gib(compute)} comes from {why}",
                "-ub 512" if ub > 512 else "-fa on",
                frees,
            )
        )
    draft_kv = est.total_bytes("draft_kv")
    if draft_kv:
        frees = _price(
            spec, est, {"draft_cache_type_k": "q8_0", "draft_cache_type_v": "q8_0"}, estimator
        )
        findings.append(
            Finding(
                "draft_kv",
                draft_kv,
                f"the draft model keeps its own KV of the same {cells} cells "
                f"({gib(draft_kv)}, {spec.draft_cache_type_k}: -ctkd is not inherited from -ctk)",
                "-ctkd q8_0 -ctvd q8_0" if spec.draft_cache_type_k == "f16" else None,
                frees,
            )
        )
    findings += _host_buffers(spec, est, estimator)
    return tuple(findings)


def _host_buffers(
    spec: LaunchSpec, est: MemoryEstimate, estimator: Callable[[LaunchSpec], MemoryEstimate]
) -> list[Finding]:
    """The host buffers that fill with use, and the bounds worth naming, priced."""
    grows = est.total_bytes("cache_ram", include_growth=True) + est.total_bytes(
        "checkpoints", include_growth=True
    )
    if not grows:
        return []
    fix = _growth_fix(spec, est)
    return [
        Finding(
            "host_buffers",
            grows,
            f"host buffers that fill with use: prompt cache and context "
            f"checkpoints up to {gib(grows)}",
            fix,
            _price(spec, est, _growth_change(fix), estimator, True) if fix else 0,
        )
    ]


SMALL_CACHE_RAM_MIB, FEW_CHECKPOINTS = 1024, 4


def _growth_fix(spec: LaunchSpec, est: MemoryEstimate) -> str | None:
    """The bounds worth naming: ``--cache-ram`` only when the server's is larger, ``-ctxcp``
    only for a model that makes checkpoints (SWA / recurrent) and has more."""
    parts = []
    cache = 8192 if spec.cache_ram_mib is None else spec.cache_ram_mib
    if est.total_bytes("cache_ram", include_growth=True) and cache > SMALL_CACHE_RAM_MIB:
        parts.append(f"--cache-ram {SMALL_CACHE_RAM_MIB}")
    per_slot = 32 if spec.ctx_checkpoints is None else spec.ctx_checkpoints
    if est.total_bytes("checkpoints", include_growth=True) and per_slot > FEW_CHECKPOINTS:
        parts.append(f"-ctxcp {FEW_CHECKPOINTS}")
    return " ".join(parts) or None


def _growth_change(fix: str) -> dict[str, int]:
    change = {}
    if "--cache-ram" in fix:
        change["cache_ram_mib"] = SMALL_CACHE_RAM_MIB
    if "-ctxcp" in fix:
        change["ctx_checkpoints"] = FEW_CHECKPOINTS
    return change


def judge_findings(
    pid: int,
    model: str,
    est: MemoryEstimate,
    launch: tuple[Finding, ...],
    measured: Measured,
    load_mode: str | None = None,
    budget: int | None = None,
    tolerance: Tolerance | None = None,
    evidence: Sequence[Evidence] = (),
    checked: Sequence[str] = (),
) -> Diagnosis:
    """The verdict from a launch's findings (:func:`launch_findings`) and what the process
    holds now: pure and cheap, so every reader recomputes it from a stored estimate.
    Growth over the estimate is split by the server's own ``evidence``
    (monitor/analysis/growth.py); ``checked`` says what was looked at."""
    tol = tolerance or Tolerance()
    findings = list(launch)
    estimated = est.total_bytes()
    expected = budget if budget is not None else estimated
    what = "budget" if budget is not None else "estimate"
    total = measured.total_bytes
    if total is None:
        findings.sort(key=lambda f: -f.bytes)
        summary = f"{model}: cannot judge: {measured.why_unknown}; the {what} is {gib(expected)}"
        return Diagnosis(
            pid,
            model,
            None,
            estimated,
            budget,
            tuple(findings),
            summary,
            "unknown",
            measured,
            tuple(checked),
        )
    paged = _paged_out(load_mode, est, measured)
    if paged is not None:
        findings.append(paged)
    grown = is_over(total, estimated, tol)
    if grown:
        growth = attribute_growth(measured, est, evidence, checked, tol)
        findings += [
            Finding(c.component, c.bytes, c.cause, c.fix, c.frees_bytes, c.evidence)
            for c in growth.causes
        ]
    findings.sort(key=lambda f: -f.bytes)
    excess = total - expected
    if is_over(total, expected, tol):
        # Over the estimate: the excess is growth, so its cause and fix come from the
        # growth findings (the launch's own, such as the KV type, are in the estimate).
        # Over a budget only: the biggest launch part is the cause.
        pool = (
            [f for f in findings if f.component in GROWTH_COMPONENTS]
            if grown
            else [f for f in findings if f.component not in ("host_buffers", "weights_paged_out")]
        )
        top = max(pool, key=lambda f: f.bytes, default=None)
        cause = top.cause if top else "unexplained"
        fixer = next((f for f in pool if f.fix and f.frees_bytes), None)
        pct = f" (+{100 * excess / expected:.0f}%)" if expected > 0 else ""
        summary = (
            f"{model} holds {gib(total)}, {gib(excess)}{pct} over the {what} of "
            f"{gib(expected)}: {cause}"
            + (f"; {fixer.fix} frees {gib(fixer.frees_bytes)}" if fixer else "")
        )
        verdict = "over"
    elif paged is not None:
        summary = (
            f"{model} holds {gib(total)}, less than the {what} of {gib(expected)} "
            f"because its {paged.cause}; {paged.fix}"
        )
        verdict = "under"
    else:
        summary = f"{model} holds {gib(total)}, as expected ({what} {gib(expected)})"
        under = _under_because(est, measured, tol) if is_over(expected, total, tol) else None
        summary += f": {under}" if under else ""
        verdict = "as_expected"
    return Diagnosis(
        pid,
        model,
        total,
        estimated,
        budget,
        tuple(findings),
        summary,
        verdict,
        measured,
        tuple(checked),
    )
