"""Assemble the evidence of one crash from the database (``vramscope postmortem``).

The crash is a ``crash`` event (a tracked process OOM-killed or dead during its load) or a
kernel ``oom_kill``/``oomd_kill`` record. Around it: the kernel's own figures, the memory
timeline of every tracked process and device from 10 minutes before to 1 minute after
(full resolution: retention keeps it, monitor/store/database.py), what was loading, the estimate
re-made from the victim's command line against what was measured at death, the ceiling,
the likely cause in one paragraph and the fix. The document is ``vramscope.postmortem/1``;
monitor/report/postmortem.py turns it into text or one self-contained HTML file.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
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
from monitor.device_names import device_labels
from monitor.store import reads
from monitor.store.database import KEEP_AFTER_MS, KEEP_BEFORE_MS, open_readonly
from monitor.units import gib_or_mib as _gib

CRASH_KINDS = ("crash", "oom_kill", "oomd_kill")


def _box_cgroup_version() -> int | None:
    """This box's memory cgroup hierarchy (collectors/cgroup.py): 1, 2 or None."""
    from collectors.base import Roots
    from collectors.cgroup import memory_hierarchy

    try:
        h = memory_hierarchy(Roots())
    except OSError:
        return None
    return h.version if h is not None else None


def find_crash(db: Any, pid: int | None = None, at_ms: int | None = None) -> dict[str, Any] | None:
    """The crash (or OOM kill) asked for; for one ``pid`` with no crash, its exit (a stop
    or a clean exit gets an "exit post-mortem")."""
    events = [e.as_dict() for e in reads.events_of_kinds(db, CRASH_KINDS)]
    if pid is not None:
        events = [e for e in events if e["data"].get("pid") == pid]
        if not events:
            events = [
                e.as_dict()
                for e in reads.events_of_kinds(db, ("process_exit",))
                if e.data.get("pid") == pid
            ]
    if not events:
        return None
    if at_ms is not None:
        return min(events, key=lambda e: abs(e["ts_ms"] - at_ms))
    return events[-1]


def _series(db: Any, start: int, end: int) -> tuple[list[dict], list[dict], dict[int, dict]]:
    devices: dict[str, dict[str, Any]] = {}
    for dp in reads.device_points(db, start, end):
        d = devices.setdefault(
            dp.device_id,
            {
                "device_id": dp.device_id,
                "name": dp.name,
                "total_bytes": dp.total_bytes,
                "points": [],
            },
        )
        if dp.used_bytes is not None:
            d["points"].append([dp.ts_ms, dp.used_bytes])
    procs: dict[tuple[int, str], dict[str, Any]] = {}
    infos: dict[int, dict] = {}
    for pp in reads.process_points(db, start, end):
        if pp.device_id == "host":
            held = sum(v or 0 for v in (pp.rss_anon_bytes, pp.rss_file_bytes, pp.rss_shmem_bytes))
        else:
            held = (pp.vram_bytes or 0) + (pp.gtt_bytes or 0)
        s = procs.setdefault(
            (pp.process_id, pp.device_id),
            {
                "pid": pp.pid,
                "comm": pp.comm,
                "device_id": pp.device_id,
                "points": [],
                "hwm_bytes": None,
            },
        )
        s["points"].append([pp.ts_ms, held])
        if pp.hwm_bytes is not None:
            s["hwm_bytes"] = max(s["hwm_bytes"] or 0, pp.hwm_bytes)
        infos[pp.process_id] = _info(pp)
    return list(devices.values()), list(procs.values()), infos


def _info(p: reads.ProcessPoint | reads.ProcessRecord) -> dict[str, Any]:
    return {
        "pid": p.pid,
        "comm": p.comm,
        "argv": list(p.argv),
        "engine": p.engine,
        "started_at_ms": p.started_at_ms,
        "exited_ms": p.exited_ms,
    }


def build(
    db_path: Path,
    pid: int | None = None,
    at_ms: int | None = None,
    cgroup_version: int | None = None,
) -> dict[str, Any]:
    """``cgroup_version``: the memory cgroup hierarchy the kill happened under (1 or 2),
    which names the limit a fix raises; None: this box's (the daemon's database is local)."""
    version = cgroup_version if cgroup_version is not None else _box_cgroup_version()
    db = open_readonly(db_path)
    try:
        if at_ms is not None:  # the moment must be one the database knows
            from monitor.store.history import check_moment

            first, last = reads.record_span(db)
            check_moment(db_path, at_ms, first, last)
        crash = find_crash(db, pid, at_ms)
        if crash is None:
            what = f" for pid {pid}" if pid is not None else ""
            raise ValueError(f"no crash or OOM kill recorded{what} in {db_path}")
        return _assemble(db, crash, version)
    finally:
        db.close()


