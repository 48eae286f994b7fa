"""The post-mortem of a memory cgroup's kill in terms of its budget
(monitor/analysis/cgroup_budget.py), read from the daemon's database: the killed cgroup's
members at the kill, the victim's cache growth from its own log, the fixes that fit the
limit and the text of the cause and fix. Used by monitor/analysis/postmortem.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from monitor.analysis.cgroup_budget import (
    Budget,
    Member,
    budget_fixes,
    in_cgroup,
    member_name,
    minimum_needed,
)
from monitor.analysis.picture import DEFAULT_MARGIN_BYTES
from monitor.store import reads
from monitor.units import gib_or_mib as _gib


def _members(
    db: Any, cgroup: str, kernel_fig: dict[str, Any], victim: dict[str, Any], start: int, t: int
) -> list[Member]:
    """Every tracked process whose last sampled cgroup (by ``t``) is ``cgroup`` or under
    it, with its last nonzero host split and GPU memory; the victim with the kernel
    record's split (what it held at the kill), added when it was never sampled in it."""
    inside = {  # by the process's life, not its pid (pids are reused)
        c.process_id: c for c in reads.last_cgroups(db, start, t) if in_cgroup(c.path, cgroup)
    }
    host: dict[int, tuple[int, int, int]] = {}
    gpu: dict[int, dict[str, int]] = {}
    for pp in reads.process_points(db, t - 60_000, t):
        if pp.process_id not in inside:
            continue
        if pp.device_id == "host":
            split = (pp.rss_anon_bytes or 0, pp.rss_file_bytes or 0, pp.rss_shmem_bytes or 0)
            if any(split):
                host[pp.process_id] = split
        else:  # the last nonzero figure per GPU
            held = (pp.vram_bytes or 0) + (pp.gtt_bytes or 0)
            on = gpu.setdefault(pp.process_id, {})
            if held or pp.device_id not in on:
                on[pp.device_id] = held
    victim_pid = victim.get("pid")
    out = []
    for key, c in inside.items():
        pid = c.pid
        anon, file, shmem = host.get(key, (0, 0, 0))
        if pid == victim_pid and kernel_fig.get("anon_rss_bytes") is not None:
            anon, file, shmem = (
                kernel_fig.get(k) or 0
                for k in ("anon_rss_bytes", "file_rss_bytes", "shmem_rss_bytes")
            )
        name = member_name(c.argv, c.comm)
        out.append(
            Member(
                pid,
                name,
                c.comm,
                c.argv,
                c.path,
                anon,
                file,
                shmem,
                sum(gpu.get(key, {}).values()),
                pid == victim_pid,
            )
        )
    if isinstance(victim_pid, int) and all(c.pid != victim_pid for c in inside.values()):
        argv = tuple(victim.get("argv") or ())
        comm = str(victim.get("comm") or "?")
        out.append(
            Member(
                victim_pid,
                member_name(argv, comm),
                comm,
                argv,
                str(kernel_fig.get("memcg") or cgroup),
                kernel_fig.get("anon_rss_bytes") or 0,
                kernel_fig.get("file_rss_bytes") or 0,
                kernel_fig.get("shmem_rss_bytes") or 0,
                0,
                True,
            )
        )
    return sorted(out, key=lambda m: (m.victim, -m.charged_bytes))


def _growth_evidence(db: Any, victim: dict[str, Any], t: int) -> tuple[str, str, str] | None:
    """(what grew, the log line it comes from, which cache: growth.py's cause) when the
    victim's own ``--log-file`` (monitor/logs/server_cache.py, read as the daemon reads
    it: a bounded tail, never through a symlink, only a file the server's user owns) says
    a run-time cache holds memory (monitor/analysis/growth.py)."""
    from monitor.analysis.growth import evidence_from_log
    from monitor.logs.server_cache import ServerLogFollower, log_file_of, log_source

    pid, argv = victim.get("pid"), list(victim.get("argv") or ())
    if not isinstance(pid, int) or not argv:
        return None
    uid, cwd = reads.process_owner(db, pid, t)
    path = log_file_of(argv, cwd)
    if path is None:
        return None
    follower = ServerLogFollower(path, uid)
    report = follower.read()
    follower.close()
    if report is None:
        return None
    found, _checked = evidence_from_log(report, log_source(path))
    grown = [e for e in found if e.bytes > 0]
    if not grown:
        return None
    top = max(grown, key=lambda e: e.bytes)
    what = "prompt cache" if top.cause == "prompt_cache" else "context checkpoints"
    return (
        f"its {what} had grown to {_gib(top.bytes)}",
        f"{top.source}: '{top.quote}'",
        top.cause,
    )


