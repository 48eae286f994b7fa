"""llama-swap models whose ``cmd`` runs a llama-server router (issue 31, item 5).

llama-swap starts and stops a model's ``cmd`` as one process (mostlygeek/llama-swap
``proxy/process.go``): when that ``cmd`` is a router (``--models-dir``/``--models-preset``,
no ``-m``: tools/server/server.cpp ``is_router_server``), stopping the llama-swap model
stops the router and with it every child it spawned (server-models.cpp, llama.cpp
0c1e57098: the router stopping unloads them all, lines 1265-1275; a child exits on EOF of
its stdin, the router gone, lines 1767-1775). So, with ``--swap-config``:

- a llama-swap model that runs a router is *running* when a router with its
  ``--models-dir``/``--models-preset`` runs on the box (its command line has no ``-m`` to
  match by path), and what llama-swap frees by stopping it is the router and its children
  (:func:`running_router_models`);
- ``predict ID`` for an ID no llama-swap model has but that such a router serves
  (:func:`router_model_of`) is that router's child launch: if the router runs now, the
  router's own LRU unload applies (monitor/analysis/router_predict.py); if not, llama-swap
  first starts its model, unloading what its groups/matrix say, and the router then loads
  the model into an empty router.

The router's model list here comes from its files (the ``cmd``'s ``--models-dir`` and
``--models-preset``, read as router_preset.py does), never from a live answer of a
router llama-swap has not started.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from monitor.servers.router import is_router, snapshot_links
from monitor.servers.router_models import list_models_dir
from monitor.servers.router_preset import child_launches, read_preset_file
from monitor.servers.spec import LaunchSpec

if TYPE_CHECKING:
    from collectors.base import Snapshot
    from monitor.analysis.picture import Picture, ProcessUse
    from monitor.analysis.predict_request import PredictRequest
    from monitor.analysis.router_predict import RouterView
    from monitor.integrations.llamaswap.schema import SwapConfig, SwapModel


@dataclass(frozen=True, slots=True)
class SwapRouter:
    """A llama-swap model whose ``cmd`` is a llama-server router."""

    swap_id: str
    spec: LaunchSpec  # the router's, as its cmd (and the model's env) say
    cmd: tuple[str, ...]


def _env(model: SwapModel) -> dict[str, str]:
    """llama-swap's ``env: ["K=V", ...]`` as a mapping."""
    return dict(kv.split("=", 1) for kv in model.env if "=" in kv)


def swap_routers(config: SwapConfig) -> list[SwapRouter]:
    """The llama-swap models that run a router, in model-ID order."""
    from monitor.servers import parse_command

    out = []
    for swap_id in sorted(config.models):
        model = config.models[swap_id]
        try:
            spec = parse_command(list(model.cmd), _env(model) or None)
        except Exception:  # noqa: BLE001 - an odd cmd is no router, never a failed predict
            continue
        if spec is not None and is_router(spec):
            out.append(SwapRouter(swap_id, spec, tuple(model.cmd)))
    return out


def _norm(path: str | None) -> str | None:
    return os.path.normpath(path) if path else None


def _same_router(a: LaunchSpec, models_dir: str | None, preset: str | None) -> bool:
    return (_norm(a.models_dir), _norm(a.models_preset)) == (_norm(models_dir), _norm(preset))


def running_router_models(config: SwapConfig, snap: Snapshot) -> dict[str, tuple[int, ...]]:
    """swap model ID -> the pids llama-swap stops with it (the router and its children),
    for each llama-swap model whose router runs on the box now."""
    routers, _ = snapshot_links(snap)
    out: dict[str, tuple[int, ...]] = {}
    for swap in swap_routers(config):
        for pid in sorted(routers):
            router = routers[pid]
            if _same_router(swap.spec, router.models_dir, router.models_preset):
                out[swap.swap_id] = (pid, *router.children)
                break
    return out


def launches_of(swap: SwapRouter) -> dict[str, tuple[str, ...]]:
    """The router's model ids and each one's child argv, from its files (RouterModelsError
    for a folder or preset that cannot be read)."""
    spec = swap.spec
    listed = list_models_dir(spec.models_dir) if spec.models_dir else ()
    preset = read_preset_file(spec.models_preset) if spec.models_preset else None
    return child_launches(list(swap.cmd), listed, preset)


def router_model_of(
    config: SwapConfig, model_id: str
) -> tuple[SwapRouter, Mapping[str, tuple[str, ...]]] | None:
    """The llama-swap model whose router serves ``model_id`` (and its model list), None
    when none does; EstimateError when several do."""
    from monitor.estimate.kv import EstimateError
    from monitor.servers.router_models import RouterModelsError

    found = []
    for swap in swap_routers(config):
        try:
            launches = launches_of(swap)
        except RouterModelsError:
            continue
        if model_id in launches:
            found.append((swap, launches))
    if len(found) > 1:
        names = ", ".join(s.swap_id for s, _ in found)
        raise EstimateError(
            f"model {model_id!r} is served by the routers of several llama-swap models "
            f"({names}): predict with --router http://127.0.0.1:PORT of the one meant"
        )
    return found[0] if found else None


def swap_router_target(
    req: PredictRequest, snap: Snapshot, picture: Picture
) -> tuple[list[str], list[ProcessUse], list[str], RouterView | None] | None:
    """``predict ID --swap-config F`` for an ID that no llama-swap model has but the router
    of one serves: (the child's launch, what is unloaded first, notes, the router when it
    runs now: its LRU applies); None when it is not such an ID."""
    from dataclasses import replace

    from monitor.analysis.predict_target import swap_target
    from monitor.integrations import llamaswap

    if req.swap_config is None or req.model_id is None:
        return None
    config = llamaswap.load_config(req.swap_config)
    model_id = req.model_id
    if model_id in config.models or any(model_id in m.aliases for m in config.models.values()):
        return None
    from monitor.analysis.router_predict import router_target

    live = req.ask_routers and req.state is None and req.at is None
    found = router_model_of(config, model_id)
    if found is None:  # a router on the box outside llama-swap, else llama-swap's error
        return _outside(req, snap, picture, live)
    swap, launches = found
    head = f"llama-swap model {swap.swap_id} runs the llama-server router that serves {model_id}"
    running = running_router_models(config, snap)
    if swap.swap_id in running:  # llama-swap leaves it running: the router's LRU decides
        command, evicted, notes, view = router_target(
            model_id,
            snap,
            picture,
            live=live,
            env_for=req.env_for,
            only_pid=running[swap.swap_id][0],
        )
        return command, evicted, [f"{head} (running: llama-swap stops nothing)", *notes], view
    # llama-swap starts the router first (unloading what its groups say); it loads nothing
    _, evicted, notes = swap_target(replace(req, model_id=swap.swap_id), picture, snap)
    notes = [f"{head}; not running now: llama-swap starts it first", *notes]
    return list(launches[model_id]), evicted, notes, None


def _outside(
    req: PredictRequest, snap: Snapshot, picture: Picture, live: bool
) -> tuple[list[str], list[ProcessUse], list[str], RouterView | None] | None:
    """An id neither llama-swap nor its routers have: a router on the box that llama-swap
    does not run may serve it (``[llama_swap] config`` set does not hide it); None when
    none does (llama-swap's "unknown model" error then says what it has)."""
    from monitor.analysis.router_predict import router_target
    from monitor.estimate.kv import EstimateError

    if not snapshot_links(snap)[0]:
        return None
    try:
        return router_target(req.model_id or "", snap, picture, live=live, env_for=req.env_for)
    except EstimateError:
        return None
