"""Why does a running model hold more than expected? Measured vs estimate vs budget, the
difference split by component, the cause in one sentence and fixes priced in GiB.

Each finding follows the engine's real rule (estimation.md section 1a, 3): with current
llama.cpp ``-c 8192 -np 16`` holds 8192 cells in total (``n_ctx_seq`` per slot), not 16 x
8192; ollama passes ``-c NumCtx x parallel``, so there parallel does multiply; a server
started without ``-c`` lets fit grow the context toward free memory. Fixes are priced by
re-estimating the changed launch, so "frees X GiB" is the estimator's own difference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from monitor.engines.spec import LaunchSpec
from monitor.estimate import MemoryEstimate
from monitor.estimate.kv import EstimateError

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class Finding:
    component: str
    bytes: int
    cause: str
    fix: str | None = None
    frees_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Diagnosis:
    pid: int
    model: str
    measured_bytes: int
    estimated_bytes: int
    budget_bytes: int | None
    findings: tuple[Finding, ...]
    summary: str

    @property
    def excess_bytes(self) -> int:
        expected = self.budget_bytes if self.budget_bytes is not None else self.estimated_bytes
        return self.measured_bytes - expected


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _price(spec: LaunchSpec, est: MemoryEstimate, change: dict,
           estimator: Callable[[LaunchSpec], MemoryEstimate]) -> int:
    try:
        after = estimator(replace(spec, **change))
    except EstimateError:
        return 0
    return est.total_bytes() - after.total_bytes()


def diagnose(pid: int, model: str, spec: LaunchSpec, est: MemoryEstimate, measured: int,
             estimator: Callable[[LaunchSpec], MemoryEstimate],
             budget: int | None = None, usage_p99_tokens: int | None = None) -> Diagnosis:
    findings: list[Finding] = []
    kv = est.total_bytes("kv") + est.total_bytes("kv_swa")
    cells = est.cells or 0
    if kv:
        if spec.engine == "ollama":
            rule = (f"ollama passes -c NumCtx x parallel: {cells} cells in total over "
                    f"{est.n_seq_max} slots")
        elif spec.ctx_size is None:
            rule = (f"started without -c: fit let the context grow to {cells} cells "
                    "toward free memory")
        elif est.kv_unified:
            rule = f"-c {spec.ctx_size} is {cells} cells shared by {est.n_seq_max} slots"
        else:
            rule = (f"-c {spec.ctx_size} -np {est.n_seq_max}: {cells} cells in total, "
                    f"{est.n_ctx_seq} per slot (not {est.n_seq_max} x {spec.ctx_size})")
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
            frees = _price(spec, est, {"cache_type_k": narrower, "cache_type_v": narrower,
                                       "flash_attn": "on"}, estimator)
            fix = f"-ctk {narrower} -ctv {narrower}"
        elif spec.ctx_size is None:
            frees = _price(spec, est, {"ctx_size": 8192}, estimator)
            fix = "-c 8192 (set a context: fit will not grow it)"
        findings.append(Finding("kv", kv, f"KV cache {_gib(kv)}: {rule}, type "
                                f"{spec.cache_type_k}/{spec.cache_type_v}", fix, frees))
    compute = est.total_bytes("compute")
    ub = spec.n_ubatch or 512
    if compute and (ub > 512 or spec.flash_attn == "off"):
        change = {"n_ubatch": 512} if ub > 512 else {"flash_attn": "on"}
        frees = _price(spec, est, change, estimator)
        why = f"-ub {ub}" if ub > 512 else "-fa off"
        findings.append(Finding("compute", compute,
                                f"compute buffer {_gib(compute)} comes from {why}",
                                "-ub 512" if ub > 512 else "-fa on", frees))
    draft_kv = est.total_bytes("draft_kv")
    if draft_kv:
        frees = _price(spec, est, {"draft_cache_type_k": "q8_0",
                                   "draft_cache_type_v": "q8_0"}, estimator)
        findings.append(Finding(
            "draft_kv", draft_kv, f"the draft model keeps its own KV of the same {cells} cells "
            f"({_gib(draft_kv)}, {spec.draft_cache_type_k}: -ctkd is not inherited from -ctk)",
            "-ctkd q8_0 -ctvd q8_0" if spec.draft_cache_type_k == "f16" else None, frees))
    grows = est.total_bytes("cache_ram", include_growth=True) + est.total_bytes(
        "checkpoints", include_growth=True)
    if grows:
        findings.append(Finding("host_buffers", grows,
                                f"host buffers that fill with use: prompt cache and context "
                                f"checkpoints up to {_gib(grows)}",
                                "--cache-ram 1024 -ctxcp 4", 0))
    estimated = est.total_bytes()
    unaccounted = measured - estimated
    if unaccounted > GIB // 4:
        findings.append(Finding("unaccounted", unaccounted,
                                f"{_gib(unaccounted)} measured beyond the model's own buffers "
                                "(driver context, allocations outside llama.cpp)"))
    findings.sort(key=lambda f: -f.bytes)
    expected = budget if budget is not None else estimated
    excess = measured - expected
    if excess <= GIB // 4:
        summary = (f"{model} holds {_gib(measured)}, as expected "
                   f"({'budget' if budget is not None else 'estimate'} {_gib(expected)})")
    else:
        top = max((f for f in findings if f.component != "host_buffers"),
                  key=lambda f: f.bytes, default=None)
        cause = top.cause if top else "unexplained"
        fix = next((f for f in findings if f.fix and f.frees_bytes), None)
        summary = (f"{model} holds {_gib(measured)}, {_gib(excess)} over the "
                   f"{'budget' if budget is not None else 'estimate'} of {_gib(expected)}: "
                   f"{cause}" + (f"; {fix.fix} frees {_gib(fix.frees_bytes)}" if fix else ""))
    return Diagnosis(pid, model, measured, estimated, budget, tuple(findings), summary)
