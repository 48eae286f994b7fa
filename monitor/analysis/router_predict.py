"""``predict MODEL_ID`` against a llama-server router: its child launch and its LRU unload.

Which router: ``--router URL`` (its ``GET /models``, loopback only), ``--router-config
FILE.ini`` (its preset file), else the router on this box (the snapshot's processes,
monitor/engines/router.py) whose model list has the id. A router's model list is its
``GET /models`` answer on loopback (``status.args`` is the child argv it renders: the
truth), else its files (``--models-dir``, ``--models-preset``, its own command line,
monitor/engines/router_preset.py).

The eviction is ``server_models::load`` + ``unload_lru`` (server-models.cpp lines
1069-1140, llama.cpp 0c1e57098): with ``--models-max N`` (> 0) and N models running
(``loaded``/``loading``/``sleeping``, ``is_running``), the router unloads ONE model first:
the loaded or sleeping one with the smallest ``last_used`` (``pick_victim``, lines
269-289; set at load and at each proxied request). ``GET /models`` does not expose
``last_used`` in this build, so the oldest child process stands for it (a note says so).
If it is still full after that (every running model is still loading), the router
refuses the load ("model limit reached").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.analysis.picture import Picture, ProcessUse
from monitor.engines.router import DEFAULT_MODELS_MAX, Router, RouterChild, process_links
from monitor.engines.router_models import AnsweredModel, RouterModelsError, list_models_dir
from monitor.engines.router_preset import child_launches, read_preset_file
from monitor.estimate.kv import EstimateError
from monitor.units import GIB

if TYPE_CHECKING:
    from collectors.base import ProcessInfo, Snapshot
    from monitor.analysis.predict import Fix, Prediction

RUNNING = ("loaded", "loading", "sleeping")  # server_model_meta::is_running
EVICTABLE = ("loaded", "sleeping")  # is_ready_or_sleep
Fetch = Callable[[str], tuple[AnsweredModel, ...]]


@dataclass(frozen=True, slots=True)
class RouterView:
    """One router's models: each id's child argv and state, and its running children."""

    label: str  # "router pid 42 :8080", "router http://127.0.0.1:8080", "preset x.ini"
    models_max: int  # 0 = unlimited
    launches: Mapping[str, tuple[str, ...]]
    states: Mapping[str, str]  # id -> "loaded", "unloaded", ... (files: the children seen)
    children: Mapping[str, int]  # id -> the child's pid, where seen on this box
    source: str  # "GET /models" or "its files"


def _fetch(url: str) -> tuple[AnsweredModel, ...]:
    from monitor.integrations.router_client import fetch_models

    return fetch_models(url)


def _child_ids(router: Router | None, links: Mapping[int, RouterChild]) -> dict[str, int]:
    """id -> pid of the router's children seen on this box."""
    if router is None:
        return {}
    return {
        link.model_id: pid
        for pid, link in links.items()
        if link.router_pid == router.pid and link.model_id
    }


def _from_files(router: Router, proc: ProcessInfo) -> dict[str, tuple[str, ...]]:
    def full(path: str | None) -> str | None:
        if path is None or os.path.isabs(path) or not proc.cwd:
            return path
        return os.path.join(proc.cwd, path)

    models_dir, preset = full(router.models_dir), full(router.models_preset)
    listed = list_models_dir(models_dir) if models_dir else ()
    ini = read_preset_file(preset) if preset else None
    return child_launches(list(proc.argv), listed, ini)


def _view_of(
    router: Router, proc: ProcessInfo, children: dict[str, int], fetch: Fetch | None
) -> tuple[RouterView, str | None]:
    """The router's view: its /models answer, else (or with no ``fetch``) its files."""
    label = f"router pid {router.pid} :{router.port}"
    try:
        if fetch is None:
            raise OSError("a recorded state: the router now may not be the one it records")
        answered = fetch(f"http://127.0.0.1:{router.port}")
    except (OSError, ValueError) as exc:
        launches = _from_files(router, proc)
        states = {m: "loaded" for m in children}
        why = f"{label}: GET /models not asked ({str(exc)[:120]}); read from its files"
        return RouterView(label, router.models_max, launches, states, children, "its files"), why
    launches = {m.model_id: m.args for m in answered}
    states = {m.model_id: m.status for m in answered}
    return RouterView(label, router.models_max, launches, states, children, "GET /models"), None


