"""One assessment per inference server: what it was asked to do, what that should cost,
what it holds now and the verdict (issue 15 point 3).

- :func:`assess` reads GGUF headers (monitor/estimate): the daemon runs it once per launch
  (monitor/daemon/assessor.py) and stores the result in the ``estimates`` table; the live
  TUI runs it once per process. Nothing else estimates a running server.
- :func:`judged` adds what the process holds now (monitor/analysis/measured.py) and the
  verdict (monitor/analysis/diagnose.py ``judge_findings``): pure and cheap, so every
  reader recomputes it from a stored assessment and the tick it shows.
- :func:`to_json` / :func:`from_json` are the stored and served form
  (``vramscope.assessment/1``). ``from_json`` checks every field, count and length: the
  document may come from a remote daemon.

A model that cannot be estimated has ``estimate=None`` and ``error`` saying why: unknown,
never a guess.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from collectors.base import ProcessInfo, ProcessMemory
from monitor.analysis.diagnose import Diagnosis, Finding, judge_findings, launch_findings
from monitor.analysis.growth import Evidence
from monitor.analysis.judge import Tolerance
from monitor.analysis.measured import Measured, measure
from monitor.estimate import ESTIMATOR_VERSION, CpuFeatures
from monitor.estimate.model import Component, DeviceInfo, MemoryEstimate
from monitor.servers.capabilities import LLAMACPP_ESTIMATED

SCHEMA = "vramscope.assessment/1"
MAX_ERROR_CHARS = 500
MAX_TEXT = 4096
MAX_COMPONENTS = 512
MAX_ITEMS = 64


@dataclass(frozen=True, slots=True)
class Launch:
    """The parts of a server's LaunchSpec that readers show and the verdict uses."""

    engine: str
    role: str
    model: str  # the model file's name, or the engine's model id; "?" when none
    model_path: str | None = None
    ctx_size: int | None = None
    n_parallel: int | None = None
    max_model_len: int | None = None
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    draft_model: str | None = None
    draft_cache_type_k: str = "f16"
    draft_cache_type_v: str = "f16"
    load_mode: str | None = None

    @classmethod
    def from_spec(cls, spec: Any) -> Launch:
        model = Path(spec.model_path).name if spec.model_path else (spec.model_name or "?")
        return cls(
            spec.engine,
            spec.role,
            model,
            spec.model_path,
            spec.ctx_size,
            spec.n_parallel,
            spec.max_model_len,
            spec.cache_type_k,
            spec.cache_type_v,
            spec.draft_model,
            spec.draft_cache_type_k,
            spec.draft_cache_type_v,
            spec.load_mode,
        )


@dataclass(frozen=True, slots=True)
class Assessment:
    """One server at one launch. ``measured`` and ``diagnosis`` are filled by
    :func:`judged` for the tick being shown; they are never stored."""

    pid: int
    start_ticks: int
    ts_ms: int  # when it was assessed
    launch_key: str  # of argv + cwd: another key is another launch, assessed again
    launch: Launch
    estimate: MemoryEstimate | None
    findings: tuple[Finding, ...] = ()  # the launch's own (diagnose.launch_findings)
    error: str | None = None  # why there is no estimate
    estimator_version: int = ESTIMATOR_VERSION
    measured: Measured | None = None
    diagnosis: Diagnosis | None = None

    @property
    def by_device(self) -> dict[str, int]:
        """Bytes expected at load per device (``host`` included); {} when unknown."""
        return self.estimate.by_device() if self.estimate is not None else {}


