"""The work behind ``vramscope predict``: state in, verdict out (text or JSON, exit code)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from collectors.base import CgroupMemory, Snapshot
from monitor.analysis.picture import GIB, Picture, ProcessUse, picture_from_snapshot
from monitor.analysis.predict import Prediction, _worst, fit_ctx, freed_by, judge, predict
from monitor.config import Config
from monitor.engines import parse_command
from monitor.engines.spec import LaunchSpec
from monitor.estimate import EstimateError, estimate
from monitor.estimate.model import DeviceInfo, devices_from_samples

EXIT_FITS, EXIT_OOM = 0, 1
EXIT_GROWS_OOM = 3  # fits at load, not once the prompt cache / checkpoints fill


@dataclasses.dataclass
class PredictRequest:
    command: list[str]
    model_id: str | None = None
    state: Path | None = None
    at: str | None = None
    swap_config: Path | None = None
    swap_url: str | None = None
    margin_gib: float = 0.5
    want_fit_ctx: bool = False
    bandwidth_gbs: dict[str, float] = dataclasses.field(default_factory=dict)
    cgroup: str | None = None  # --cgroup PATH: the memory cgroup the launch will run in
    unit: str | None = None  # --unit NAME: a systemd unit's cgroup (system.slice/NAME)


def take_snapshot(cfg: Config, req: PredictRequest, snapshot: Snapshot | None = None
                  ) -> Snapshot:
    """The box state to judge against: ``snapshot`` when given (the daemon's latest, for
    the HTTP API), else ``req.state``, ``req.at`` or a live sample."""
    from monitor.analysis.state import Daemon, box_state, chosen_origin

    origin = Daemon(snapshot) if snapshot is not None else chosen_origin(
        cfg.roots, cfg.collectors, cfg.db_path, req.state, req.at)
    return box_state(origin).snapshot


def launch_cgroup(cfg: Config, req: PredictRequest, snap: Snapshot, live: bool
                  ) -> tuple[CgroupMemory | None, str | None]:
    """(the memory cgroup limit the launch will run under, a note saying which one).

    ``--cgroup``/``--unit`` name it; ``predict MODEL_ID`` takes llama-swap's (its children
    inherit it); otherwise a live prediction takes predict's own (/proc/self/cgroup: a
    launch from this shell inherits it). A recorded state (--state, --at) or the daemon's
    snapshot (the HTTP API: the daemon is not the launcher) has no "self"."""
    from collectors import cgroup

    if req.cgroup is not None or req.unit is not None:
        if req.unit is not None and ("/" in req.unit or req.unit in ("", ".", "..")):
            raise EstimateError(f"--unit {req.unit}: expected a systemd unit name, "
                                "e.g. llama-swap.service")
        given = req.cgroup if req.cgroup is not None else f"/system.slice/{req.unit}"
        h, path = cgroup.resolve(cfg.roots, given, None if req.unit is None or req.cgroup
                                 else f"--unit {req.unit} ({given})")
        limit = cgroup.read_limit(h, path)
        return limit, f"the launch runs in the memory cgroup {path}" + (
            "" if limit is not None else " (no memory limit on it or its ancestors)")
    if req.model_id is not None:
        swap = [p for p in snap.processes if p.engine == "llama-swap"]
        limits = {c.pid: c.cgroup for c in snap.cgroups}
        for proc in swap:
            if proc.pid in limits:
                found = limits[proc.pid]
                return found, (f"llama-swap (pid {proc.pid}) runs in the memory cgroup "
                               f"{found.path}; the models it starts inherit it")
        return None, None
    if live and req.state is None and req.at is None:
        h = cgroup.memory_hierarchy(cfg.roots)
        found = cgroup.pid_limit(cfg.roots, h, "self")
        if found is not None:
            return found, (f"this shell runs in the memory cgroup {found.path}; a launch "
                           "from it inherits it (--cgroup/--unit to judge another)")
    return None, None


def gpu_devices(snap: Snapshot, cfg: Config) -> list[DeviceInfo]:
    return devices_from_samples(snap.devices, cfg.gpu_overhead_mib * 1024 * 1024)


def _model_of(argv: tuple[str, ...] | list[str]) -> str | None:
    spec = parse_command(list(argv))
    return spec.model_path if spec is not None else None


def running_servers(picture: Picture) -> list[ProcessUse]:
    seen: dict[int, ProcessUse] = {}
    for pic in picture.devices.values():
        for use in pic.processes:
            if use.engine is not None and use.pid not in seen:
                seen[use.pid] = use
    return list(seen.values())


def swap_target(req: PredictRequest, picture: Picture) -> tuple[list[str], list[ProcessUse],
                                                                 list[str]]:
    """(command, processes llama-swap would stop first, notes) for ``predict MODEL_ID``."""
    from monitor.integrations import llamaswap

    if req.swap_config is None:
        raise EstimateError("predicting a llama-swap model needs --swap-config FILE (or "
                            "[llama_swap] config in the config file)")
    config = llamaswap.load_config(req.swap_config)
    target = llamaswap.resolve(config, req.model_id or "")
    servers = running_servers(picture)
    by_path = {_model_of(u.argv): u for u in servers}
    running: dict[str, ProcessUse] = {}
    notes = []
    if req.swap_url:
        states = llamaswap.fetch_running(req.swap_url)
        ids = [m for m, state in states.items() if state not in ("stopped", "shutdown")]
    else:
        ids = [m.model_id for m in config.models.values() if _model_of(m.cmd) in by_path]
        notes.append("running models matched by their -m path (give --swap-url for "
                     "llama-swap's own /running)")
    for model_id in ids:
        model = config.models.get(model_id)
        path = _model_of(model.cmd) if model else None
        if path in by_path:
            running[model_id] = by_path[path]
    evict_ids = llamaswap.evictions(config, list(ids), target.model_id)
    evicted = [running[m] for m in evict_ids if m in running]
    if evict_ids:
        notes.append(f"llama-swap unloads first: {', '.join(evict_ids)}")
    return list(target.cmd), evicted, notes


def run_predict(cfg: Config, req: PredictRequest, snapshot: Snapshot | None = None
                ) -> tuple[str, int]:
    snap = take_snapshot(cfg, req, snapshot)
    limit, cgroup_note = launch_cgroup(cfg, req, snap, live=snapshot is None)
    picture = picture_from_snapshot(snap, int(req.margin_gib * GIB), limit)
    # llama.cpp's fit reads device free memory: it does not know the launch's cgroup
    fit_view = picture_from_snapshot(snap, int(req.margin_gib * GIB)) if limit else None
    devices = gpu_devices(snap, cfg)
    notes: list[str] = [cgroup_note] if cgroup_note else []
    evicted: list[ProcessUse] = []
    command = req.command
    if req.model_id is not None:
        command, evicted, swap_notes = swap_target(req, picture)
        notes += swap_notes
    if not command:
        raise EstimateError("nothing to predict: give a command after -- or a llama-swap "
                            "model id with --swap-config")
    spec = parse_command(command)
    if spec is None:
        raise EstimateError(f"not an inference server command: {' '.join(command[:3])} ...")
    if spec.refused:  # the engine would not start: no verdict to give
        where = f"llama-swap model {req.model_id}: " if req.model_id is not None else ""
        raise EstimateError(where + spec.refused[0])
    running = [u for u in running_servers(picture) if u.pid not in {e.pid for e in evicted}]
    result = predict(spec, picture, devices, evicted, running, fit_view=fit_view)
    if limit is not None and limit.memory_high_bytes is not None:
        host_need = result.estimate.by_device(include_growth=True).get("host", 0)
        over = host_need - max(0, limit.memory_high_bytes - (limit.memory_current_bytes or 0))
        if over > 0:
            notes.append(f"the cgroup {limit.path} has memory.high (MemoryHigh=) "
                         f"{_gib(limit.memory_high_bytes)} GiB: this load passes it by "
                         f"{_gib(over)} GiB, so the kernel throttles and reclaims (slow, "
                         "no kill) before memory.max")
    if not result.devices:  # no verdict is not "fits"
        raise EstimateError("nothing to judge: " + _why_nothing(result))
    best_ctx = None
    if req.want_fit_ctx:
        freed = freed_by(evicted, picture)
        ceiling_cells = result.estimate.n_ctx or 0
        shape_train = _train_ctx(spec, devices)
        best_ctx = fit_ctx(spec, lambda s: estimate(s, devices), picture, freed,
                           max(ceiling_cells, shape_train))
    bandwidth = None
    if req.bandwidth_gbs:
        bandwidth = _bandwidth_report(spec, devices, picture, result, req.bandwidth_gbs)
    code = EXIT_OOM if result.verdict == "oom" else (
        EXIT_GROWS_OOM if result.grown_verdict == "oom" else EXIT_FITS)
    if req.want_fit_ctx and best_ctx is None:
        code = EXIT_OOM
    doc = to_json(result, picture, notes, best_ctx, req.want_fit_ctx, bandwidth)
    return doc, code


def _why_nothing(result: Prediction) -> str:
    est = result.estimate
    if not est.components and est.notes:
        return est.notes[0]  # vLLM with no GPU total known: "vLLM takes 92% of each GPU..."
    return ("no device with a known free figure holds any part of this load (the box state "
            "has no free memory figure for " + ", ".join(sorted(est.by_device())) + ")"
            if est.by_device() else "the estimate places nothing on any device")


def _train_ctx(spec: LaunchSpec, devices: list[DeviceInfo]) -> int:
    try:
        est = estimate(replace(spec, ctx_size=0), devices)
    except EstimateError:
        return 0
    return est.n_ctx or 0


def _bandwidth_report(spec: LaunchSpec, devices: list[DeviceInfo], picture: Picture,
                      result: Prediction, gbs: dict[str, float]) -> dict[str, Any]:
    from monitor.analysis.bandwidth import ceiling

    bw = {k: v * 1e9 for k, v in gbs.items()}
    if "gpu" in bw:  # shorthand for every GPU
        bw.update({d.device_id: bw["gpu"] for d in devices})
    mine = ceiling(result.estimate, bw)
    report: dict[str, Any] = {"tokens_per_s_ceiling": round(mine.tokens_per_s, 2),
                              "with_all_drafts_accepted": round(mine.best_tokens_per_s, 2)}
    if spec.draft_model:
        baseline = _best_baseline(spec, devices, picture)
        if baseline is not None:
            ngl, est = baseline
            base = ceiling(est, bw)
            report["baseline"] = {"change": f"no draft, -ngl {ngl}",
                                  "tokens_per_s_ceiling": round(base.tokens_per_s, 2)}
            report["draft_must_accept_per_pass"] = round(mine.break_even_accepted(base), 2)
    return report


def _best_baseline(spec: LaunchSpec, devices: list[DeviceInfo], picture: Picture
                   ) -> tuple[int, Any] | None:
    """The most GPU layers that fit without the draft (the placement a draft displaces)."""
    plain = replace(spec, draft_model=None)
    for ngl in range(200, -1, -1):
        try:
            est = estimate(replace(plain, n_gpu_layers=ngl), devices)
        except EstimateError:
            return None
        if _worst(judge(est, picture)) == "fits":
            return ngl, est
    return None


def _gib(n: int) -> float:
    return round(n / GIB, 2)


def to_json(result: Prediction, picture: Picture, notes: list[str], best_ctx: int | None,
            want_fit_ctx: bool, bandwidth: dict[str, Any] | None) -> str:
    return json.dumps({
        "schema": "vramscope.predict/1",
        "verdict": result.verdict,
        "engine": result.estimate.engine,
        "model_path": result.estimate.model_path,
        "devices": [{**dataclasses.asdict(d), "slack_bytes": d.slack_bytes}
                    for d in result.devices],
        "grown": None if result.grown_verdict is None else {
            "verdict": result.grown_verdict,
            "devices": [{**dataclasses.asdict(d), "slack_bytes": d.slack_bytes}
                        for d in result.grown],
            "bounds": [dataclasses.asdict(f) for f in result.growth_bounds],
            "grows": [{"name": c.name, "device": c.device, "bytes": c.bytes,
                       "formula": c.formula}
                      for c in result.estimate.components if c.when == "grows"]},
        "llama_fit": None if result.fit is None else dataclasses.asdict(result.fit),
        "would_unload": list(result.evicted),
        "fixes": [dataclasses.asdict(f) for f in result.fixes],
        "fit_ctx": best_ctx if want_fit_ctx else None,
        "bandwidth": bandwidth,
        "estimate_by_device": result.estimate.by_device(),
        "notes": notes + list(result.notes) + list(result.estimate.notes),
    }, indent=2)


def render_text(doc_json: str) -> str:
    doc = json.loads(doc_json)
    lines = [f"{doc['engine']}: {doc['model_path'] or '-'}"]
    for d in doc["devices"]:
        short = -d["slack_bytes"]
        tail = (f"short by {_gib(short)} GiB" if d["verdict"] == "oom" else
                f"{_gib(d['slack_bytes'])} GiB to spare after the margin")
        freed = f" (+{_gib(d['freed_bytes'])} GiB freed by unloading)" if d["freed_bytes"] else ""
        lines.append(
            f"{d['device_id']}: needs {_gib(d['need_bytes'])} GiB, can get "
            f"{_gib(d['room_bytes'])} GiB{freed} (binding: {d['binding'] or '-'}), margin "
            f"{_gib(d['margin_bytes'])} GiB -> {d['verdict'].upper()}, {tail}")
    grown = doc.get("grown")
    if grown:
        what = ", ".join(f"{g['name']} {_gib(g['bytes'])} GiB" for g in grown["grows"])
        lines.append(f"once the caches fill ({what}):")
        for d in grown["devices"]:
            tail = (f"short by {_gib(-d['slack_bytes'])} GiB" if d["verdict"] == "oom" else
                    f"{_gib(d['slack_bytes'])} GiB to spare after the margin")
            lines.append(f"  {d['device_id']}: needs {_gib(d['need_bytes'])} GiB, can get "
                         f"{_gib(d['room_bytes'])} GiB -> {d['verdict'].upper()}, {tail}")
        if grown["bounds"]:
            lines.append("  bound the growth: " + "; or ".join(
                f["change"] for f in grown["bounds"]))
    if doc["would_unload"]:
        lines.append(f"llama-swap would unload first: {', '.join(doc['would_unload'])}")
    if doc["fixes"]:
        lines.append("what would make it fit:")
        for f in doc["fixes"]:
            frees = ", ".join(f"{_gib(v)} GiB on {k}" for k, v in f["frees"].items())
            lines.append(f"  {f['change']}: frees {frees} -> {f['verdict']}")
    if doc["fit_ctx"] is not None:
        lines.append(f"largest context that fits: -c {doc['fit_ctx']}")
    if doc["bandwidth"]:
        b = doc["bandwidth"]
        lines.append(f"bandwidth ceiling: {b['tokens_per_s_ceiling']} tokens/s per pass"
                     + (f", {b['with_all_drafts_accepted']} if every draft is accepted"
                        if b["with_all_drafts_accepted"] != b["tokens_per_s_ceiling"] else ""))
        if "baseline" in b:
            lines.append(f"  baseline ({b['baseline']['change']}): "
                         f"{b['baseline']['tokens_per_s_ceiling']} tokens/s; the draft must "
                         f"get {b['draft_must_accept_per_pass']} tokens accepted per pass "
                         "just to break even")
    for note in doc["notes"]:
        lines.append(f"note: {note}")
    verdict = doc["verdict"].upper()
    if grown and grown["verdict"] == "oom" and doc["verdict"] != "oom":
        verdict += ", OOM once the caches fill"
    lines.append(f"verdict: {verdict}")
    return "\n".join(lines)
