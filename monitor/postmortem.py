"""Assemble the evidence of one crash from the database (``vramscope postmortem``).

The crash is a ``crash`` event (a tracked process OOM-killed or dead during its load) or a
kernel ``oom_kill``/``oomd_kill`` record. Around it: the kernel's own figures, the memory
timeline of every tracked process and device from 10 minutes before to 1 minute after
(full resolution: retention keeps it, monitor/store.py), what was loading, the estimate
re-made from the victim's command line against what was measured at death, the ceiling,
the likely cause in one paragraph and the fix. The document is ``vramscope.postmortem/1``;
monitor/postmortem_render.py turns it into text or one self-contained HTML file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from monitor.store import KEEP_AFTER_MS, KEEP_BEFORE_MS, open_readonly

GIB = 1024**3
MIB = 1024**2
CRASH_KINDS = ("crash", "oom_kill", "oomd_kill")


def _gib(n: int | None) -> str:
    return "?" if n is None else (f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB")


def _event_rows(db: Any, where: str, params: tuple) -> list[dict[str, Any]]:
    rows = db.execute(f"SELECT id, ts_ms, kind, severity, subject, message, data FROM events "
                      f"WHERE {where}", params).fetchall()
    return [{"id": r[0], "ts_ms": r[1], "kind": r[2], "severity": r[3], "subject": r[4],
             "message": r[5], "data": json.loads(r[6]) if r[6] else {}} for r in rows]


def find_crash(db: Any, pid: int | None = None, at_ms: int | None = None
               ) -> dict[str, Any] | None:
    marks = ",".join("?" for _ in CRASH_KINDS)
    events = _event_rows(db, f"kind IN ({marks}) ORDER BY ts_ms", CRASH_KINDS)
    if pid is not None:
        events = [e for e in events if e["data"].get("pid") == pid]
    if not events:
        return None
    if at_ms is not None:
        return min(events, key=lambda e: abs(e["ts_ms"] - at_ms))
    return events[-1]


def _series(db: Any, start: int, end: int) -> tuple[list[dict], list[dict], dict[int, dict]]:
    devices: dict[str, dict[str, Any]] = {}
    names = {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, name, total_bytes FROM devices")}
    for ts, device_id, used, total in db.execute(
            "SELECT ts_ms, device_id, used_bytes, total_bytes FROM device_samples"
            " WHERE ts_ms BETWEEN ? AND ? ORDER BY ts_ms", (start, end)):
        name, static_total = names.get(device_id, (device_id, None))
        d = devices.setdefault(device_id, {"device_id": device_id, "name": name,
                                           "total_bytes": total or static_total, "points": []})
        if used is not None:
            d["points"].append([ts, used])
    procs: dict[tuple[int, str], dict[str, Any]] = {}
    infos: dict[int, dict] = {}
    for row in db.execute(
            "SELECT s.ts_ms, s.device_id, p.id, p.pid, p.comm, p.argv, p.engine,"
            " s.vram_bytes, s.gtt_bytes, s.rss_anon_bytes, s.rss_file_bytes, s.rss_shmem_bytes,"
            " s.hwm_bytes, p.started_at_ms, p.exited_ms FROM process_samples s"
            " JOIN processes p ON p.id = s.process_id WHERE s.ts_ms BETWEEN ? AND ?"
            " ORDER BY s.ts_ms", (start, end)):
        ts, device_id, pid_key, pid, comm = row[0], row[1], row[2], row[3], row[4]
        if device_id == "host":
            held = sum(v or 0 for v in row[9:12])
        else:
            held = (row[7] or 0) + (row[8] or 0)
        s = procs.setdefault((pid_key, device_id), {"pid": pid, "comm": comm,
                                                    "device_id": device_id, "points": [],
                                                    "hwm_bytes": None})
        s["points"].append([ts, held])
        if row[12] is not None:
            s["hwm_bytes"] = max(s["hwm_bytes"] or 0, row[12])
        infos[pid_key] = {"pid": pid, "comm": comm, "argv": json.loads(row[5]),
                          "engine": row[6], "started_at_ms": row[13], "exited_ms": row[14]}
    return list(devices.values()), list(procs.values()), infos


def build(db_path: Path, pid: int | None = None, at_ms: int | None = None) -> dict[str, Any]:
    db = open_readonly(db_path)
    try:
        crash = find_crash(db, pid, at_ms)
        if crash is None:
            what = f" for pid {pid}" if pid is not None else ""
            raise ValueError(f"no crash or OOM kill recorded{what} in {db_path}")
        return _assemble(db, crash)
    finally:
        db.close()


def _assemble(db: Any, crash: dict[str, Any]) -> dict[str, Any]:
    victim_pid = crash["data"].get("pid")
    t = crash["ts_ms"]
    start, end = t - KEEP_BEFORE_MS, t + KEEP_AFTER_MS
    nearby = _event_rows(db, "ts_ms BETWEEN ? AND ? ORDER BY ts_ms", (start - 60_000, end))
    kernel = next((e for e in nearby if e["kind"] in ("oom_kill", "oomd_kill")
                   and e["data"].get("pid") == victim_pid), None)
    exit_ev = next((e for e in nearby if e["kind"] == "process_exit"
                    and e["data"].get("pid") == victim_pid), None)
    devices, processes, infos = _series(db, start, end)
    info = next((i for i in infos.values() if i["pid"] == victim_pid), None)
    if info is None and victim_pid is not None:
        row = db.execute("SELECT pid, comm, argv, engine, started_at_ms, exited_ms FROM"
                         " processes WHERE pid = ? ORDER BY id DESC", (victim_pid,)).fetchone()
        if row:
            info = {"pid": row[0], "comm": row[1], "argv": json.loads(row[2]),
                    "engine": row[3], "started_at_ms": row[4], "exited_ms": row[5]}
    how = (exit_ev or {}).get("data", {}).get("how") or (
        "killed by the kernel OOM killer" if kernel else crash["message"])
    mine = [p for p in processes if p["pid"] == victim_pid]
    last = {p["device_id"]: p["points"][-1][1] for p in mine if p["points"]}
    peak = {p["device_id"]: max([q[1] for q in p["points"]] + [p["hwm_bytes"] or 0])
            for p in mine if p["points"]}
    kdata = (kernel or {}).get("data", {})
    kernel_fig = None
    if kernel:
        kernel_fig = {
            "anon_rss_bytes": _kb(kdata.get("anon_rss_kb")),
            "file_rss_bytes": _kb(kdata.get("file_rss_kb")),
            "shmem_rss_bytes": _kb(kdata.get("shmem_rss_kb")),
            "constraint": kdata.get("constraint"), "memcg": kdata.get("task_memcg")
            or kdata.get("memcg"), "memcg_limit_bytes": _kb(kdata.get("memcg_limit_kb")),
            "ts_ms": kernel["ts_ms"]}
    loading = [{"pid": e["data"].get("pid"), "comm": (e["subject"] or "").split("[")[0],
                "model": e["data"].get("model"), "started_ms": e["ts_ms"]}
               for e in nearby if e["kind"] == "load_started" and e["ts_ms"] <= t
               and not any(f["kind"] == "load_finished" and f["data"].get("pid")
                           == e["data"].get("pid") and e["ts_ms"] <= f["ts_ms"] <= t
                           for f in nearby)]
    estimate_doc = _estimate(info, last)
    ceiling = {d["device_id"]: d["total_bytes"] for d in devices if d["total_bytes"]}
    if kernel_fig and kernel_fig["memcg_limit_bytes"]:
        ceiling[f"memcg {kernel_fig['memcg']}"] = kernel_fig["memcg_limit_bytes"]
    cause, fix = _cause(info, how, kernel_fig, peak, devices, processes, loading,
                        estimate_doc, nearby, victim_pid)
    main_ids = {crash["id"], (kernel or {}).get("id"), (exit_ev or {}).get("id")}
    return {
        "schema": "vramscope.postmortem/1",
        "event": {k: crash[k] for k in ("ts_ms", "kind", "message", "data")},
        "victim": {**(info or {"pid": victim_pid, "comm": crash["subject"], "argv": [],
                               "engine": None, "started_at_ms": None, "exited_ms": None}),
                   "how": how, "last_measured": last, "peak": peak, "kernel": kernel_fig},
        "window": {"start_ms": start, "end_ms": end},
        "timeline": {"devices": devices,
                     "processes": [{k: p[k] for k in ("pid", "comm", "device_id", "points")}
                                   for p in processes]},
        "loading": loading,
        "estimate": estimate_doc,
        "ceiling": ceiling,
        "cause": cause,
        "fix": fix,
        "other_events": [{"ts_ms": e["ts_ms"], "kind": e["kind"], "message": e["message"]}
                         for e in nearby if e["id"] not in main_ids],
    }


def _kb(value: Any) -> int | None:
    return int(value) * 1024 if isinstance(value, int | float) else None


def _estimate(info: dict | None, last: dict[str, int]) -> dict[str, Any] | None:
    if not info or not info.get("argv"):
        return None
    from monitor.engines import parse_command
    from monitor.estimate import estimate

    spec = parse_command(list(info["argv"]))
    if spec is None or not spec.model_path or not Path(spec.model_path).exists():
        return None
    try:
        est = estimate(spec, ())
    except Exception:  # the model may have changed since: no estimate, not a failure
        return None
    return {"by_device": est.by_device(), "measured_at_death": last}


def _cause(info: dict | None, how: str, kernel: dict | None, peak: dict[str, int],
           devices: list[dict], processes: list[dict], loading: list[dict],
           est: dict | None, nearby: list[dict], pid: int | None) -> tuple[str, str]:
    name = f"{(info or {}).get('comm', '?')} (pid {pid})"
    parts, fixes = [], []
    if kernel:
        rss = sum(v or 0 for v in (kernel["anon_rss_bytes"], kernel["file_rss_bytes"],
                                   kernel["shmem_rss_bytes"]))
        if kernel["constraint"] == "CONSTRAINT_MEMCG":
            limit = kernel["memcg_limit_bytes"]
            parts.append(f"The kernel OOM killer ended {name} because its memory cgroup "
                         f"{kernel['memcg']} reached its limit"
                         + (f" of {_gib(limit)}" if limit else "")
                         + f"; at the kill it held {_gib(kernel['anon_rss_bytes'])} anonymous,"
                         f" {_gib(kernel['file_rss_bytes'])} file-backed and "
                         f"{_gib(kernel['shmem_rss_bytes'])} shared memory ({_gib(rss)}).")
            fixes.append(f"Raise the cgroup's limit (MemoryMax=) above {_gib(int(rss * 1.2))}"
                         ", or run a smaller model or context; `vramscope predict` checks a "
                         "launch before it starts.")
        else:
            host = next((d for d in devices if d["device_id"] == "host"), None)
            top = sorted(((p["points"][-1][1], p["comm"], p["pid"]) for p in processes
                          if p["device_id"] == "host" and p["points"]), reverse=True)[:2]
            parts.append(f"The whole machine ran out of memory and the kernel OOM killer "
                         f"chose {name}, which held {_gib(rss)}"
                         + (f"; host RAM in use had reached "
                            f"{_gib(host['points'][-1][1])} of {_gib(host['total_bytes'])}"
                            if host and host["points"] else "") + ".")
            if top:
                fixes.append("Free host memory before the next load: the largest processes "
                             "were " + ", ".join(f"{c} (pid {p}, {_gib(b)})"
                                                 for b, c, p in top) + ".")
    elif how == "exited during load":
        parts.append(f"{name} died while loading, before its memory settled.")
    else:
        parts.append(f"{name} {how}.")
    apps = [e for e in nearby if e["kind"] in ("app_oom", "engine_oom")]
    if apps:
        parts.append(f"The engine reported: \"{apps[-1]['message']}\".")
        fixes.append("The GPU allocation failed: lower -c / -np or the KV type, or offload "
                     "fewer layers (-ngl); `vramscope predict --fit-ctx` finds what fits.")
    if any(d["device_id"].startswith("drm:") for d in devices):
        parts.append("On this machine GPU memory in GTT is taken from host RAM but is neither "
                     "in any process's RSS nor charged to its cgroup, so the kernel may not "
                     "see which process really used the memory.")
    if est:
        need = sum(est["by_device"].values())
        got = sum(est["measured_at_death"].values())
        parts.append(f"Its launch was estimated at {_gib(need)}; {_gib(got)} was measured "
                     "at its last sample.")
    if loading and not any(x["pid"] == pid for x in loading):
        parts.append("Also loading at the time: " + ", ".join(
            f"{x['comm']} (pid {x['pid']}, {x['model']})" for x in loading) + ".")
    if peak:
        parts.append("Its peak: " + ", ".join(f"{_gib(v)} on {k}" for k, v in peak.items())
                     + ".")
    return " ".join(parts), " ".join(fixes) or "No fix could be inferred from the evidence."


def list_events(db_path: Path, since_ms: int, kinds: tuple[str, ...] = ()) -> list[dict]:
    db = open_readonly(db_path)
    try:
        where, params = "ts_ms >= ?", [since_ms]
        if kinds:
            where += f" AND kind IN ({','.join('?' for _ in kinds)})"
            params += list(kinds)
        return _event_rows(db, where + " ORDER BY ts_ms", tuple(params))
    finally:
        db.close()
