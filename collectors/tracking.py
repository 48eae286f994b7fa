"""Which processes are inference servers, from their command line alone.

This only *recognises* an engine (so the process is tracked); turning argv into a launch
spec is monitor/servers' job. Matching is on the executable's base name and, for Python,
on the module or script it runs.
"""

from __future__ import annotations

import os

# Executable base name -> engine.
_EXECUTABLES: dict[str, str] = {
    "llama-server": "llama.cpp",
    "llama-cli": "llama.cpp",
    "llama-embedding": "llama.cpp",
    "llama-mtmd-cli": "llama.cpp",
    "llama-swap": "llama-swap",
    "ollama": "ollama",
    "ollama_llama_server": "ollama",
    "vllm": "vllm",
    "sglang": "sglang",
    "koboldcpp": "koboldcpp",
    "text-generation-launcher": "tgi",
    "text-generation-server": "tgi",
    "torchrun": "torch",
}
# A substring of a Python process's arguments -> engine.
_PYTHON_MARKERS: tuple[tuple[str, str], ...] = (
    ("vllm", "vllm"),
    ("sglang", "sglang"),
    ("llama_cpp.server", "llama.cpp"),
    ("text_generation_server", "tgi"),
    ("torch.distributed", "torch"),
    ("torchrun", "torch"),
    ("transformers", "torch"),
    ("comfyui", "torch"),
    ("koboldcpp", "koboldcpp"),
)
# vLLM renames its engine and worker processes (comm is 15 bytes at most).
_COMM_PREFIXES: tuple[tuple[str, str], ...] = (("VLLM::", "vllm"), ("sglang::", "sglang"))


def engine_of(comm: str, argv: tuple[str, ...] | list[str]) -> str | None:
    """The engine a process runs (``llama.cpp``, ``ollama``, ``vllm``, ...) or ``None``."""
    for prefix, engine in _COMM_PREFIXES:
        if comm.startswith(prefix) or (argv and argv[0].startswith(prefix)):
            return engine
    if not argv:
        return _EXECUTABLES.get(comm)
    exe = os.path.basename(argv[0])
    if known := _EXECUTABLES.get(exe):
        return known
    if exe.startswith("python") or comm.startswith("python"):
        rest = " ".join(argv[1:8]).lower()
        for marker, engine in _PYTHON_MARKERS:
            if marker in rest:
                return engine
        return None
    # ollama's runner: `ollama runner --model .../blobs/sha256-...` keeps exe "ollama".
    return _EXECUTABLES.get(comm)


def could_be_server(name: str) -> bool:
    """Whether a process whose comm (or executable's base name) is ``name`` may be one that
    :func:`engine_of` recognises once its argv is read: a known executable (comm is cut at
    15 bytes), a vLLM or sglang process that renamed itself, or Python (recognised by its
    arguments). An empty name (unknown) may be anything."""
    if not name or name.startswith("python") or name in _EXECUTABLES:
        return True
    if any(name.startswith(prefix) for prefix, _ in _COMM_PREFIXES):
        return True
    return len(name) == 15 and any(exe.startswith(name) for exe in _EXECUTABLES)


def is_python(comm: str, argv: tuple[str, ...] | list[str]) -> bool:
    exe = os.path.basename(argv[0]) if argv else comm
    return exe.startswith("python") or comm.startswith("python")
