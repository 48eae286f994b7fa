"""The model a command serves, as a short label for metrics: the model file's base name
(``-m``, no directory) or the engine's model id (a llama-swap / router id). The command line
itself is never a label (it may hold secrets)."""

from __future__ import annotations

import os

MAX_LABEL = 200


def model_label(
    argv: tuple[str, ...] | list[str],
    limit: int = MAX_LABEL,
    parent_argv: tuple[str, ...] | list[str] | None = None,
) -> str:
    """The GGUF file name or the model id of ``argv``, at most ``limit`` characters; ``""``
    when the command is no server we know or names no model. A llama-server router's
    child (``parent_argv`` is a router's) is labelled by its model id, the ``--alias`` the
    router gave it (server-models.cpp ``update_args``)."""
    from monitor.servers import parse_command
    from monitor.servers.router import is_router

    try:
        spec = parse_command(list(argv))
        parent = parse_command(list(parent_argv)) if parent_argv else None
    except Exception:  # a label is never worth failing a scrape or a tick for
        return ""
    if spec is None:
        return ""
    if is_router(parent) and spec.role == "server" and spec.model_name:
        return spec.model_name[:limit]
    if spec.model_path:
        return os.path.basename(spec.model_path.rstrip("/"))[:limit]
    return (spec.model_name or "")[:limit]