def _kernel_figures(kernel: dict[str, Any]) -> dict[str, Any]:
    """The kernel OOM record's figures (monitor/logs/kernel.py): the victim's anon / file /
    shmem RSS at the kill, the constraint, its cgroup and that cgroup's limit."""
    kdata = kernel["data"]
    return {
        "anon_rss_bytes": _kb(kdata.get("anon_rss_kb")),
        "file_rss_bytes": _kb(kdata.get("file_rss_kb")),
        "shmem_rss_bytes": _kb(kdata.get("shmem_rss_kb")),
        "constraint": kdata.get("constraint"),
        "memcg": kdata.get("task_memcg") or kdata.get("memcg"),
        "memcg_limit_bytes": _kb(kdata.get("memcg_limit_kb")),
        "ts_ms": kernel["ts_ms"],
    }


def _untracked(pid: Any, records: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """An untracked victim, named by the first record (crash, kernel, exit) that names it."""
    comm = next(
        (c for c in (r.get("comm") for r in records) if isinstance(c, str) and c),
        None,
    )
    return {
        "pid": pid,
        "comm": comm or "unknown process",
        "argv": [],
        "engine": None,
        "started_at_ms": None,
        "exited_ms": None,
    }


def _assemble(db: Any, crash: dict[str, Any], version: int | None = None) -> dict[str, Any]:
    victim_pid = crash["data"].get("pid")
    t = crash["ts_ms"]
    start, end = t - KEEP_BEFORE_MS, t + KEEP_AFTER_MS
    nearby = [e.as_dict() for e in reads.events_between(db, start - 60_000, end)]
    kernel = next(
        (
            e
            for e in nearby
            if e["kind"] in ("oom_kill", "oomd_kill") and e["data"].get("pid") == victim_pid
        ),
        None,
    )
    exit_ev = next(
        (e for e in nearby if e["kind"] == "process_exit" and e["data"].get("pid") == victim_pid),
        None,
    )
    devices, processes, infos = _series(db, start, end)
    info = next((i for i in infos.values() if i["pid"] == victim_pid), None)
    if info is None and victim_pid is not None:
        record = reads.last_process(db, victim_pid)
        if record is not None:
            info = _info(record)
    how = (exit_ev or {}).get("data", {}).get("how") or (
        "killed by the kernel OOM killer" if kernel else crash["message"]
    )
    mine = [p for p in processes if p["pid"] == victim_pid]
    last = {p["device_id"]: last_seen_bytes(p["points"]) for p in mine if p["points"]}
    at_death = {p["device_id"]: at_death_bytes(p["points"]) for p in mine if p["points"]}
    peak = {
        p["device_id"]: max([q[1] for q in p["points"]] + [p["hwm_bytes"] or 0])
        for p in mine
        if p["points"]
    }
    kdata = (kernel or {}).get("data", {})
    kernel_fig = _kernel_figures(kernel) if kernel else None
    loading = _loading_at(db, nearby, t)
    estimate_doc = _estimate(db, info, at_death, victim_pid, t)
    ceiling = {d["device_id"]: d["total_bytes"] for d in devices if d["total_bytes"]}
    if kernel_fig and kernel_fig["memcg_limit_bytes"]:
        ceiling[f"memcg {kernel_fig['memcg']}"] = kernel_fig["memcg_limit_bytes"]
    exit_data = (exit_ev or {}).get("data", {})
    if info is None:  # untracked (a memory hog the kernel chose): named by the records
        info = _untracked(victim_pid, (crash["data"], kdata, exit_data))
    budget = None
    if kernel_fig and kernel_fig["constraint"] == "CONSTRAINT_MEMCG":
        budget = _budget(db, kdata, kernel_fig, info, loading, estimate_doc, (start, t), version)
    cause, fix = _cause(
        info, how, kernel_fig, peak, devices, processes, loading, estimate_doc, nearby, victim_pid
    )
    if budget is not None:
        cause, fix = budget_cause(budget) + " " + cause, budget_fix(budget)
    main_ids = {crash["id"], (kernel or {}).get("id"), (exit_ev or {}).get("id")}
    return {
        "schema": "vramscope.postmortem/1",
        "title": _title(crash, exit_data, kernel),
        "event": {k: crash[k] for k in ("ts_ms", "kind", "message", "data")},
        "victim": {
            **info,
            "how": how,
            "exit_cause": exit_data.get("cause"),
            "exit_code": exit_data.get("exit_code"),
            "exit_signal": exit_data.get("exit_signal"),
            "at_death": at_death,
            "last_measured": last,
            "peak": peak,
            "kernel": kernel_fig,
            "measured": _measured_at_death(db, victim_pid, mine),
        },
        "window": {"start_ms": start, "end_ms": end},
        "timeline": {
            "devices": devices,
            "processes": [
                {k: p[k] for k in ("pid", "comm", "device_id", "points")} for p in processes
            ],
        },
        "loading": loading,
        "estimate": estimate_doc,
        "ceiling": ceiling,
        "cause": cause,
        "fix": fix,
        "cgroup_budget": budget.as_dict() if budget is not None else None,
        **capped_events([e for e in nearby if e["id"] not in main_ids], t),
    }


MAX_EVENTS = 50


def capped_events(events: list[dict[str, Any]], t_ms: int) -> dict[str, Any]:
    """The window's other events, at most ``MAX_EVENTS``: the ones nearest the death, in
    time order, with how many were left out and of which kinds (a box whose log floods
    thousands of events in ten minutes still gives a report of a few hundred lines)."""
    near = sorted(events, key=lambda e: (abs(e["ts_ms"] - t_ms), e["ts_ms"]))[:MAX_EVENTS]
    kept = {id(e) for e in near}
    left: dict[str, int] = {}
    for e in events:
        if id(e) not in kept:
            left[e["kind"]] = left.get(e["kind"], 0) + 1
    return {
        "other_events": [
            {"ts_ms": e["ts_ms"], "kind": e["kind"], "message": e["message"]}
            for e in sorted(near, key=lambda e: e["ts_ms"])
        ],
        "other_events_omitted": sum(left.values()),
        "other_events_omitted_kinds": dict(sorted(left.items(), key=lambda kv: -kv[1])),
    }


AT_DEATH_WINDOW_MS = 2000


def last_seen_bytes(points: list[list[int]]) -> int:
    """Its last nonzero sample ("last seen"): the samples taken while it died read 0 (the
    kernel has unmapped it, exit_mmap), which says nothing about what it held; 0 only
    when every sample was 0."""
    return next((v for _, v in reversed(points) if v), 0)


def at_death_bytes(points: list[list[int]]) -> int:
    """Memory at death: the largest sample of the last ``AT_DEATH_WINDOW_MS`` before the
    last one. A dying process frees its memory before its /proc entry goes (the kernel
    unmaps it in exit_mmap), so the last sample or two may read 0 or a fraction, taken
    while it was dying; the largest of the final 2 s is the figure from just before the
    collapse (never more than the peak, and equal to the last sample when nothing
    collapsed)."""
    end = points[-1][0]
    return max(v for ts, v in points if ts >= end - AT_DEATH_WINDOW_MS)


def _title(crash: dict[str, Any], exit_data: dict[str, Any], kernel: dict | None) -> str:
    """ "OOM post-mortem" only for an OOM (a kernel or oomd kill, an engine OOM); "crash
    post-mortem" for a crash; "exit post-mortem" for anything else."""
    from monitor.exits import OOM_CAUSES

    cause = exit_data.get("cause")
    if kernel is not None or crash["kind"] in ("oom_kill", "oomd_kill") or (cause in OOM_CAUSES):
        return "OOM post-mortem"
    if cause == "crashed" or (cause is None and crash["kind"] == "crash"):
        return "crash post-mortem"
    return "exit post-mortem"


def _loading_at(db: Any, nearby: list[dict], t: int) -> list[dict[str, Any]]:
    """Servers that had started loading and not finished at ``t``, and were still alive
    then (a load whose process exited earlier is over), named from the processes table."""
    out = []
    for e in nearby:
        pid = e["data"].get("pid")
        if e["kind"] != "load_started" or e["ts_ms"] > t or not isinstance(pid, int):
            continue
        if any(
            f["kind"] in ("load_finished", "process_exit")
            and f["data"].get("pid") == pid
            and e["ts_ms"] <= f["ts_ms"] < t
            for f in nearby
        ):
            continue
        record = reads.process_seen_by(db, pid, t)
        if record is None or (record.exited_ms is not None and record.exited_ms < t):
            continue
        model = e["data"].get("model")
        out.append(
            {
                "pid": pid,
                "comm": record.comm,
                "model": model if isinstance(model, str) else None,
                "started_ms": e["ts_ms"],
            }
        )
    return out


def _measured_at_death(db: Any, pid: int | None, mine: list[dict]) -> dict[str, Any] | None:
    """What the victim held at its last recorded tick by the one definition every view
    uses (monitor/analysis/measured.py, its helpers' GPU memory included), with that tick's time."""
    from monitor.analysis.measured import measure
    from monitor.analysis.state import DatabaseMoment, box_state
    from monitor.engines.recognise import helper_parents

    ticks = [q[0] for p in mine for q in p["points"]]
    if pid is None or not ticks:
        return None
    snap = box_state(DatabaseMoment(None, max(ticks), db)).snapshot
    helpers = helper_parents({p.pid: p for p in snap.processes})
    held = measure(pid, snap.memory, [h for h, owner in helpers.items() if owner == pid])
    return {"ts_ms": snap.ts_ms, **held.as_dict()}


def _kb(value: Any) -> int | None:
    return int(value) * 1024 if isinstance(value, int | float) else None


def _estimate(
    db: Any, info: dict | None, at_death: dict[str, int], pid: int | None, t_ms: int
) -> dict[str, Any] | None:
    """The victim's launch estimate: the daemon's own, stored when it first saw the server
    (monitor/store/estimates.py: right even when the model file has gone since), else one
    made now from the model file when it still exists."""
    est, source = None, None
    if pid is not None:
        from monitor.analysis.stored import assessments_at

        try:
            mine = [
                a
                for (p, _start), a in assessments_at(db, t_ms).items()
                if p == pid and a.estimate is not None
            ]
        except Exception:  # an older database, or a row that no longer parses
            mine = []
        if mine:
            est = max(mine, key=lambda a: a.ts_ms).estimate
            source = "the daemon's estimate of this launch"
    if est is None and info and info.get("argv"):
        from monitor.engines import parse_command
        from monitor.estimate import estimate

        spec = parse_command(list(info["argv"]))
        if spec is not None and spec.model_path and Path(spec.model_path).exists():
            try:
                est = estimate(spec, ())
                source = "estimated now from the model file"
            except Exception:  # the model may have changed since: no estimate, not a failure
                est = None
    if est is None:
        return None
    return {
        "by_device": est.by_device(),
        "by_device_with_growth": est.by_device(include_growth=True),
        "source": source,
        "measured_at_death": at_death,
    }


def _members(
    db: Any, cgroup: str, kernel_fig: dict, victim: dict, start: int, t: int
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


def _growth_evidence(db: Any, victim: dict, t: int) -> tuple[str, str, str] | None:
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
    from monitor.store.history import snapshot_in

    tick = reads.tick_at_or_before(db, t)
    if tick is None:
        return []
    return [d for d in snapshot_in(db, tick).devices if d.memory_kind not in ("host",)]


def _budget(
    db: Any,
    kdata: dict,
    kernel_fig: dict,
    info: dict | None,
    loading: list[dict],
    est: dict | None,
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


CGROUP_FIX_MARGIN = 1.10  # 10 % above the launch's need: page cache and allocator slack


def _held_at_kill(kernel: dict, rss: int) -> str:
    """The kernel record's anon/file/shmem split, naming only the parts it gave."""
    parts = [
        f"{_gib(kernel[key])} {label}"
        for key, label in (
            ("anon_rss_bytes", "anonymous"),
            ("file_rss_bytes", "file-backed"),
            ("shmem_rss_bytes", "shared"),
        )
        if kernel.get(key) is not None
    ]
    if not parts:
        return "an amount the kernel record does not give"
    split = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return split + " memory" + (f" ({_gib(rss)} in all)" if len(parts) > 1 else "")


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


def cgroup_fix(rss_bytes: int, est: dict | None, memcg: str | None, argv: list[str]) -> str:
    """The limit a memory cgroup needs for this launch: its host part by the estimate,
    growth included, plus a margin (never less than 1.2 x what it held at the kill), and
    the ``predict`` command that judges the launch against that cgroup first."""

    held = int(rss_bytes * 1.2)
    if est is not None:
        load = est["by_device"].get("host", 0)
        grown = est.get("by_device_with_growth", est["by_device"]).get("host", load)
        need = max(held, int(grown * CGROUP_FIX_MARGIN))
        why = (
            f"the launch needs {_gib(load)} of host memory by its estimate"
            + (f", {_gib(grown)} once its caches fill" if grown > load else "")
            + f", and it held {_gib(rss_bytes)} when it was killed"
        )
    else:
        need = held
        why = f"1.2 x the {_gib(rss_bytes)} it held when it was killed; no estimate known"
    # said in tenths of a GiB: rounded up (never below the need), 1e-6 for float noise
    need = int(math.ceil(need / 1024**3 * 10 - 1e-6) / 10 * 1024**3)
    text = f"Raise the cgroup's limit (MemoryMax=) to at least {_gib(need)} ({why})"
    if argv and memcg:
        text += "; " + predict_hint(memcg, argv)
    else:
        text += ", or run a smaller model or context; `vramscope predict` checks a launch "
        text += "before it starts."
    return text


def _cause(
    info: dict | None,
    how: str,
    kernel: dict | None,
    peak: dict[str, int],
    devices: list[dict],
    processes: list[dict],
    loading: list[dict],
    est: dict | None,
    nearby: list[dict],
    pid: int | None,
) -> tuple[str, str]:
    name = f"{(info or {}).get('comm', '?')} (pid {pid})"
    parts, fixes = [], []
    if kernel:
        rss = sum(
            v or 0
            for v in (kernel["anon_rss_bytes"], kernel["file_rss_bytes"], kernel["shmem_rss_bytes"])
        )
        if kernel["constraint"] == "CONSTRAINT_MEMCG":
            limit = kernel["memcg_limit_bytes"]
            parts.append(
                f"The kernel OOM killer ended {name} because its memory cgroup "
                f"{kernel['memcg']} reached its limit"
                + (f" of {_gib(limit)}" if limit else "")
                + f"; at the kill it held {_held_at_kill(kernel, rss)}."
            )
            fixes.append(
                cgroup_fix(rss, est, kernel.get("memcg"), list((info or {}).get("argv") or []))
            )
        else:
            host = next((d for d in devices if d["device_id"] == "host"), None)
            top = sorted(
                (
                    (p["points"][-1][1], p["comm"], p["pid"])
                    for p in processes
                    if p["device_id"] == "host" and p["points"]
                ),
                reverse=True,
            )[:2]
            parts.append(
                f"The whole machine ran out of memory and the kernel OOM killer "
                f"chose {name}, which held {_gib(rss)}"
                + (
                    f"; host RAM in use had reached "
                    f"{_gib(host['points'][-1][1])} of {_gib(host['total_bytes'])}"
                    if host and host["points"]
                    else ""
                )
                + "."
            )
            if top:
                fixes.append(
                    "Free host memory before the next load: the largest processes "
                    "were " + ", ".join(f"{c} (pid {p}, {_gib(b)})" for b, c, p in top) + "."
                )
    elif how == "exited during load":
        parts.append(f"{name} died while loading, before its memory settled.")
    else:
        parts.append(f"{name} {how}.")
    apps = [e for e in nearby if e["kind"] in ("app_oom", "engine_oom")]
    if apps:
        parts.append(f'The engine reported: "{apps[-1]["message"]}".')
        fixes.append(
            "The GPU allocation failed: lower -c / -np or the KV type, or offload "
            "fewer layers (-ngl); `vramscope predict --fit-ctx` finds what fits."
        )
    if any(d["device_id"].startswith("drm:") for d in devices):
        parts.append(
            "On this machine GPU memory in GTT is taken from host RAM but is neither "
            "in any process's RSS nor charged to its cgroup, so the kernel may not "
            "see which process really used the memory."
        )
    if est:
        need = sum(est["by_device"].values())
        got = sum(est["measured_at_death"].values())
        parts.append(
            f"Its launch was estimated at {_gib(need)}; {_gib(got)} was measured "
            "just before it died."
        )
    if loading and not any(x["pid"] == pid for x in loading):
        parts.append(
            "Also loading at the time: "
            + ", ".join(
                f"{x['comm']} (pid {x['pid']}" + (f", {x['model']})" if x["model"] else ")")
                for x in loading
            )
            + "."
        )
    if peak:
        parts.append("Its peak: " + ", ".join(f"{_gib(v)} on {k}" for k, v in peak.items()) + ".")
    return " ".join(parts), " ".join(fixes) or "No fix could be inferred from the evidence."


def list_events(
    db_path: Path, since_ms: int, kinds: tuple[str, ...] = (), limit: int | None = None
) -> list[dict]:
    """Events from ``since_ms`` in time order, at most ``limit`` of them: the limit is
    SQL's, read along the ``events_ts`` index, so a long history is never loaded whole."""
    db = open_readonly(db_path)
    try:
        return [e.as_dict() for e in reads.events_since(db, since_ms, kinds, limit)]
    finally:
        db.close()


def list_device_labels(db_path: Path) -> dict[str, str]:
    """Every recorded device's display name (monitor/device_names.py), by its id."""
    db = open_readonly(db_path)
    try:
        return device_labels(reads.device_names(db))
    finally:
        db.close()
