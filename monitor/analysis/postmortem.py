"""Assemble the evidence of one crash from the database (``vramscope postmortem``).

The crash is a ``crash`` event (a tracked process OOM-killed or dead during its load) or a
kernel ``oom_kill``/``oomd_kill`` record. Around it: the kernel's own figures, the memory
timeline of every tracked process and device from 10 minutes before to 1 minute after
(full resolution: retention keeps it, monitor/store/database.py), what was loading, the estimate
re-made from the victim's command line against what was measured at death, the ceiling,
the likely cause in one paragraph and the fix. The result is a typed ``PostMortem``
(monitor/analysis/postmortem_doc.py; its JSON: ``vramscope.postmortem/1``);
monitor/report/postmortem/ turns it into text, an SVG chart or one self-contained HTML file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from monitor.analysis.cgroup_budget import Budget
from monitor.analysis.postmortem_budget import budget_cause, budget_fix, budget_of, predict_hint
from monitor.analysis.postmortem_doc import (
    SCHEMA,
    CgroupBudget,
    CrashEvent,
    DeviceTimeline,
    KernelRecord,
    LaunchEstimate,
    Loading,
    MeasuredAtDeath,
    OtherEvent,
    PostMortem,
    ProcessTimeline,
    Victim,
)
from monitor.device_names import device_labels
from monitor.errors import NotRecorded
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


def _series(
    db: Any, start: int, end: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[int, dict[str, Any]]]:
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
    infos: dict[int, dict[str, Any]] = {}
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


def build_model(
    db_path: Path,
    pid: int | None = None,
    at_ms: int | None = None,
    cgroup_version: int | None = None,
) -> PostMortem:
    """The post-mortem of the crash asked for (the last one by default), typed.

    ``cgroup_version``: the memory cgroup hierarchy the kill happened under (1 or 2),
    which names the limit a fix raises; None: this box's (the daemon's database is local)."""
    version = cgroup_version if cgroup_version is not None else _box_cgroup_version()
    db = open_readonly(db_path)
    try:
        if at_ms is not None:  # the moment must be one the database knows
            from monitor.store.moment import check_moment

            first, last = reads.record_span(db)
            check_moment(db_path, at_ms, first, last)
        crash = find_crash(db, pid, at_ms)
        if crash is None:
            what = f" for pid {pid}" if pid is not None else ""
            raise NotRecorded(f"no crash or OOM kill recorded{what} in {db_path}")
        return _assemble(db, crash, version)
    finally:
        db.close()


def build(
    db_path: Path,
    pid: int | None = None,
    at_ms: int | None = None,
    cgroup_version: int | None = None,
) -> dict[str, Any]:
    """The post-mortem as its JSON document (``vramscope.postmortem/1``): see
    :func:`build_model`."""
    return build_model(db_path, pid, at_ms, cgroup_version).to_json()


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


def _assemble(db: Any, crash: dict[str, Any], version: int | None = None) -> PostMortem:
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
        budget = budget_of(db, kdata, kernel_fig, info, loading, estimate_doc, (start, t), version)
    cause, fix = _cause(
        info, how, kernel_fig, peak, devices, processes, loading, estimate_doc, nearby, victim_pid
    )
    if budget is not None:
        cause, fix = budget_cause(budget) + " " + cause, budget_fix(budget)
    main_ids = {crash["id"], (kernel or {}).get("id"), (exit_ev or {}).get("id")}
    victim = Victim(
        info["pid"],
        info["comm"],
        tuple(info["argv"]),
        info["engine"],
        info["started_at_ms"],
        info["exited_ms"],
        how,
        exit_data.get("cause"),
        exit_data.get("exit_code"),
        exit_data.get("exit_signal"),
        at_death,
        last,
        peak,
        KernelRecord(**kernel_fig) if kernel_fig else None,
        _measured_at_death(db, victim_pid, mine),
    )
    others = capped_events([e for e in nearby if e["id"] not in main_ids], t)
    return PostMortem(
        SCHEMA,
        _title(crash, exit_data, kernel),
        CrashEvent(crash["ts_ms"], crash["kind"], crash["message"], crash["data"]),
        victim,
        start,
        end,
        tuple(_device_timeline(d) for d in devices),
        tuple(_process_timeline(p) for p in processes),
        tuple(Loading(**x) for x in loading),
        LaunchEstimate(**estimate_doc) if estimate_doc else None,
        ceiling,
        cause,
        fix,
        _budget_doc(budget),
        tuple(OtherEvent(**e) for e in others["other_events"]),
        others["other_events_omitted"],
        others["other_events_omitted_kinds"],
    )


def _device_timeline(d: dict[str, Any]) -> DeviceTimeline:
    points = tuple((ts, v) for ts, v in d["points"])
    return DeviceTimeline(d["device_id"], d["name"], d["total_bytes"], points)


def _process_timeline(p: dict[str, Any]) -> ProcessTimeline:
    points = tuple((ts, v) for ts, v in p["points"])
    return ProcessTimeline(p["pid"], p["comm"], p["device_id"], points)


def _budget_doc(budget: Budget | None) -> CgroupBudget | None:
    """The budget as the post-mortem carries it: its ``as_dict()`` document, typed."""
    return None if budget is None else CgroupBudget.from_json(budget.as_dict())


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


def _title(crash: dict[str, Any], exit_data: dict[str, Any], kernel: dict[str, Any] | None) -> str:
    """ "OOM post-mortem" only for an OOM (a kernel or oomd kill, an engine OOM); "crash
    post-mortem" for a crash; "exit post-mortem" for anything else."""
    from monitor.exits import OOM_CAUSES

    cause = exit_data.get("cause")
    if kernel is not None or crash["kind"] in ("oom_kill", "oomd_kill") or (cause in OOM_CAUSES):
        return "OOM post-mortem"
    if cause == "crashed" or (cause is None and crash["kind"] == "crash"):
        return "crash post-mortem"
    return "exit post-mortem"


