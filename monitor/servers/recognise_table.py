"""``recognise``: which engine and role each process of a whole process table is, and
which process owns a worker's model (the module docstring of monitor/servers/recognise.py
says how; this is its process-table half, apart so that the commands that only parse a
command line do not build its classes: issue 32 item 4).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from collectors.base import ProcessInfo
from collectors.tracking import engine_of, is_python
from monitor.servers import ollama
from monitor.servers.llamacpp import parse_llamacpp
from monitor.servers.recognise import _CLIENT_EXECUTABLES, _TITLE, MAX_DEPTH, _kind
from monitor.servers.router import link_routers
from monitor.servers.spec import LaunchSpec, resolve_paths
from monitor.servers.vllm import parse_sglang, parse_vllm

if TYPE_CHECKING:
    from monitor.servers.router_types import RouterChild


@dataclass(frozen=True, slots=True)
class EngineMatch:
    """One inference-related process: what it is, and who owns the model it serves."""

    pid: int
    engine: str
    role: str
    owner_pid: int
    spec: LaunchSpec | None
    router: RouterChild | None = None  # a llama-server a router spawned: which, model id


def _ancestors(pid: int, processes: Mapping[int, ProcessInfo]) -> list[int]:
    """Parent, grandparent, ... of ``pid`` that are in ``processes`` (nearest first)."""
    out: list[int] = []
    seen = {pid}
    info = processes.get(pid)
    while info is not None and info.ppid is not None and len(out) < MAX_DEPTH:
        ppid = info.ppid
        if ppid in seen:
            break
        seen.add(ppid)
        info = processes.get(ppid)
        if info is None:
            break
        out.append(ppid)
    return out


def _title_of(info: ProcessInfo) -> re.Match[str] | None:
    if info.argv:
        m = _TITLE.fullmatch(info.argv[0].strip())
        if m:
            return m
    return _TITLE.fullmatch(info.comm.strip())


def recognise(
    processes: Mapping[int, ProcessInfo], env_for: Callable[[int], Mapping[str, str]] | None = None
) -> dict[int, EngineMatch]:
    """Every inference-related process in ``processes`` -> its :class:`EngineMatch`.

    ``env_for(pid)`` gives a process's allow-listed environment (environ.read_llama_env);
    it is asked only for llama.cpp/ollama runners (``LLAMA_ARG_*``) and for renamed
    processes with an unfamiliar ``X::`` prefix (``VLLM_PROCESS_NAME_PREFIX``).

    - vLLM ``VLLM::EngineCore``/``VLLM::Worker_*`` (and SGLang ``sglang::*``) processes:
      role "worker", owner = the nearest ancestor that is the API server; their spec is
      the owner's with role "worker" (a bare worker spec when no owner is visible).
    - a llama-server started by ``ollama serve`` (or any ollama runner form): engine
      "ollama", role "runner", owner = the ``ollama serve`` ancestor.
    - ``ollama serve``: role "server", spec None; llama-swap: role "proxy", spec None.
    - a llama-server router (``--models-dir``/``--models-preset``, no model): role
      "router"; each llama-server it spawned: role "server", owner itself, ``router`` set.
    - a Python process the collectors saw on a GPU, or one tracking.py names (torch,
      tgi, ...), that is none of the above: its engine, role "server", a bare spec.
    """

    scope = _Scope(processes, _kinds(processes), env_for)
    out = _servers(scope)
    _, children = link_routers(
        {pid: m.spec for pid, m in out.items()},
        {pid: info.ppid for pid, info in processes.items()},
        scope.env,
    )
    for pid, link in children.items():
        out[pid] = dataclasses.replace(out[pid], router=link)
    out.update(_workers(scope, {pid: m.spec for pid, m in out.items()}))
    out.update(_others(scope, out))
    return out


@dataclasses.dataclass(frozen=True)
class _Scope:
    """The processes of one pass, the kind each command line says, their environments."""

    processes: Mapping[int, ProcessInfo]
    kinds: dict[int, str]
    env_for: Callable[[int], Mapping[str, str]] | None

    def env(self, pid: int) -> Mapping[str, str]:
        if self.env_for is None:
            return {}
        try:
            return self.env_for(pid) or {}
        except Exception:  # noqa: BLE001 - a vanished or unreadable process has no env
            return {}

    def nearest(self, pid: int, wanted: set[str]) -> int | None:
        """The nearest ancestor of one of the ``wanted`` kinds."""
        for anc in _ancestors(pid, self.processes):
            if self.kinds.get(anc) in wanted:
                return anc
        return None


def _kinds(processes: Mapping[int, ProcessInfo]) -> dict[int, str]:
    """pid -> what its command line (or its process title) says it is."""
    kinds: dict[int, str] = {}
    for pid, info in processes.items():
        kind = _kind(info.argv) if info.argv else None
        if kind is None:
            title = _title_of(info)
            if title and title.group(1) == "VLLM":
                kind = "vllm-worker"
            elif title and title.group(1).lower() == "sglang":
                kind = "sglang-worker"
            elif title:
                kind = "titled"  # decided by its ancestors or env below
        if kind is not None:
            kinds[pid] = kind
    return kinds


def _servers(scope: _Scope) -> dict[int, EngineMatch]:
    """Servers, runners and proxies: parsed first, so workers can copy their owner's spec."""
    out: dict[int, EngineMatch] = {}
    for pid, kind in scope.kinds.items():
        info = scope.processes[pid]
        if kind in ("llama.cpp", "ollama-runner"):
            server = scope.nearest(pid, {"ollama-server"})
            if kind == "llama.cpp" and server is None:
                spec = resolve_paths(parse_llamacpp(info.argv, scope.env(pid)), info.cwd)
                out[pid] = EngineMatch(pid, "llama.cpp", spec.role, pid, spec)
            else:
                spec = resolve_paths(ollama.parse_runner(info.argv, scope.env(pid)), info.cwd)
                out[pid] = EngineMatch(
                    pid, "ollama", "runner", server if server is not None else pid, spec
                )
        elif kind in ("vllm", "sglang"):
            spec = parse_vllm(info.argv) if kind == "vllm" else parse_sglang(info.argv)
            out[pid] = EngineMatch(pid, kind, "server", pid, spec)
        elif kind == "ollama-server":
            out[pid] = EngineMatch(pid, "ollama", "server", pid, None)
        elif kind == "llama-swap":
            out[pid] = EngineMatch(pid, "llama-swap", "proxy", pid, None)
    return out