def launch_key(info: ProcessInfo) -> str:
    """Tells one launch of a process from the next (its argv or cwd changed)."""
    text = json.dumps([list(info.argv), info.cwd], ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _error_text(exc: BaseException) -> str:
    """One bounded line. A GGUF problem may quote bytes of the file (``magic b'root'``), and
    the daemon serves this text: only the file's name and that it is not readable."""
    from monitor.estimate import EstimateError
    from monitor.gguf.reader import GgufError

    if isinstance(exc, GgufError):
        text = f"{Path(exc.path).name}: not a readable GGUF model file"
    elif isinstance(exc, OSError):
        name = Path(exc.filename).name if isinstance(exc.filename, str) else "a file"
        text = f"{name}: {exc.strerror or 'cannot be read'}"
    elif isinstance(exc, EstimateError | ValueError):
        text = str(exc) or type(exc).__name__
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def assess(
    info: ProcessInfo,
    devices: Sequence[DeviceInfo],
    ts_ms: int,
    *,
    env: Mapping[str, str] | None = None,
    read_header: Callable[[str], Any] | None = None,
    usage_p99_tokens: int | None = None,
    cpu: CpuFeatures | None = None,
) -> Assessment | None:
    """The assessment of one process, or None when it is not a server we estimate (not
    an inference command, a proxy such as llama-swap, a vLLM worker). Reads the model's
    GGUF header(s) through ``read_header`` (monitor.gguf.reader by default)."""
    from monitor.estimate import estimate
    from monitor.servers import parse_command

    spec = parse_command(list(info.argv), dict(env) if env is not None else None, cwd=info.cwd)
    if spec is None or spec.role in ("proxy", "worker", "router"):
        return None
    est, error = None, None
    try:
        est = estimate(spec, devices, read_header, cpu=cpu)
    except Exception as exc:  # a model we cannot read or parse is unknown, never a guess
        error = _error_text(exc)
    findings: tuple[Finding, ...] = ()
    if est is not None and spec.engine in LLAMACPP_ESTIMATED:
        try:
            findings = launch_findings(
                spec, est, lambda s: estimate(s, devices, read_header, cpu=cpu), usage_p99_tokens
            )
        except Exception:  # the findings are a bonus: the estimate stands without them
            findings = ()
    return Assessment(
        info.pid,
        info.start_ticks,
        ts_ms,
        launch_key(info),
        Launch.from_spec(spec),
        est,
        findings,
        error,
    )


def judged(
    a: Assessment,
    memory: Iterable[ProcessMemory],
    helpers: Iterable[int] = (),
    budget: int | None = None,
    tolerance: Tolerance | None = None,
    evidence: Sequence[Evidence] = (),
    checked: Sequence[str] = (),
) -> Assessment:
    """``a`` with what the process holds in ``memory`` (one tick's rows) and the verdict;
    no verdict without an estimate or for an engine diagnose has no rules for. ``evidence``
    and ``checked``: the server's own word on its growth (monitor/analysis/growth.py)."""
    held = measure(a.pid, memory, helpers)
    diagnosis = None
    if a.estimate is not None and a.launch.engine in LLAMACPP_ESTIMATED:
        diagnosis = judge_findings(
            a.pid,
            a.launch.model,
            a.estimate,
            a.findings,
            held,
            a.launch.load_mode,
            budget,
            tolerance,
            evidence,
            checked,
        )
    return replace(a, measured=held, diagnosis=diagnosis)


# --------------------------------------------------------------------------- JSON


def to_json(a: Assessment) -> dict[str, Any]:
    """The stored and served form: everything but ``measured`` and ``diagnosis``."""
    est = a.estimate
    return {
        "schema": SCHEMA,
        "pid": a.pid,
        "start_ticks": a.start_ticks,
        "ts_ms": a.ts_ms,
        "launch_key": a.launch_key,
        "estimator_version": a.estimator_version,
        "launch": {f.name: getattr(a.launch, f.name) for f in fields(Launch)},
        "estimate": None if est is None else estimate_to_json(est),
        "findings": [{f.name: getattr(x, f.name) for f in fields(Finding)} for x in a.findings],
        "error": a.error,
    }


def estimate_to_json(est: MemoryEstimate) -> dict[str, Any]:
    out = {f.name: getattr(est, f.name) for f in fields(MemoryEstimate)}
    out["components"] = [
        {f.name: getattr(c, f.name) for f in fields(Component)} for c in est.components
    ]
    out["notes"], out["devices"] = list(est.notes), list(est.devices)
    out["total_bytes"] = est.total_bytes()
    out["by_device"] = est.by_device()
    return out


class _Bad(ValueError):  # private: callers turn it into their own one-line error
    pass


def _oint(doc: Mapping[str, Any], key: str, where: str, low: int = 0) -> int | None:
    v = doc.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v < 2**63:
        raise _Bad(f"{where}.{key} is not an integer from {low}")
    return v


def _int(doc: Mapping[str, Any], key: str, where: str, low: int = 0) -> int:
    v = _oint(doc, key, where, low)
    if v is None:
        raise _Bad(f"{where} has no {key!r}")
    return v


def _ostr(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    v = doc.get(key)
    if v is not None and (not isinstance(v, str) or len(v) > MAX_TEXT):
        raise _Bad(f"{where}.{key} is not a string of at most {MAX_TEXT} characters")
    return v


def _str(doc: Mapping[str, Any], key: str, where: str, choices: tuple[str, ...] = ()) -> str:
    v = _ostr(doc, key, where)
    if v is None or (choices and v not in choices):
        raise _Bad(
            f"{where}.{key} is not " + (f"one of {', '.join(choices)}" if choices else "a string")
        )
    return v


def _bool(doc: Mapping[str, Any], key: str, where: str) -> bool | None:
    v = doc.get(key)
    if v is not None and not isinstance(v, bool):
        raise _Bad(f"{where}.{key} is not true, false or null")
    return v


def _list(doc: Mapping[str, Any], key: str, where: str, limit: int) -> list[Any]:
    v = doc.get(key, [])
    if not isinstance(v, list) or len(v) > limit:
        raise _Bad(f"{where}.{key} is not a list of at most {limit}")
    return v


def _obj(v: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise _Bad(f"{where} is not an object")
    return v


def from_json(doc: Any) -> Assessment:
    """The inverse of :func:`to_json`; raises ValueError naming the first bad field."""
    d = _obj(doc, "assessment")
    if d.get("schema") != SCHEMA:
        raise _Bad(f"assessment.schema is {str(d.get('schema'))[:40]!r}, expected {SCHEMA!r}")
    ld, w = _obj(d.get("launch"), "launch"), "launch"
    launch = Launch(
        engine=_str(ld, "engine", w),
        role=_str(ld, "role", w),
        model=_str(ld, "model", w),
        model_path=_ostr(ld, "model_path", w),
        ctx_size=_oint(ld, "ctx_size", w),
        n_parallel=_oint(ld, "n_parallel", w, low=-1),
        max_model_len=_oint(ld, "max_model_len", w),
        cache_type_k=_str(ld, "cache_type_k", w),
        cache_type_v=_str(ld, "cache_type_v", w),
        draft_model=_ostr(ld, "draft_model", w),
        draft_cache_type_k=_str(ld, "draft_cache_type_k", w),
        draft_cache_type_v=_str(ld, "draft_cache_type_v", w),
        load_mode=_ostr(ld, "load_mode", w),
    )
    est = None if d.get("estimate") is None else estimate_from_json(d["estimate"])
    findings = []
    for i, f in enumerate(_list(d, "findings", "assessment", MAX_ITEMS)):
        w = f"findings[{i}]"
        fd = _obj(f, w)
        findings.append(
            Finding(
                _str(fd, "component", w),
                _int(fd, "bytes", w, low=-(2**62)),
                _str(fd, "cause", w),
                _ostr(fd, "fix", w),
                _int(fd, "frees_bytes", w, low=-(2**62)),
            )
        )
    error = _ostr(d, "error", "assessment")
    if est is None and error is None:
        raise _Bad("assessment has neither an estimate nor an error")
    w = "assessment"
    return Assessment(
        pid=_int(d, "pid", w, low=1),
        start_ticks=_int(d, "start_ticks", w),
        ts_ms=_int(d, "ts_ms", w),
        launch_key=_str(d, "launch_key", w),
        launch=launch,
        estimate=est,
        findings=tuple(findings),
        error=error,
        estimator_version=_int(d, "estimator_version", w),
    )


def estimate_from_json(doc: Any) -> MemoryEstimate:
    e, w = _obj(doc, "estimate"), "estimate"
    comps = []
    for i, c in enumerate(_list(e, "components", w, MAX_COMPONENTS)):
        cw = f"estimate.components[{i}]"
        cd = _obj(c, cw)
        comps.append(
            Component(
                _str(cd, "name", cw),
                _str(cd, "device", cw),
                _int(cd, "bytes", cw),
                _str(cd, "formula", cw),
                _str(cd, "residency", cw, ("device", "anon", "file")),  # type: ignore[arg-type]
                _str(cd, "when", cw, ("load", "grows")),  # type: ignore[arg-type]
            )
        )
    notes = _list(e, "notes", w, MAX_ITEMS)
    devices = _list(e, "devices", w, MAX_ITEMS)
    unsure = _list(e, "approximate", w, MAX_ITEMS)
    if not all(isinstance(n, str) and len(n) <= MAX_TEXT for n in notes + devices + unsure):
        raise _Bad("estimate.notes, .devices and .approximate must be strings")
    return MemoryEstimate(
        engine=_str(e, "engine", w),
        model_path=_ostr(e, "model_path", w),
        components=tuple(comps),
        notes=tuple(notes),
        n_ctx=_oint(e, "n_ctx", w),
        n_ctx_seq=_oint(e, "n_ctx_seq", w),
        n_seq_max=_oint(e, "n_seq_max", w),
        n_stream=_oint(e, "n_stream", w),
        kv_unified=_bool(e, "kv_unified", w),
        flash_attn=_bool(e, "flash_attn", w),
        version=_int(e, "version", w),
        devices=tuple(devices),
        host_sparse_bytes=_oint(e, "host_sparse_bytes", w) or 0,
        approximate=tuple(unsure),
    )


def assessments_document(items: Iterable[Assessment], ts_ms: int | None) -> dict[str, Any]:
    """``GET /api/v1/estimates``: each stored assessment, with what its process holds at
    the latest tick and the verdict when the caller judged them (:func:`judged`)."""
    out = []
    for a in items:
        doc = to_json(a)
        doc["measured"] = a.measured.as_dict() if a.measured is not None else None
        d = a.diagnosis
        doc["verdict"] = d.verdict if d is not None else None
        doc["summary"] = d.summary if d is not None else None
        out.append(doc)
    return {
        "schema": "vramscope.estimates/1",
        "ts_ms": ts_ms,
        "estimator_version": ESTIMATOR_VERSION,
        "estimates": out,
    }


def assessments_from_document(doc: Any, limit: int = 20000) -> dict[tuple[int, int], Assessment]:
    """A ``vramscope.estimates/1`` document (a remote daemon's answer) -> assessments by
    (pid, start_ticks); raises ValueError naming what is wrong."""
    d = _obj(doc, "the document")
    if d.get("schema") != "vramscope.estimates/1":
        raise _Bad(f"schema {str(d.get('schema'))[:40]!r}, expected 'vramscope.estimates/1'")
    out = {}
    for i, item in enumerate(_list(d, "estimates", "the document", limit)):
        try:
            a = from_json(item)
        except ValueError as exc:
            raise _Bad(f"estimates[{i}]: {exc}") from None
        out[(a.pid, a.start_ticks)] = a
    return out
