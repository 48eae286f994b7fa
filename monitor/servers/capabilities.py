"""The engines vramscope knows and what it can do with each: one table, asked by every module.

``name`` is the engine as collectors/tracking.py names a process (``ProcessInfo.engine``)
and as :class:`~monitor.servers.spec.LaunchSpec` carries it. A module that needs "the
engines with an estimator" or "the engines that answer /slots" reads it here instead of
writing the names out again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ENGINES",
    "ESTIMATED",
    "LLAMACPP_ESTIMATED",
    "MODEL_PATH_IS_FILE",
    "SLOTS",
    "Engine",
]


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    role: Literal["server", "proxy"]  # its main process: serves a model, or starts servers
    # how a launch is priced (monitor/estimate): llama.cpp's formulas from the GGUF file,
    # vLLM's pre-allocation (gpu_memory_utilization), or not at all
    estimator: Literal["llama.cpp", "vllm"] | None
    slots: bool  # answers llama-server's GET /slots and /metrics (monitor/integrations/slots.py)
    model_path_is_file: bool  # -m / --model is a file, relative to the process's cwd
    # (vLLM and SGLang take a hub id as often as a folder)


ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine("llama.cpp", "server", "llama.cpp", slots=True, model_path_is_file=True),
        # ollama's runner is a llama.cpp server on a GGUF blob (research/estimation.md section 3)
        Engine("ollama", "server", "llama.cpp", slots=True, model_path_is_file=True),
        Engine("vllm", "server", "vllm", slots=False, model_path_is_file=False),
        Engine("sglang", "server", "vllm", slots=False, model_path_is_file=False),
        Engine("llama-swap", "proxy", None, slots=False, model_path_is_file=False),
        Engine("koboldcpp", "server", None, slots=False, model_path_is_file=False),
        Engine("tgi", "server", None, slots=False, model_path_is_file=False),
        Engine("torch", "server", None, slots=False, model_path_is_file=False),
    )
}

ESTIMATED = frozenset(e.name for e in ENGINES.values() if e.estimator is not None)
"""Servers whose launch vramscope prices: watched when they load, listed as models."""
LLAMACPP_ESTIMATED = frozenset(e.name for e in ENGINES.values() if e.estimator == "llama.cpp")
"""Priced by llama.cpp's formulas from a GGUF file (and so diagnosed component by component)."""
SLOTS = frozenset(e.name for e in ENGINES.values() if e.slots)
"""Answer GET /slots on their port: polled for the tokens in use."""
MODEL_PATH_IS_FILE = frozenset(e.name for e in ENGINES.values() if e.model_path_is_file)
"""Their model flags are file paths, joined to the process's cwd when relative."""
