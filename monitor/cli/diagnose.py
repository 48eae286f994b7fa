"""The work behind ``vramscope diagnose``: every running server, measured vs expected."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from collectors.base import Snapshot
from monitor.analysis.assess import assess, judged
from monitor.analysis.diagnose import Diagnosis, in_cgroup
from monitor.analysis.growth import GROWTH_COMPONENTS, UNACCOUNTED, Evidence
from monitor.analysis.judge import Tolerance
from monitor.analysis.slot_usage import usage_p99
from monitor.analysis.state import box_state, chosen_origin
from monitor.cli.predict import gpu_devices
from monitor.config import Config
from monitor.errors import UsageError
from monitor.estimate import MemoryEstimate, features_of
from monitor.logs.server_cache import log_file_of, log_source
from monitor.report.status import wrapped
from monitor.servers import parse_command, read_llama_env
from monitor.servers.capabilities import LLAMACPP_ESTIMATED
from monitor.servers.recognise import helper_parents
from monitor.textsafe import terminal_safe
from monitor.units import GIB, gib_or_mib


def budget_for(cfg: Config, spec_model: str | None) -> int | None:
    if not spec_model:
        return None
    for key in (spec_model, Path(spec_model).name, Path(spec_model).stem):
        if key in cfg.budgets_gib:
            return int(cfg.budgets_gib[key] * GIB)
    return None


def _slots_url(host: str | None, port: int | None) -> str | None:
    """The loopback URL of a server's own HTTP port; None when it listens elsewhere only."""
    if port is None:
        return None
    if host in (None, "", "0.0.0.0", "127.0.0.1", "localhost"):
        return f"http://127.0.0.1:{port}"
    if host in ("::", "::1"):
        return f"http://[::1]:{port}"
    return None


def growth_evidence(
    log: Path | None, slots_url: str | None, model: str
) -> tuple[list[Evidence], list[str]]:
    """What the server itself says about its run-time buffers: its log (bounded tail, never
    through a symlink) and one loopback ``/slots`` read. Each source adds a line to
    ``checked``, also when it could not be read."""
    from monitor.analysis.growth import evidence_from_log
    from monitor.integrations.slots import SlotPoller
    from monitor.logs.server_cache import ServerLogFollower

    evidence: list[Evidence] = []
    checked: list[str] = []
    if log is None:
        checked.append("no llama.cpp log known (start llama-server with --log-file, or pass --log)")
    else:
        source = log_source(log)
        follower = ServerLogFollower(log)
        report = follower.read()
        follower.close()
        if report is None:
            checked.append(f"{source}: not readable ({follower.error})")
        else:
            found, said = evidence_from_log(report, source)
            evidence += found
            checked += said
    if slots_url is not None:
        poller = SlotPoller(timeout_s=1.0)
        try:
            slots = poller.poll(slots_url, model, 0.0)
        except UsageError:  # not loopback: never asked
            slots = None
        if slots is None:
            checked.append(f"{slots_url}/slots: no answer")
        else:
            busy = [s for s in slots if s.busy]
            checked.append(
                f"{slots_url}/slots: {len(busy)} of {len(slots)} slot(s) busy, "
                f"{sum(s.tokens for s in slots)} tokens cached in them (KV allocated at "
                "load: not growth)"
            )
    return evidence, checked