def _workers(scope: _Scope, specs: Mapping[int, LaunchSpec | None]) -> dict[int, EngineMatch]:
    """vLLM / SGLang workers (by title, or a renamed prefix its env names), each with its
    owner's spec as role "worker"."""
    out: dict[int, EngineMatch] = {}
    for pid, kind in scope.kinds.items():
        if kind not in ("vllm-worker", "sglang-worker", "titled"):
            continue
        engine = {"vllm-worker": "vllm", "sglang-worker": "sglang"}.get(kind)
        if engine is None:  # a custom VLLM_PROCESS_NAME_PREFIX, or not an engine at all
            title = _title_of(scope.processes[pid])
            prefix = title.group(1) if title else None
            renamed = (
                prefix is not None and scope.env(pid).get("VLLM_PROCESS_NAME_PREFIX") == prefix
            )
            if not renamed and scope.nearest(pid, {"vllm"}) is None:
                continue
            engine = "vllm"
        owner = scope.nearest(pid, {engine})
        owner_spec = specs.get(owner) if owner is not None else None
        spec = (
            dataclasses.replace(owner_spec, role="worker")
            if owner_spec is not None
            else LaunchSpec(engine=engine, role="worker")
        )
        out[pid] = EngineMatch(pid, engine, "worker", owner if owner is not None else pid, spec)
    return out


def _others(scope: _Scope, found: Mapping[int, EngineMatch]) -> dict[int, EngineMatch]:
    """Engines named by tracking.py, or Python on a GPU (torch), none of the above."""
    out: dict[int, EngineMatch] = {}
    for pid, info in scope.processes.items():
        if pid in found or pid in scope.kinds:
            continue
        engine = info.engine or engine_of(info.comm, info.argv)
        if info.argv and os.path.basename(info.argv[0]) in _CLIENT_EXECUTABLES:
            continue  # a client of an engine parsed above (`ollama run`, `vllm bench`)
        if engine is None and "gpu" in info.reasons and is_python(info.comm, info.argv):
            engine = "torch"  # a Python process holding GPU memory: torch in practice
        if engine is None:
            continue
        out[pid] = EngineMatch(pid, engine, "server", pid, LaunchSpec(engine=engine))
    return out
