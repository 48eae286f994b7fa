"""What monitor/servers/router.py finds: a llama-server router and the children it
spawned. Apart from router.py so that a box with no router (the usual case) does not build
these classes at import (issue 32 item 4); ``monitor.servers.router`` still names both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RouterChild:
    """A llama-server a router spawned for one model."""

    router_pid: int | None  # the router process (its parent); None when not visible
    router_port: int | None  # LLAMA_SERVER_ROUTER_PORT, else the router's --port / 8080
    model_id: str | None  # the child's --alias: the id the router serves it under


@dataclass(frozen=True, slots=True)
class Router:
    """A llama-server in router mode and the children it runs now."""

    pid: int
    port: int  # --port / LLAMA_ARG_PORT, else llama.cpp's default 8080
    models_dir: str | None
    models_preset: str | None
    models_max: int  # --models-max, else 4 (common.h); 0 = unlimited
    children: tuple[int, ...]  # the child pids, sorted
