"""Which launch a prediction judges: the command as given, or a model id's (a llama-server
router's, or llama-swap's, with what it unloads first), and the cgroup the launch inherits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from monitor.analysis.picture import Picture, ProcessUse
from monitor.analysis.predict_request import PredictRequest
from monitor.estimate.kv import EstimateError
from monitor.servers.spec import LaunchSpec

if TYPE_CHECKING:
    from collectors.base import CgroupMemory, Snapshot
    from monitor.analysis.router_predict import RouterView


def _model_of(argv: tuple[str, ...] | list[str]) -> str | None:
    from monitor.servers import parse_command

    spec = parse_command(list(argv))
    return spec.model_path if spec is not None else None


def _spec_of(
    command: list[str], on_the_launching_box: bool, inherited: Mapping[str, str] | None = None
) -> LaunchSpec:
    """The launch asked about. ``-hf``: the CLI on the launching box finds the model in its
    user's llama.cpp cache (monitor/servers/hf_cache.py); the daemon's HTTP API does not
    look in its own. ``inherited``: the environment the launch inherits (a router's child:
    the router's allow-listed environment, router_predict.py); the command line wins."""
    from monitor.servers import parse_command
    from monitor.servers.hf_cache import own_cache_env

    env = {**(own_cache_env() if on_the_launching_box else {}), **(inherited or {})}
    spec = parse_command(list(command), env or None)
    if spec is None:
        raise EstimateError(f"not an inference server command: {' '.join(command[:3])} ...")
    return spec


def running_servers(picture: Picture) -> list[ProcessUse]:
    seen: dict[int, ProcessUse] = {}
    for pic in picture.devices.values():
        for use in pic.processes:
            if use.engine is not None and use.pid not in seen:
                seen[use.pid] = use
    return list(seen.values())


def swap_target(
    req: PredictRequest, picture: Picture, snap: Snapshot | None = None
) -> tuple[list[str], list[ProcessUse], list[str]]:
    """(command, processes llama-swap would stop first, notes) for ``predict MODEL_ID``.
    With ``snap``: a llama-swap model that runs a router runs when its router does, and
    stopping it stops the router's children too (monitor/analysis/swap_router.py)."""
    from monitor.integrations import llamaswap

    if req.swap_config is None:
        raise EstimateError(
            "predicting a llama-swap model needs --swap-config FILE (or "
            "[llama_swap] config in the config file)"
        )
    config = llamaswap.load_config(req.swap_config)
    target = llamaswap.resolve(config, req.model_id or "")
    servers = running_servers(picture)
    by_path = {p: u for u in servers if (p := _model_of(u.argv)) is not None}  # no -m: none
    running: dict[str, ProcessUse] = {}
    notes = []
    if req.swap_url:
        states = llamaswap.fetch_running(req.swap_url)
        ids = [m for m, state in states.items() if state not in ("stopped", "shutdown")]
    else:
        ids = [m.model_id for m in config.models.values() if _model_of(m.cmd) in by_path]
        notes.append(
            "running models matched by their -m path (give --swap-url for "
            "llama-swap's own /running)"
        )
    for model_id in ids:
        model = config.models.get(model_id)
        path = _model_of(model.cmd) if model else None
        if path is not None and path in by_path:
            running[model_id] = by_path[path]
    routed = _routed(config, snap, picture)
    if not req.swap_url:
        ids += [m for m in routed if m not in ids]
    evict_ids = llamaswap.evictions(config, list(ids), target.model_id)
    evicted = [running[m] for m in evict_ids if m in running]
    evicted += [u for m in evict_ids if m not in running for u in routed.get(m, ())]
    if evict_ids:
        notes.append(f"llama-swap unloads first: {', '.join(evict_ids)}")
    return list(target.cmd), evicted, notes


def _routed(config: Any, snap: Snapshot | None, picture: Picture) -> dict[str, list[ProcessUse]]:
    """llama-swap model ID -> the router and children it stops with that model."""
    if snap is None:
        return {}
    from monitor.analysis.swap_router import running_router_models

    uses = {u.pid: u for u in running_servers(picture)}
    return {
        m: [uses[p] for p in pids if p in uses]
        for m, pids in running_router_models(config, snap).items()
    }


def _target(
    req: PredictRequest, snap: Snapshot, picture: Picture
) -> tuple[list[str], list[ProcessUse], list[str], RouterView | None]:
    """(the launch, what is unloaded first, notes, the router or None): the command as
    given, or a model id's (a llama-server router's, else llama-swap's)."""
    if req.model_id is None:
        return req.command, [], [], None
    if _for_router(req):
        from monitor.analysis.router_predict import router_target

        return router_target(
            req.model_id,
            snap,
            picture,
            req.router_url,
            req.router_config,
            live=req.ask_routers and req.state is None and req.at is None,
            env_for=req.env_for,
        )
    from monitor.analysis.swap_router import swap_router_target

    routed = swap_router_target(req, snap, picture)
    if routed is not None:  # an id the router of a llama-swap model serves
        return routed
    command, evicted, notes = swap_target(req, picture, snap)
    return command, evicted, notes, None


def _refuse(spec: LaunchSpec, req: PredictRequest, router: bool) -> None:
    """EstimateError (one line) for a launch with no verdict to give."""
    if spec.role == "router":  # loads no model itself: its models are predicted by id
        where = f"llama-swap model {req.model_id} runs" if req.model_id else "the command is"
        raise EstimateError(
            f"{where} a llama-server router (--models-dir/--models-preset, no -m), which loads "
            "no model itself: predict one of its models by id (vramscope predict MODEL_ID, "
            "--router http://127.0.0.1:PORT or --router-config FILE.ini)"
        )
    if spec.refused:  # the engine would not start: no verdict to give
        what = "router" if router else "llama-swap"
        where = f"{what} model {req.model_id}: " if req.model_id is not None else ""
        raise EstimateError(where + spec.refused[0])


def _for_router(req: PredictRequest) -> bool:
    """A model id goes to a router when one is named, or no llama-swap config is."""
    return req.router_url is not None or req.router_config is not None or req.swap_config is None


def swap_cgroup(req: PredictRequest, snap: Snapshot) -> tuple[CgroupMemory | None, str | None]:
    """For ``predict MODEL_ID``: llama-swap's memory cgroup, as the snapshot recorded it
    (the models it starts inherit it); (None, None) otherwise."""
    if req.model_id is None:
        return None, None
    limits = {c.pid: c.cgroup for c in snap.cgroups}
    if _for_router(req):
        from monitor.servers.router import snapshot_links

        routers = [pid for pid in snapshot_links(snap, req.env_for)[0] if pid in limits]
        if len(routers) == 1:
            found = limits[routers[0]]
            return found, (
                f"the llama-server router (pid {routers[0]}) runs in the memory cgroup "
                f"{found.path}; the children it starts inherit it"
            )
        return None, None
    for proc in snap.processes:
        if proc.engine == "llama-swap" and proc.pid in limits:
            found = limits[proc.pid]
            return found, (
                f"llama-swap (pid {proc.pid}) runs in the memory cgroup "
                f"{found.path}; the models it starts inherit it"
            )
    return None, None
