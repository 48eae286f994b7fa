"""Read the few environment keys that configure an inference server, and nothing else.

DESIGN.md, security: ``/proc/PID/environ`` is never stored. This module reads it, keeps
only allow-listed keys, and returns a fresh dict of those; the raw bytes never leave the
function. Allowed:

- the ``LLAMA_ARG_*`` keys the estimator reads (llama.cpp's flag environment,
  ``common/arg.cpp`` ``set_env``; the list is :data:`monitor.servers.llamacpp_flags.ENV_KEYS`),
  minus any key whose name says it holds a secret (``..._KEY``, ``..._TOKEN`` ...);
- a fixed list of ``OLLAMA_*`` keys that size models (context, parallel, KV type ...);
- a fixed list of ``VLLM_*`` keys (``VLLM_PROCESS_NAME_PREFIX`` renames the workers);
- ``LLAMA_SERVER_ROUTER_PORT``: a llama-server router's port, set in each child it
  spawns (monitor/servers/router.py);
- the variables that locate llama.cpp's model cache for ``-hf`` (``LLAMA_CACHE``,
  ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME``, ``XDG_CACHE_HOME``, ``HOME``:
  :data:`monitor.servers.hf_cache.CACHE_ENV`), folder paths only.

A process that is gone, not ours to read (another user's, without CAP_SYS_PTRACE), or a
kernel thread gives ``{}``. Each kept value goes through
:func:`collectors.redact.redact_text` (a model URL with a password or ``?token=``).
"""

from __future__ import annotations

import re
from pathlib import Path

from collectors.redact import redact_text
from monitor.servers.hf_cache import CACHE_ENV
from monitor.servers.llamacpp_flags import ENV_KEYS as LLAMA_KEYS
from monitor.servers.router import ROUTER_PORT_ENV

# /proc/PID/environ is at most the exec-time environment (ARG_MAX-bounded); read a bounded
# prefix so a huge environment cannot cost unbounded memory.
MAX_BYTES = 1 << 20

OLLAMA_KEYS = frozenset(
    {
        "OLLAMA_NUM_PARALLEL",
        "OLLAMA_CONTEXT_LENGTH",
        "OLLAMA_KV_CACHE_TYPE",
        "OLLAMA_FLASH_ATTENTION",
        "OLLAMA_GPU_OVERHEAD",
        "OLLAMA_MAX_LOADED_MODELS",
        "OLLAMA_KEEP_ALIVE",
        "OLLAMA_MODELS",
        "OLLAMA_SCHED_SPREAD",
        "OLLAMA_NEW_ENGINE",
        "OLLAMA_LLM_LIBRARY",
        "OLLAMA_MAX_QUEUE",
        "OLLAMA_LOAD_TIMEOUT",
        "OLLAMA_HOST",
        "OLLAMA_MULTIUSER_CACHE",
    }
)
VLLM_KEYS = frozenset(
    {
        "VLLM_PROCESS_NAME_PREFIX",
        "VLLM_USE_V1",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_ATTENTION_BACKEND",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        "VLLM_PORT",
        "VLLM_HOST_IP",
    }
)
# A LLAMA_ARG_ name that says it holds a secret is refused even though the prefix matches.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)


def allowed(key: str) -> bool:
    """Whether an environment key may be read and kept."""
    if key.startswith("LLAMA_ARG_"):
        return key in LLAMA_KEYS and not _SECRET_NAME.search(key)
    return key in OLLAMA_KEYS or key in VLLM_KEYS or key == ROUTER_PORT_ENV or key in CACHE_ENV


def filter_env(entries: bytes) -> dict[str, str]:
    """Allow-listed ``KEY=value`` pairs from NUL-separated ``environ`` bytes."""
    out: dict[str, str] = {}
    for entry in entries.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if not sep or not key:
            continue
        try:
            name = key.decode("ascii")
        except UnicodeDecodeError:
            continue
        if not allowed(name):
            continue
        text = value.decode("utf-8", errors="replace")
        if name == "OLLAMA_HOST" and "@" in text:
            continue  # a URL with credentials: not needed, not kept
        out[name] = redact_text(text)
    return out


def read_llama_env(proc_root: Path, pid: int) -> dict[str, str]:
    """The allow-listed environment of ``pid`` under ``proc_root``; ``{}`` when unreadable."""
    from collectors import _fs  # a --proc-root tree is read inside it, links not followed

    try:
        raw = _fs.read_unrecorded(Path(proc_root) / str(int(pid)) / "environ")[: MAX_BYTES + 1]
    except (OSError, ValueError):
        return {}
    if len(raw) > MAX_BYTES:  # drop the entry cut in half
        raw = raw[:MAX_BYTES].rpartition(b"\0")[0]
    return filter_env(raw)