def run_diagnose(
    cfg: Config,
    state: Path | None,
    at: str | None,
    pid: int | None,
    log: Path | None = None,
) -> list[Diagnosis]:
    """Each llama.cpp / ollama server assessed (monitor/analysis/assess.py: here and now,
    from its model files) and judged against what it holds in the snapshot. Growth over
    the estimate is named from the server's own evidence, asked only when it grew: ``log``
    (for the one server chosen), else on this box now its ``--log-file`` and ``/slots``."""
    from monitor.daemon.oneshot import OneShotSampler

    sampler = OneShotSampler(cfg.roots, cfg.collectors)
    box = box_state(chosen_origin(cfg.roots, cfg.collectors, cfg.db_path, state, at, sampler))
    snap = box.snapshot
    devices = gpu_devices(snap, cfg)
    live = box.live
    helpers = helper_parents({p.pid: p for p in snap.processes})
    tolerance = Tolerance.from_settings(cfg.alert_settings)
    out = []
    for info in snap.processes:
        if pid is not None and info.pid != pid:
            continue
        if info.engine not in LLAMACPP_ESTIMATED or info.pid in helpers:
            continue  # a server's forked helper is part of that server
        env = read_llama_env(cfg.roots.proc, info.pid) if live else {}
        spec = parse_command(list(info.argv), env, cwd=info.cwd)
        if spec is None or not spec.model_path:
            continue
        found = assess(
            info,
            devices,
            snap.ts_ms,
            env=env,
            usage_p99_tokens=usage_p99(cfg.db_path, spec.model_path),
            cpu=features_of(snap.cpu_features),
        )
        if found is None:
            continue
        if found.estimate is None:
            out.append(
                Diagnosis(
                    info.pid,
                    spec.model_path,
                    None,
                    0,
                    None,
                    (),
                    f"{Path(spec.model_path).name}: cannot estimate: {found.error}",
                    "error",
                )
            )
            continue
        mine = [h for h, owner in helpers.items() if owner == info.pid]
        budget = budget_for(cfg, spec.model_path)
        d = judged(found, snap.memory, mine, budget, tolerance).diagnosis
        assert d is not None  # an estimated llama.cpp / ollama server
        if any(f.component == UNACCOUNTED for f in d.findings):
            # it grew beyond its estimate: ask the server's own sources what grew
            server_log = log or (log_file_of(info.argv, info.cwd) if live else None)
            url = _slots_url(spec.host, spec.port) if live and spec.engine == "llama.cpp" else None
            evidence, checked = growth_evidence(server_log, url, spec.model_path)
            d = judged(found, snap.memory, mine, budget, tolerance, evidence, checked).diagnosis
            assert d is not None
        out.append(_with_cgroup(d, snap, info.pid, found.estimate, cfg if live else None))
    return out


def _with_cgroup(
    d: Diagnosis, snap: Snapshot, pid: int, est: MemoryEstimate, cfg: Config | None
) -> Diagnosis:
    """The diagnosis with the server's memory cgroup named, when it runs in a limited one."""
    from collectors.cgroup import memory_hierarchy

    limits = {c.pid: c.cgroup for c in snap.cgroups}
    limit = limits.get(pid)
    if limit is None or limit.memory_max_bytes is None:
        return d
    names = {p.pid: p.comm for p in snap.processes}
    held: dict[int, int] = {}
    for m in snap.memory:
        other = limits.get(m.pid)
        if m.device_id == "host" and other is not None and other.path == limit.path:
            held[m.pid] = sum(
                v or 0 for v in (m.rss_anon_bytes, m.rss_file_bytes, m.rss_shmem_bytes)
            )
    members = [(p, names.get(p, "?"), b) for p, b in sorted(held.items(), key=lambda x: -x[1])]
    mapped = sum(c.bytes for c in est.components if c.residency == "file" and c.when == "load")
    must = est.by_device().get("host", 0) - mapped
    hier = memory_hierarchy(cfg.roots) if cfg is not None else None
    return in_cgroup(d, limit, members, must, mapped, hier.version if hier else None)


FINDING_INDENT = " " * 26  # a finding's continuation: under its cause column


def render(diagnoses: list[Diagnosis], as_json: bool, width: int | None = None) -> str:
    """``diagnose``'s text (or JSON). ``width``: the columns to fit (monitor/report/status.py
    ``output_width``): a long line wrapped at spaces beneath its column, a word longer than
    a line cut with an ellipsis; None: every line whole (piped; ``--json`` has it all)."""
    if as_json:
        return json.dumps(
            [
                {
                    **{k: v for k, v in dataclasses.asdict(d).items() if k != "parts"},
                    "excess_bytes": d.excess_bytes,
                    "measured": d.parts.as_dict() if d.parts is not None else None,
                }
                for d in diagnoses
            ],
            indent=2,
        )
    if not diagnoses:
        return "no running llama.cpp / ollama server found"
    lines: list[str] = []
    for d in diagnoses:
        lines += wrapped(terminal_safe(f"pid {d.pid}: {d.summary}"), width)
        if d.cgroup:
            lines += wrapped(terminal_safe(f"  memory cgroup: {d.cgroup}"), width)
        for f in d.findings:
            fix = (
                f" -> {f.fix}" + (f" frees {gib_or_mib(f.frees_bytes)}" if f.frees_bytes else "")
                if f.fix
                else ""
            )
            row = f"  {f.component:<13} {gib_or_mib(f.bytes):>10}  {f.cause}{fix}"
            lines += wrapped(terminal_safe(row), width, FINDING_INDENT)
            if f.evidence:
                row = f"  {'':<13} {'':>10}  evidence: {f.evidence}"
                lines += wrapped(terminal_safe(row), width, FINDING_INDENT)
        if any(f.component in GROWTH_COMPONENTS for f in d.findings):
            lines += [
                x for c in d.checked for x in wrapped(terminal_safe(f"  checked: {c}"), width)
            ]
    return "\n".join(lines)