def discover(
    snap: Snapshot, model_id: str, fetch: Fetch | None = _fetch
) -> tuple[RouterView, list[str]]:
    """The router on this box that serves ``model_id``; EstimateError when none or several.
    ``fetch`` None (a recorded state): the routers' files only, never a live answer."""
    routers, links = process_links(snap.processes)
    procs = {p.pid: p for p in snap.processes}
    found: list[RouterView] = []
    notes: list[str] = []
    for pid in sorted(routers):
        router = routers[pid]
        children = _child_ids(router, links)
        try:
            view, why = _view_of(router, procs[pid], children, fetch)
        except RouterModelsError as exc:
            notes.append(f"router pid {pid}: {exc}")
            continue
        if why:
            notes.append(why)
        if model_id in view.launches:
            found.append(view)
    if not found:
        where = f" ({'; '.join(notes)})" if notes else ""
        raise EstimateError(
            f"no llama-server router on this box serves model {model_id!r}{where}; give "
            "--router URL or --router-config FILE.ini (or --swap-config for llama-swap)"
        )
    if len(found) > 1:
        labels = ", ".join(v.label for v in found)
        raise EstimateError(
            f"model {model_id!r} is served by several routers ({labels}): "
            "name one with --router http://127.0.0.1:PORT"
        )
    return found[0], notes


def explicit(
    snap: Snapshot, url: str | None, config: Path | None, fetch: Fetch = _fetch
) -> RouterView:
    """``--router URL`` or ``--router-config FILE.ini``; the router process on this box
    with that port / preset file gives ``--models-max`` and the children."""
    routers, links = process_links(snap.processes)
    procs = {p.pid: p for p in snap.processes}
    if url is not None:
        from monitor.integrations.loopback import loopback_url

        port = loopback_url(url, "router URL").port  # ValueError (one line) off loopback
        answered = fetch(url)
        match = next((r for r in routers.values() if r.port == port), None)
        children = _child_ids(match, links)
        most = match.models_max if match is not None else DEFAULT_MODELS_MAX
        return RouterView(
            f"router {url}",
            most,
            {m.model_id: m.args for m in answered},
            {m.model_id: m.status for m in answered},
            children,
            "GET /models",
        )
    if config is None:
        raise EstimateError("a router needs --router URL or --router-config FILE.ini")
    match = next(
        (r for r in routers.values() if r.models_preset and Path(r.models_preset) == config), None
    )
    argv = list(procs[match.pid].argv) if match is not None else ["llama-server"]
    launches = child_launches(argv, (), read_preset_file(str(config)))
    children = _child_ids(match, links)
    most = match.models_max if match is not None else DEFAULT_MODELS_MAX
    states = {m: "loaded" for m in children}
    return RouterView(f"preset {config}", most, launches, states, children, "its files")


def victim(view: RouterView, started_ms: Mapping[int, int | None]) -> str | None:
    """The model ``unload_lru`` picks: loaded/sleeping, the oldest child first."""
    ids = [m for m, s in view.states.items() if s in EVICTABLE]

    def age(model: str) -> tuple[int, str]:
        pid = view.children.get(model)
        ts = started_ms.get(pid) if pid is not None else None
        return (ts if ts is not None else 2**62, model)

    return min(ids, key=age) if ids else None


def evictions(
    view: RouterView, model_id: str, started_ms: Mapping[int, int | None]
) -> tuple[str | None, list[str]]:
    """(the model unloaded first or None, notes); EstimateError when the router refuses."""
    running = sorted(m for m, s in view.states.items() if s in RUNNING)
    head = (
        f"{view.label} (--models-max {view.models_max or 'unlimited'}; "
        f"running: {', '.join(running) or 'none'}; from {view.source})"
    )
    if view.states.get(model_id) in RUNNING:
        return None, [f"{head}: {model_id} is already {view.states[model_id]}; judged as a reload"]
    if view.models_max <= 0 or len(running) < view.models_max:
        return None, [f"{head}: room for one more model, nothing is unloaded"]
    chosen = victim(view, started_ms)
    if chosen is None or len(running) - 1 >= view.models_max:
        raise EstimateError(
            f"{head}: the router would refuse to load {model_id} now "
            "(model limit reached: nothing it may unload); raise --models-max"
        )
    return chosen, [
        f"{head}: loading {model_id} first unloads {chosen}, the least recently used "
        "(the oldest child: GET /models does not expose last use; requests since change it)"
    ]


