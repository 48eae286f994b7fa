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

from monitor.servers.environ import read_llama_env
from monitor.servers.llamacpp import parse_llamacpp
from monitor.servers.recognise import EngineMatch, parse_command, recognise
from monitor.servers.spec import LaunchSpec
from monitor.servers.vllm import parse_sglang, parse_vllm

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