def _loading_at(db: Any, nearby: list[dict[str, Any]], t: int) -> list[dict[str, Any]]:
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


def _measured_at_death(
    db: Any, pid: int | None, mine: list[dict[str, Any]]
) -> MeasuredAtDeath | None:
    """What the victim held at its last recorded tick by the one definition every view
    uses (monitor/analysis/measured.py, its helpers' GPU memory included), with that tick's time."""
    from monitor.analysis.measured import measure
    from monitor.analysis.state import DatabaseMoment, box_state
    from monitor.servers.recognise import helper_parents

    ticks = [q[0] for p in mine for q in p["points"]]
    if pid is None or not ticks:
        return None
    snap = box_state(DatabaseMoment(None, max(ticks), db)).snapshot
    helpers = helper_parents({p.pid: p for p in snap.processes})
    held = measure(pid, snap.memory, [h for h, owner in helpers.items() if owner == pid])
    return MeasuredAtDeath(
        snap.ts_ms,
        held.total_bytes,
        held.device_bytes,
        held.host_anon_bytes,
        held.host_file_bytes,
        tuple(held.unknown_device_ids),
    )


def _kb(value: Any) -> int | None:
    return int(value) * 1024 if isinstance(value, int | float) else None


def _estimate(
    db: Any, info: dict[str, Any] | None, at_death: dict[str, int], pid: int | None, t_ms: int
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
        from monitor.estimate import estimate
        from monitor.servers import parse_command

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


CGROUP_FIX_MARGIN = 1.10  # 10 % above the launch's need: page cache and allocator slack


def _held_at_kill(kernel: dict[str, Any], rss: int) -> str:
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


def cgroup_fix(
    rss_bytes: int, est: dict[str, Any] | None, memcg: str | None, argv: list[str]
) -> str:
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
    info: dict[str, Any] | None,
    how: str,
    kernel: dict[str, Any] | None,
    peak: dict[str, int],
    devices: list[dict[str, Any]],
    processes: list[dict[str, Any]],
    loading: list[dict[str, Any]],
    est: dict[str, Any] | None,
    nearby: list[dict[str, Any]],
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
) -> list[dict[str, Any]]:
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
