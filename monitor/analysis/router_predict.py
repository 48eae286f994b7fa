"""``predict MODEL_ID`` against a llama-server router: its child launch and its LRU unload.

Which router: ``--router URL`` (its ``GET /models``, loopback only), ``--router-config
FILE.ini`` (its preset file), else the router on this box (the snapshot's processes,
monitor/servers/router.py) whose model list has the id. A router's model list is its
``GET /models`` answer on loopback (``status.args`` is the child argv it renders: the
truth), else its files (``--models-dir``, ``--models-preset``, its own command line,
monitor/servers/router_preset.py).

The eviction is ``server_models::load`` + ``unload_lru`` (server-models.cpp lines
1069-1140, llama.cpp 0c1e57098): with ``--models-max N`` (> 0) and N models running
(``loaded``/``loading``/``sleeping``, ``is_running``), the router unloads ONE model first:
the loaded or sleeping one with the smallest ``last_used`` (``pick_victim``, lines
269-289; set at load and at each proxied request). ``GET /models`` does not expose
``last_used`` in this build, so the oldest child process stands for it (a note says so).
If it is still full after that (every running model is still loading), the router
refuses the load ("model limit reached").

The child's environment is the router's (``server_models::load``, server-models.cpp lines
1159-1160: ``child_env = base_env`` + ``LLAMA_SERVER_ROUTER_PORT``; ``base_env`` is
``get_environment()``, lines 486-508 and 564): a router started with
``LLAMA_ARG_CTX_SIZE=8192`` gives each child that context unless the child's argv (its
preset, or the router's own argv: ``load_from_args`` reads argv only, common/preset.cpp
line 465) sets ``-c``, since llama.cpp reads the environment first and the command line
overrides it (common/arg.cpp lines 784-800). :attr:`RouterView.env` carries the router's
allow-listed environment (monitor/servers/environ.py) for the child's parse.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.analysis.picture import Picture, ProcessUse
from monitor.errors import ServiceError
from monitor.estimate.kv import EstimateError
from monitor.servers.router import DEFAULT_MODELS_MAX, snapshot_links
from monitor.servers.router_models import AnsweredModel, RouterModelsError, list_models_dir
from monitor.servers.router_preset import child_launches, read_preset_file
from monitor.units import GIB

if TYPE_CHECKING:
    from collectors.base import ProcessInfo, Snapshot
    from monitor.analysis.predict_verdicts import Fix, Prediction
    from monitor.servers.router_types import Router, RouterChild

RUNNING = ("loaded", "loading", "sleeping")  # server_model_meta::is_running
EVICTABLE = ("loaded", "sleeping")  # is_ready_or_sleep
Fetch = Callable[[str], tuple[AnsweredModel, ...]]
EnvFor = Callable[[int], Mapping[str, str]]
Answer = tuple[AnsweredModel, ...] | BaseException
# discovery asks every router on the box at once: one overall deadline (each ask's own
# socket timeout is router_client's 2 s), and at most this many routers asked
DISCOVERY_DEADLINE_S = 2.5
MAX_ROUTERS = 32


@dataclass(frozen=True, slots=True)
class RouterView:
    """One router's models: each id's child argv and state, and its running children."""

    label: str  # "router pid 42 :8080", "router http://127.0.0.1:8080", "preset x.ini"
    models_max: int  # 0 = unlimited
    launches: Mapping[str, tuple[str, ...]]
    states: Mapping[str, str]  # id -> "loaded", "unloaded", ... (files: the children seen)
    children: Mapping[str, int]  # id -> the child's pid, where seen on this box
    source: str  # "GET /models" or "its files"
    # the router's allow-listed environment (environ.read_llama_env): its children inherit
    # it; {} for a recorded state or a router not seen on this box
    env: Mapping[str, str] = field(default_factory=dict)


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


def _from_files(
    router: Router, proc: ProcessInfo, env: Mapping[str, str]
) -> dict[str, tuple[str, ...]]:
    """Its models from its files: ``--models-dir``, ``--models-preset``, and llama.cpp's
    HF cache as located by its environment (none read for a recorded state)."""
    from monitor.servers.hf_cache import list_cached_models

    def full(path: str | None) -> str | None:
        if path is None or os.path.isabs(path) or not proc.cwd:
            return path
        return os.path.join(proc.cwd, path)

    models_dir, preset = full(router.models_dir), full(router.models_preset)
    listed = list_models_dir(models_dir) if models_dir else ()
    ini = read_preset_file(preset) if preset else None
    cached = list_cached_models(env) if env else ()
    return child_launches(list(proc.argv), listed, ini, cached=cached)


def _view_of(
    router: Router,
    proc: ProcessInfo,
    children: dict[str, int],
    answer: Answer | None,
    env: Mapping[str, str],
) -> tuple[RouterView, str | None]:
    """The router's view: its /models answer, else (``answer`` None: a recorded state, or
    an error: no answer) its files. A malformed answer raises RouterModelsError."""
    label = f"router pid {router.pid} :{router.port}"
    most = router.models_max
    if isinstance(answer, RouterModelsError):
        raise answer
    if answer is None or isinstance(answer, BaseException):
        why = str(answer) if answer is not None else "a recorded state: it may be gone now"
        launches = _from_files(router, proc, env)
        states = {m: "loaded" for m in children}
        why = f"{label}: GET /models not asked ({why[:120]}); read from its files"
        return RouterView(label, most, launches, states, children, "its files", env), why
    launches = {m.model_id: m.args for m in answer}
    states = {m.model_id: m.status for m in answer}
    return RouterView(label, most, launches, states, children, "GET /models", env), None


def ask_routers(ports: Sequence[int], fetch: Fetch, deadline_s: float) -> dict[int, Answer]:
    """Each router's ``GET /models``, asked at once (one daemon thread each, at most
    :data:`MAX_ROUTERS`), within one overall deadline: a router that has not answered by
    then is left out (the caller reads its files), its thread left to end on its own
    socket timeout. port -> its models, or the exception its ask raised."""
    out: dict[int, Answer] = {}
    done: queue.Queue[tuple[int, Answer]] = queue.Queue()

    def ask(port: int) -> None:
        try:
            done.put((port, fetch(f"http://127.0.0.1:{port}")))
        except Exception as exc:  # noqa: BLE001 - any failure: this router did not answer
            done.put((port, exc))

    wanted = list(dict.fromkeys(ports))[:MAX_ROUTERS]
    for port in wanted:
        threading.Thread(target=ask, args=(port,), name=f"router-{port}", daemon=True).start()
    end = time.monotonic() + deadline_s
    while len(out) < len(wanted):
        try:
            port, result = done.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            break
        out[port] = result
    return out


def _env_of(env_for: EnvFor | None, pid: int | None) -> dict[str, str]:
    """The router's allow-listed environment; {} when unknown or unreadable."""
    if env_for is None or pid is None:
        return {}
    try:
        return dict(env_for(pid) or {})
    except Exception:  # noqa: BLE001 - a vanished or unreadable process has no env
        return {}