def _gpus_at(db: Any, t: int) -> list[Any]:
    """The box's GPUs at the last tick at or before ``t`` (none on a CPU-only box)."""
    from monitor.store.moment import snapshot_in

    tick = reads.tick_at_or_before(db, t)
    if tick is None:
        return []
    return [d for d in snapshot_in(db, tick).devices if d.memory_kind not in ("host",)]


def budget_of(
    db: Any,
    kdata: dict[str, Any],
    kernel_fig: dict[str, Any],
    info: dict[str, Any] | None,
    loading: list[dict[str, Any]],
    est: dict[str, Any] | None,
    window: tuple[int, int],
    version: int | None,
) -> Budget | None:
    """The kill in terms of the killed cgroup's budget (monitor/analysis/cgroup_budget.py):
    the cgroup whose limit was hit is the record's ``oom_memcg``, else the victim's."""
    cgroup = kdata.get("memcg") or kdata.get("task_memcg")
    victim, (start, t) = info or {}, window
    if not isinstance(cgroup, str):
        return None
    # the record's "memory: usage ..., limit ..." line, else the limit last sampled there
    limit = kernel_fig.get("memcg_limit_bytes") or next(
        (c.max_bytes for c in reads.last_cgroups(db, start, t) if c.path == cgroup and c.max_bytes),
        None,
    )
    if not limit:
        return None
    members = _members(db, cgroup, kernel_fig, victim, start, t)
    loading_now = any(x["pid"] == victim.get("pid") for x in loading)
    growth = None if loading_now else _growth_evidence(db, victim, t)
    need, bounds, fixes = budget_fixes(
        tuple(victim.get("argv") or ()),
        cgroup,
        limit,
        members,
        DEFAULT_MARGIN_BYTES,
        growth is not None,
        t,
        _gpus_at(db, t),
    )
    if need is None and est is not None:
        need = est["by_device"].get("host")
    parts = "its need by its estimate"
    if need is not None and growth is not None and bounds.get(growth[2]):
        # what it needs not to be killed again: the load and the cache that grew, full
        what = "prompt cache" if growth[2] == "prompt_cache" else "context checkpoints"
        parts = f"{_gib(need)} at load + its {what} full, {_gib(bounds[growth[2]])}"
        need += bounds[growth[2]]
    if growth is not None:
        fixes = [
            replace(f, evidence=growth[1]) if f.change.startswith(("--cache-ram", "-ctxcp")) else f
            for f in fixes
        ]
    minimum, why = minimum_needed(members, need, parts if growth else "")
    return Budget(
        cgroup,
        limit,
        version,
        tuple(members),
        need,
        why,
        minimum,
        parts,
        tuple(fixes),
        growth[0] if growth else None,
    )


def budget_cause(b: Budget) -> str:
    return b.cause()


def budget_fix(b: Budget) -> str:
    """Each fix that fits the budget, as predict prints it, then raising the limit."""
    items = []
    for f in b.fixes:
        frees = f", frees {_gib(f.frees_bytes)}" if f.frees_bytes else ""
        where = f" (from {f.evidence})" if f.evidence else ""
        items.append(f"{f.change}{frees}: {f.verdict.upper()}{where}")
    items.append(b.limit_fix())
    head = f"To fit the {_gib(b.limit_bytes)} budget of {b.cgroup}, any one of: "
    text = head + "; ".join(f"({i}) {x}" for i, x in enumerate(items, 1)) + "."
    victim = b.victim
    if victim is not None and victim.argv:
        text += " " + predict_hint(b.cgroup, list(victim.argv))
    return text


def predict_hint(memcg: str, argv: list[str]) -> str:
    """The ``vramscope predict`` command that judges the launch against its cgroup."""
    import shlex

    command = shlex.join(argv)
    if len(command) > 300:
        command = command[:300] + "..."
    return (
        f"`vramscope predict --cgroup {shlex.quote(memcg)} -- {command}` judges the"
        " launch against that cgroup before it starts."
    )