def router_target(
    model_id: str,
    snap: Snapshot,
    picture: Picture,
    url: str | None = None,
    config: Path | None = None,
    fetch: Fetch = _fetch,
    live: bool = True,
) -> tuple[list[str], list[ProcessUse], list[str], RouterView]:
    """(the child's command, the child unloaded first, notes, the router) for a model id.
    ``live`` False (``--state``/``--at``): the routers found in the recorded state are read
    from their files, not asked (``--router URL`` is asked: it was named)."""
    notes: list[str] = []
    if url is not None or config is not None:
        view = explicit(snap, url, config, fetch)
    else:
        view, notes = discover(snap, model_id, fetch if live else None)
    if model_id not in view.launches:
        known = ", ".join(sorted(view.launches)[:12]) or "none"
        raise EstimateError(f"{view.label} has no model {model_id!r} (it has: {known})")
    started = {p.pid: p.started_at_ms for p in snap.processes}
    chosen, more = evictions(view, model_id, started)
    notes += more
    uses = {u.pid: u for pic in picture.devices.values() for u in pic.processes}
    evicted: list[ProcessUse] = []
    pid = view.children.get(model_id) if chosen is None else view.children.get(chosen)
    if (chosen is not None or view.states.get(model_id) in RUNNING) and pid in uses:
        use = uses[pid]
        name = chosen or model_id
        again = "" if chosen else ", already loaded: judged in its own place"
        evicted = [replace(use, name=f"{name} (pid {pid}{again})")]
        total = sum(u.bytes for p in picture.devices.values() for u in p.processes if u.pid == pid)
        notes.append(f"unloading {name} frees ~{total / GIB:.2f} GiB (as measured)")
    return list(view.launches[model_id]), evicted, notes, view


def as_router(
    result: Prediction, view: RouterView, snap: Snapshot, picture: Picture, model_id: str
) -> Prediction:
    """A router's model: its evictions are the router's, its children unloaded by id, and
    what raising ``--models-max`` (keeping the unloaded model) would give."""
    from monitor.analysis.predict import judge

    started = {p.pid: p.started_at_ms for p in snap.processes}
    fixes = tuple(relabel_fixes(result.fixes, view, started))
    notes = result.notes
    unloaded = [e.split(" (pid ", 1)[0] for e in result.evicted]
    if unloaded and unloaded[0] != model_id and view.models_max > 0:
        kept = judge(result.estimate, picture)  # nothing freed: the model stays loaded
        worst = max((v.verdict for v in kept), key=_ORDER.__getitem__, default="fits")
        notes += (
            f"with --models-max {view.models_max + 1} the router keeps {unloaded[0]} loaded: "
            f"{model_id} would then be {worst.upper()}",
        )
    return replace(result, evictor="the router", fixes=fixes, notes=notes)


_ORDER = {"fits": 0, "tight": 1, "thrash": 2, "oom": 3}


def relabel_fixes(
    fixes: Sequence[Fix], view: RouterView, started_ms: Mapping[int, int | None]
) -> list[Fix]:
    """``stop llama-server (pid N)`` for a router child -> ``unload ID first``."""
    by_pid = {pid: m for m, pid in view.children.items()}
    lru = victim(view, started_ms)
    out: list[Fix] = []
    for fix in fixes:
        if fix.change.startswith("stop "):
            pid = fix.change.rsplit("(pid ", 1)[-1].rstrip(")")
            if pid.isdigit() and int(pid) in by_pid:
                model = by_pid[int(pid)]
                also = f", or --models-max {_lower(view)}" if model == lru else ""
                fix = replace(
                    fix,
                    change=f'unload {model} first (POST /models/unload {{"model": "{model}"}}'
                    f"{also})",
                )
        out.append(fix)
    return out


def _lower(view: RouterView) -> int:
    """The --models-max at which the router's own LRU unload makes the room."""
    return max(1, sum(1 for s in view.states.values() if s in RUNNING))
