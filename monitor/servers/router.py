"""llama-server router mode: which llama-server is a router, and which are its children.

What the router does, from llama.cpp's ``tools/server`` (commit 0c1e57098, the build this
project makes under ``.cache/llama.cpp``):

- ``server.cpp`` (``is_router_server``, line 139): a llama-server with no model path, no
  ``-hf`` repo and no docker repo runs as a router; it loads no model and never touches the
  GPU, so its own memory is small and it is not estimated as a model server. The parser
  (``llamacpp._is_router``) gives its spec role "router" when ``--models-dir`` /
  ``--models-preset`` (``LLAMA_ARG_MODELS_DIR`` / ``LLAMA_ARG_MODELS_PRESET``) say so.
- ``server-models.cpp`` ``server_models::load`` (lines 1143-1178): each loaded model is a
  child process spawned from the router's own executable with the argv
  ``server_model_meta::update_args`` renders (lines 510-523): the router's argv minus the
  reserved options (``unset_reserved_args``, lines 469-484: ``--models-dir``,
  ``--models-max``, ``--models-preset``, ``--models-autoload``, the SSL/API keys; the
  model options come from the model's preset) plus ``--host 127.0.0.1 --port N
  --alias ID --model PATH``. Its environment is the router's plus
  ``LLAMA_SERVER_ROUTER_PORT=<router port>`` (line 1160), which is also how a child knows
  it is one (``server_child::is_child``, line 1677).
- ``--models-max`` (``common/common.h`` ``models_max = 4``; 0 = unlimited): when that
  many children run, loading another first unloads the least recently used one
  (``server_models::unload_lru``, line 1073).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from monitor.servers.spec import LaunchSpec

if TYPE_CHECKING:
    from collectors.base import ProcessInfo, Snapshot
    from monitor.servers.router_types import Router as Router
    from monitor.servers.router_types import RouterChild as RouterChild

ROUTER_PORT_ENV = "LLAMA_SERVER_ROUTER_PORT"  # server-models.cpp line 1160
DEFAULT_MODELS_MAX = 4  # common/common.h: int models_max = 4
DEFAULT_PORT = 8080  # common/common.h: int32_t port = 8080
CHILD_HOST = "127.0.0.1"  # server-models.cpp CHILD_ADDR (line 59)


def __getattr__(name: str) -> Any:
    """Router and RouterChild live in monitor/servers/router_types.py: built only when a
    router or one of its children is found (issue 32 item 4: a box without one, the usual
    case, pays for neither class at import)."""
    if name in ("Router", "RouterChild"):
        from monitor.servers import router_types

        return getattr(router_types, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_router(spec: LaunchSpec | None) -> bool:
    return spec is not None and spec.engine == "llama.cpp" and spec.role == "router"


def _port_env(env: Mapping[str, str]) -> int | None:
    raw = env.get(ROUTER_PORT_ENV, "").strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 5:
        return None
    port = int(raw)
    return port if 0 < port < 65536 else None


def link_routers(
    specs: Mapping[int, LaunchSpec | None],
    ppids: Mapping[int, int | None],
    env_for: Callable[[int], Mapping[str, str]] | None = None,
) -> tuple[dict[int, Router], dict[int, RouterChild]]:
    """The routers among ``specs`` (pid -> parsed launch) and each child's link to its router.

    A child is a llama.cpp server whose parent (``ppids``) is a router, or whose
    environment (``env_for(pid)``, the allow-listed keys) carries ``LLAMA_SERVER_ROUTER_PORT``
    (its router then may be out of sight: ``router_pid`` None). ``env_for`` is asked only
    for llama.cpp servers, and a failing one counts as no environment.
    """
    routers = {pid: s for pid, s in specs.items() if s is not None and is_router(s)}
    children: dict[int, RouterChild] = {}
    for pid, spec in specs.items():
        if spec is None or spec.engine != "llama.cpp" or spec.role != "server":
            continue
        parent = ppids.get(pid)
        router = routers.get(parent) if parent is not None else None
        env_port = _port_env(_env(env_for, pid))
        if router is None and env_port is None:
            continue
        port = env_port or (router.port or DEFAULT_PORT if router is not None else None)
        from monitor.servers.router_types import RouterChild  # only once one is found

        children[pid] = RouterChild(parent if router is not None else None, port, spec.model_name)
    if not routers:
        return {}, children
    from monitor.servers.router_types import Router

    out = {
        pid: Router(
            pid=pid,
            port=spec.port or DEFAULT_PORT,
            models_dir=spec.models_dir,
            models_preset=spec.models_preset,
            models_max=spec.models_max if spec.models_max is not None else DEFAULT_MODELS_MAX,
            children=tuple(sorted(c for c, link in children.items() if link.router_pid == pid)),
        )
        for pid, spec in routers.items()
    }
    return out, children


def process_links(
    processes: Iterable[ProcessInfo],
    env_for: Callable[[int], Mapping[str, str]] | None = None,
) -> tuple[dict[int, Router], dict[int, RouterChild]]:
    """:func:`link_routers` over a process table: each inference process's command line
    parsed (relative paths against its cwd; ``env_for`` gives its allow-listed
    environment, asked for inference processes only); an odd command line is no router
    and no child, never an error."""
    from monitor.servers.recognise import parse_command  # recognise imports this module

    table = list(processes)
    engines = {p.pid for p in table if p.engine and p.argv}

    def env_of(pid: int) -> Mapping[str, str]:
        return _env(env_for, pid) if pid in engines else {}

    specs: dict[int, LaunchSpec | None] = {}
    for p in table:
        try:
            specs[p.pid] = (
                parse_command(list(p.argv), env_of(p.pid) or None, cwd=p.cwd)
                if p.pid in engines
                else None
            )
        except Exception:  # noqa: BLE001 - hostile command lines: never a failed view
            specs[p.pid] = None
    return link_routers(specs, {p.pid: p.ppid for p in table}, env_of)


def _env(env_for: Callable[[int], Mapping[str, str]] | None, pid: int) -> Mapping[str, str]:
    if env_for is None:
        return {}
    try:
        return env_for(pid) or {}
    except Exception:  # noqa: BLE001 - a vanished or unreadable process has no env
        return {}


def snapshot_links(
    snap: Snapshot, env_for: Callable[[int], Mapping[str, str]] | None = None
) -> tuple[dict[int, Router], dict[int, RouterChild]]:
    """:func:`process_links` over a snapshot: with ``env_for`` (a live process's
    environment), else with the router facts its status document recorded
    (``Snapshot.router_env``: a remote daemon's answer, a ``--state`` file), so a router
    known by ``LLAMA_ARG_MODELS_DIR`` or a child known by ``LLAMA_SERVER_ROUTER_PORT``
    groups there as it does on its own box."""
    if env_for is None and snap.router_env:
        recorded = {pid: dict(pairs) for pid, pairs in snap.router_env}

        def env_for(pid: int) -> Mapping[str, str]:
            return recorded.get(pid, {})

    return process_links(snap.processes, env_for)


def recorded_env(row: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    """A status document process row's ``router`` / ``router_child`` back into the
    environment keys that give the same links (ints and short strings only; anything
    else is left out)."""
    out: list[tuple[str, str]] = []
    router, child = row.get("router"), row.get("router_child")
    if isinstance(router, dict):
        for key, env in _ROUTER_KEYS:
            value = router.get(key)
            if type(value) is int or (isinstance(value, str) and 0 < len(value) <= 4096):
                out.append((env, str(value)))
    if isinstance(child, dict) and type(child.get("router_port")) is int:
        out.append((ROUTER_PORT_ENV, str(child["router_port"])))
    return tuple(out)


_ROUTER_KEYS = (
    ("port", "LLAMA_ARG_PORT"),
    ("models_dir", "LLAMA_ARG_MODELS_DIR"),
    ("models_preset", "LLAMA_ARG_MODELS_PRESET"),
    ("models_max", "LLAMA_ARG_MODELS_MAX"),
)
