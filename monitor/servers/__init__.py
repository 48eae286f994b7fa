"""Recognise inference processes and turn their argv (+ LLAMA_ARG_* env) into a LaunchSpec.

Public API (others code against exactly this):

- :func:`parse_llamacpp` (llama.cpp argv + env), :func:`parse_vllm`, :func:`parse_sglang`,
  :func:`parse_command` (dispatch on argv; None when the command loads no model);
- :func:`recognise` (process table -> :class:`EngineMatch` per inference process, workers
  tied to the process that owns their model);
- :func:`read_llama_env` (the allow-listed environment of a process; nothing else is
  ever read from ``/proc/PID/environ``).
- :mod:`monitor.servers.capabilities` (``ENGINES``: the one table of engines and what
  each supports; modules ask it instead of listing engine names).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from collectors.base import ProcessInfo
from monitor.servers.environ import read_llama_env
from monitor.servers.llamacpp import parse_llamacpp
from monitor.servers.recognise import parse_command
from monitor.servers.spec import LaunchSpec
from monitor.servers.vllm import parse_sglang, parse_vllm

if TYPE_CHECKING:
    from monitor.servers.recognise_table import EngineMatch as EngineMatch


def recognise(
    processes: Mapping[int, ProcessInfo], env_for: Callable[[int], Mapping[str, str]] | None = None
) -> dict[int, EngineMatch]:
    """monitor/servers/recognise_table.py ``recognise``, imported on the first call (the
    one-shot commands never match a whole process table: issue 32 item 4)."""
    from monitor.servers.recognise_table import recognise as table

    return table(processes, env_for)


def __getattr__(name: str) -> Any:
    if name == "EngineMatch":
        from monitor.servers.recognise_table import EngineMatch

        return EngineMatch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EngineMatch",
    "LaunchSpec",
    "parse_command",
    "parse_llamacpp",
    "parse_sglang",
    "parse_vllm",
    "read_llama_env",
    "recognise",
]
