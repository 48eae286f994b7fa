"""Which engine and role each process is, and which process owns a worker's model.

``parse_command`` turns one command line into a :class:`LaunchSpec` (or None when it is
not a process that loads a model). ``recognise`` looks at the whole process table: vLLM
and SGLang hold their GPU memory in renamed children (``VLLM::EngineCore``, truncated to
``VLLM::EngineCor`` in ``comm``; ``VLLM::Worker_TP0``; ``sglang::scheduler``), ollama in
a runner child of ``ollama serve``; those are tied to the ancestor that owns the model by
walking ``ppid`` (research/estimation.md sections 3-5).

Roles: ``server`` (llama-server, vLLM/SGLang API server, ``ollama serve``, generic torch),
``runner`` (ollama's model process), ``worker`` (vLLM/SGLang engine and worker processes),
``proxy`` (llama-swap; its llama-server children are servers that own themselves),
``router`` (a llama-server in router mode; its children are servers that own themselves
and carry a :class:`~monitor.servers.router.RouterChild` link, monitor/servers/router.py).

``recognise`` and :class:`EngineMatch` live in monitor/servers/recognise_table.py,
imported when first named here: the one-shot commands parse command lines but do not
match a whole process table (issue 32 item 4).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from collectors.base import ProcessInfo
from collectors.tracking import engine_of
from monitor.servers import ollama
from monitor.servers.llamacpp import is_flag, parse_llamacpp
from monitor.servers.spec import LaunchSpec, resolve_paths
from monitor.servers.vllm import parse_sglang, parse_vllm

if TYPE_CHECKING:
    from monitor.servers.recognise_table import EngineMatch as EngineMatch
    from monitor.servers.recognise_table import recognise as recognise

LLAMA_EXECUTABLES = frozenset(
    {
        "llama-server",
        "llama-cli",
        "llama-embedding",
        "llama-mtmd-cli",
        "llama-completion",
        "llama-speculative",
        "llama-speculative-simple",
        "llama-lookup",
        "llama-parallel",
        "llama-batched",
        "llama-perplexity",
        "llama-imatrix",
        "llama-bench",
        "llama-retrieval",
    }
)
# Wrappers seen in llama-swap ``cmd`` lines: the real command follows them.
_WRAPPERS = frozenset(
    {
        "env",
        "nice",
        "numactl",
        "taskset",
        "ionice",
        "stdbuf",
        "chrt",
        "nohup",
        "setsid",
        "systemd-run",
        "exec",
    }
)
_ENV_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
# A renamed process: "VLLM::EngineCore", "VLLM::Worker_TP0", "sglang::scheduler_TP0".
_TITLE = re.compile(r"([A-Za-z0-9_.-]+)::(\S*)")
MAX_DEPTH = 64
# Engine CLIs whose serving forms are parsed above; anything else they run is a client.
_SHELLS = frozenset({"sh", "bash", "dash", "zsh"})
_CLIENT_EXECUTABLES = frozenset({"ollama", "vllm", "sglang", "llama-swap", "llama"})


# --- one command line -------------------------------------------------------------------


def _unwrap(argv: Sequence[str], env: Mapping[str, str] | None) -> tuple[list[str], dict[str, str]]:
    """Strip ``env K=V``, ``nice -n 5``, ``numactl ...`` prefixes; collect ``K=V``."""
    args = list(argv)
    merged = dict(env or {})
    while args and os.path.basename(args[0]) in _WRAPPERS:
        rest = args[1:]
        for i, word in enumerate(rest):
            m = _ENV_ASSIGN.fullmatch(word)
            if m and not word.startswith("-"):
                merged[m.group(1)] = m.group(2)
                continue
            if _program(word) is not None:
                args = rest[i:]
                break
        else:
            return [], merged
    return args, merged


def _program(word: str) -> str | None:
    base = os.path.basename(word)
    if (
        base in LLAMA_EXECUTABLES
        or base in _WRAPPERS
        or base.startswith("python")
        or base in ("llama", "llama-swap", "ollama", "ollama_llama_server", "vllm", "sglang")
    ):
        return base
    return None


def _python_target(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """For ``python [opts] -m mod args`` -> (mod, args); ``python script args`` ->
    (basename(script), args); else (None, [])."""
    i = 1
    while i < len(args):
        a = args[i]
        if a == "-m" and i + 1 < len(args):
            return args[i + 1], list(args[i + 2 :])
        if a.startswith("-m") and len(a) > 2:
            return a[2:], list(args[i + 1 :])
        if a in ("-c",):
            return None, []
        if a in ("-W", "-X", "--check-hash-based-pycs"):
            i += 2
            continue
        if is_flag(a):
            i += 1
            continue
        return os.path.basename(a), list(args[i + 1 :])
    return None, []


def _kind(argv: Sequence[str]) -> str | None:
    """What a command line is: "llama.cpp", "ollama-runner", "ollama-server",
    "llama-swap", "vllm", "sglang", "vllm-worker", "sglang-worker", or None."""
    if not argv:
        return None
    title = _TITLE.fullmatch(argv[0].strip())
    if title:
        prefix = title.group(1)
        if prefix == "VLLM":
            return "vllm-worker"
        if prefix.lower() == "sglang":
            return "sglang-worker"
        return None
    exe = os.path.basename(argv[0])
    if exe == "llama-swap":
        return "llama-swap"
    if ollama.is_server(argv):
        return "ollama-server"
    if ollama.is_runner(argv) or (
        (exe in LLAMA_EXECUTABLES or exe == "ollama_llama_server") and ollama.is_runner_binary(argv)
    ):
        return "ollama-runner"
    if exe in LLAMA_EXECUTABLES or (
        exe == "llama" and len(argv) > 1 and argv[1] in ("serve", "server")
    ):
        return "llama.cpp"
    if exe == "vllm":
        return "vllm" if len(argv) > 1 and argv[1] == "serve" else None
    if exe == "sglang":
        return "sglang" if len(argv) > 1 and argv[1] == "serve" else None
    if exe.startswith("python"):
        target, rest = _python_target(argv)
        if target is None:
            return None
        if target in ("vllm", "vllm.entrypoints.cli.main"):
            return "vllm" if rest[:1] == ["serve"] else None
        if target.startswith("vllm.entrypoints"):
            return "vllm"
        if target.startswith("sglang.launch_server") or (
            target in ("sglang", "sglang.cli.main") and rest[:1] == ["serve"]
        ):
            return "sglang"
    return None


def _spec_for(
    kind: str, argv: Sequence[str], env: Mapping[str, str] | None, comm: str = ""
) -> LaunchSpec | None:
    if kind == "llama.cpp":
        return parse_llamacpp(argv, env)
    if kind == "ollama-runner":
        return ollama.parse_runner(argv, env)
    if kind == "vllm":
        return parse_vllm(argv)
    if kind == "sglang":
        return parse_sglang(argv)
    if kind == "vllm-worker":
        return LaunchSpec(engine="vllm", role="worker")
    if kind == "sglang-worker":
        return LaunchSpec(engine="sglang", role="worker")
    return None  # ollama serve, llama-swap: no model of their own


def parse_command(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    cwd: str | None = None,
    _depth: int = 0,
) -> LaunchSpec | None:
    """The launch spec of a model-serving command line, or None.

    Handles llama-server / llama-cli / llama-embedding (and the other llama.cpp tools),
    ``llama serve``, ollama's runner (its ``lib/ollama/llama-server``, ``ollama runner``,
    ``ollama_llama_server``), ``vllm serve`` and ``python -m vllm.entrypoints...``,
    ``python -m sglang.launch_server``, a ``VLLM::``/``sglang::`` worker title (a bare
    worker spec), ``env K=V``/``nice``/``numactl`` prefixes (their ``LLAMA_ARG_*`` pairs
    count as environment), ``sh -c "..."`` (as llama-swap ``cmd`` lines may be), and
    other engines collectors/tracking.py knows (``torch``, ``tgi``, ``koboldcpp``: a spec
    with nothing but the engine). ``ollama serve`` and
    ``llama-swap`` load no model themselves: None (recognise() still reports them).
    ``cwd`` (the process's ``/proc/PID/cwd``) resolves relative model paths
    (spec.resolve_paths).
    """
    spec = _parse_command(argv, env, _depth)
    return resolve_paths(spec, cwd) if spec is not None and cwd else spec


def unwrapped_command(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """The server's own argv and environment under ``env K=V`` / ``nice`` / ``numactl``
    prefixes and ``sh -c "..."`` (what :func:`parse_command` reads)."""
    args, merged = _unwrap(argv, env)
    for _ in range(3):
        if not (len(args) >= 3 and os.path.basename(args[0]) in _SHELLS and args[1] == "-c"):
            break
        try:
            inner = shlex.split(args[2])
        except ValueError:
            break
        args, merged = _unwrap(inner, merged)
    return args, merged


def _parse_command(
    argv: Sequence[str], env: Mapping[str, str] | None, _depth: int
) -> LaunchSpec | None:
    args, merged = _unwrap(argv, env)
    if len(args) >= 3 and os.path.basename(args[0]) in _SHELLS and args[1] == "-c" and _depth < 3:
        try:  # a llama-swap `cmd` may be `sh -c "exec llama-server ..."`
            inner = shlex.split(args[2])
        except ValueError:
            return None
        return _parse_command(inner, merged, _depth + 1)
    kind = _kind(args)
    if kind is not None:
        return _spec_for(kind, args, merged)
    if not args:
        return None
    exe = os.path.basename(args[0])
    if exe in _CLIENT_EXECUTABLES:
        return None  # `ollama run`, `vllm bench`, `vllm chat`: clients, no model loaded
    engine = engine_of(exe[:15], tuple(args))
    if engine in (None, "llama-swap", "ollama"):
        return None
    return LaunchSpec(engine=engine)


# --- the process table ------------------------------------------------------------------


def helper_parents(processes: Mapping[int, ProcessInfo]) -> dict[int, int]:
    """Child pid -> the server it helps, for every process whose parent is an inference
    process (an engine is known) with the very same command line: a forked child of a
    server (a helper, or the moment between fork and exec) is not a second server. Its
    memory belongs to the server (the top of a chain of such forks); it never gets a
    server row or an estimate of its own."""
    out: dict[int, int] = {}
    for pid, info in processes.items():
        owner = pid
        seen = {pid}
        current = info
        while current.argv and current.ppid is not None and current.ppid not in seen:
            parent = processes.get(current.ppid)
            if parent is None or parent.engine is None or parent.argv != info.argv:
                break
            seen.add(parent.pid)
            owner, current = parent.pid, parent
            if len(seen) > MAX_DEPTH:
                break
        if owner != pid:
            out[pid] = owner
    return out


def __getattr__(name: str) -> Any:
    if name in ("recognise", "EngineMatch"):
        from monitor.servers import recognise_table

        return getattr(recognise_table, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
