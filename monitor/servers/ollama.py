"""ollama: ``ollama serve`` and the runner child that holds the model.

(research/estimation.md section 3.) Since v0.30 the runner is upstream ``llama-server``
under ``lib/ollama/``::

    <lib/ollama>/llama-server --model <OLLAMA_MODELS>/blobs/sha256-<hex> --port N
        --host 127.0.0.1 --no-webui --offline -c <NumCtx*np> -np <np> ...

so it parses like llama.cpp; its ``-c`` already is NumCtx x parallel and, ``-np`` being
explicit, its KV cache is not unified. Older runners are ``ollama runner [--ollama-engine]
--model <blob> --port N`` (v0.12 - v0.2x: the context came over HTTP, so it is not on the
command line) or, before that, took llama.cpp-like Go flags (``-ctx-size``,
``--kv-cache-type``) and ``ollama_llama_server`` (v0.1 - v0.3, a llama.cpp server build).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence

from monitor.servers import llamacpp
from monitor.servers.spec import LaunchSpec

ENGINE = "ollama"
_BLOB = re.compile(r"(?:^|/)blobs/(sha256[-:][0-9a-fA-F]{12,})$")
# Go's flag package takes -flag as well as --flag; these are the runner's own names.
_GO_FLAGS = (
    "model",
    "port",
    "ctx-size",
    "batch-size",
    "n-gpu-layers",
    "main-gpu",
    "flash-attn",
    "kv-cache-type",
    "parallel",
    "threads",
    "no-mmap",
    "mlock",
    "tensor-split",
    "multiuser-cache",
    "ollama-engine",
    "lora",
    "mmproj",
    "verbose",
    "embedding",
)
_GO_ALIASES = {f"-{name}": f"--{name}" for name in _GO_FLAGS}


def blob_name(path: str | None) -> str | None:
    """``.../blobs/sha256-<hex>`` -> ``sha256-<hex>``; None for any other path."""
    if not path:
        return None
    m = _BLOB.search(path)
    return m.group(1).replace(":", "-") if m else None


def is_runner_binary(argv: Sequence[str]) -> bool:
    """A llama-server that ollama started: its binary under lib/ollama, or a blob model."""
    if not argv:
        return False
    exe = argv[0]
    if os.path.basename(exe) == "ollama_llama_server":
        return True
    if "/lib/ollama/" in exe or exe.startswith("lib/ollama/"):
        return True
    return any(blob_name(a.split("=", 1)[-1]) for a in argv[1:])


def is_server(argv: Sequence[str]) -> bool:
    """``ollama serve`` (the parent that schedules runners)."""
    return len(argv) >= 2 and os.path.basename(argv[0]) == "ollama" and argv[1] == "serve"


def is_runner(argv: Sequence[str]) -> bool:
    """``ollama runner ...`` (v0.4 - v0.2x)."""
    return len(argv) >= 2 and os.path.basename(argv[0]) == "ollama" and argv[1] == "runner"


def parse_runner(argv: Sequence[str], env: Mapping[str, str] | None = None) -> LaunchSpec:
    """Any form of the runner -> spec with engine "ollama", role "runner"."""
    args = list(argv[2:]) if is_runner(argv) else llamacpp.program_args(argv)
    spec = llamacpp.parse_args(args, env, engine=ENGINE, role="runner", aliases=_GO_ALIASES)
    model_name = spec.model_name
    if model_name is None:
        model_name = blob_name(spec.model_path) or None
    kv_unified = spec.kv_unified
    if spec.n_parallel is not None and kv_unified is None:
        kv_unified = False  # an explicit -np leaves the KV split per slot
    if (model_name, kv_unified) == (spec.model_name, spec.kv_unified):
        return spec
    return dataclasses.replace(spec, model_name=model_name, kv_unified=kv_unified)