def discover(
    snap: Snapshot,
    model_id: str,
    fetch: Fetch | None = _fetch,
    env_for: EnvFor | None = None,
    deadline_s: float = DISCOVERY_DEADLINE_S,
    only_pid: int | None = None,
) -> tuple[RouterView, list[str]]:
    """The router on this box that serves ``model_id``; EstimateError when none or several.
    Every router is asked at once, all within ``deadline_s`` (:func:`ask_routers`); one that
    does not answer in time is read from its files.
    ``fetch`` None (a recorded state): the routers' files only, never a live answer.
    ``env_for``: a live process's allow-listed environment (None: a recorded state).
    ``only_pid``: that router only (the one a llama-swap model runs, swap_router.py)."""
    routers, links = snapshot_links(snap, env_for)
    if only_pid is not None:
        routers = {pid: r for pid, r in routers.items() if pid == only_pid}
    procs = {p.pid: p for p in snap.processes}
    found: list[RouterView] = []
    notes: list[str] = []
    ports = [routers[pid].port for pid in sorted(routers)]
    answers = ask_routers(ports, fetch, deadline_s) if fetch is not None else {}
    asked = set(list(dict.fromkeys(ports))[:MAX_ROUTERS])
    late = OSError(f"no answer within {deadline_s:g} s")
    many = OSError(f"more than {MAX_ROUTERS} routers on this box: not asked")
    for pid in sorted(routers):
        router = routers[pid]
        children = _child_ids(router, links)
        unanswered = late if router.port in asked else many
        answer = answers.get(router.port, unanswered) if fetch is not None else None
        try:
            view, why = _view_of(router, procs[pid], children, answer, _env_of(env_for, pid))
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
    snap: Snapshot,
    url: str | None,
    config: Path | None,
    fetch: Fetch = _fetch,
    env_for: EnvFor | None = None,
) -> RouterView:
    """``--router URL`` or ``--router-config FILE.ini``; the router process on this box
    with that port / preset file gives ``--models-max``, the children and the environment
    they inherit."""
    routers, links = snapshot_links(snap, env_for)
    procs = {p.pid: p for p in snap.processes}
    if url is not None:
        from monitor.integrations.loopback import loopback_url

        port = loopback_url(url, "router URL").port  # UsageError (one line) off loopback
        try:
            answered = fetch(url)
        except OSError as exc:  # the URL the user named: which one, and why
            why = getattr(exc, "reason", None) or exc
            raise ServiceError(f"--router {url}: cannot read its GET /models: {why}") from None
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
            _env_of(env_for, match.pid if match is not None else None),
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
    env = _env_of(env_for, match.pid if match is not None else None)
    return RouterView(f"preset {config}", most, launches, states, children, "its files", env)


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
    env_for: EnvFor | None = None,
    only_pid: int | None = None,
) -> tuple[list[str], list[ProcessUse], list[str], RouterView]:
    """(the child's command, the child unloaded first, notes, the router) for a model id.
    ``live`` False (``--state``/``--at``): the routers found in the recorded state are read
    from their files, not asked (``--router URL`` is asked: it was named), and no process
    environment is read. ``env_for``: a process's allow-listed environment."""
    notes: list[str] = []
    env_for = env_for if live else None
    if url is not None or config is not None:
        view = explicit(snap, url, config, fetch, env_for)
    else:
        fetched = fetch if live else None
        view, notes = discover(snap, model_id, fetched, env_for, only_pid=only_pid)
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
    from monitor.analysis.predict_verdicts import judge

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
