"""One estimate per launch, however many processes run it (issue 32 item 3).

A busy box may start the same ``llama-server -m x.gguf ...`` several times a second (a
test harness, a supervisor restarting a crashing server). Each start is a new process,
so a cache by ``(pid, start_ticks)`` estimates every one of them. :class:`AssessCache`
keys the assessment on what the estimate really depends on:

- the launch spec as the engine parses it (monitor/servers ``parse_command``: argv, the
  allow-listed ``LLAMA_ARG_*`` environment, paths joined to the working directory), with
  ``--host``/``--port`` left out (they change no byte of memory);
- the identity of every file the spec names (model, its splits, draft, mmproj, LoRAs):
  ``(st_dev, st_ino, st_size, st_mtime_ns)`` from ``os.stat``, or None when missing, so a
  model replaced in place is estimated again;
- the devices it would be placed on (``DeviceInfo``), with free memory in steps of
  ``FREE_STEP_BYTES``: llama-server's fit and the multi-GPU split read free memory at
  launch, so a launch with much more or less free is estimated again, and one that differs
  by less than a step takes the earlier estimate (its notes quote that earlier free
  figure);
- the CPU features llama.cpp's CPU backend picks buffers by, and ``ESTIMATOR_VERSION``.

A hit costs a parse and a ``stat`` per file. The cached assessment is handed back with
this process's pid, start tick, time and launch key. Not thread-safe: one owner (the
daemon's assessing thread, the TUI's frame builder).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from collectors.base import ProcessInfo
from monitor.analysis.assess import Assessment, assess, launch_key
from monitor.estimate import ESTIMATOR_VERSION, features_of
from monitor.estimate.model import DeviceInfo

FREE_STEP_BYTES = 64 * 1024 * 1024  # under the 0.1 GiB the notes print free memory in
MAX_ENTRIES = 256
MAX_FILES = 64  # splits + draft + mmproj + LoRAs stat'ed per launch; more: not cached

FileId = tuple[int, int, int, int] | None


def file_identity(path: str) -> FileId:
    """``(st_dev, st_ino, st_size, st_mtime_ns)`` of ``path``; None when it cannot be
    stat'ed (missing, denied): the estimate of a missing file is an error, cached as such
    until the file appears."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _paths_of(spec: Any) -> list[str]:
    """Every file the estimate of ``spec`` reads: all splits of a split GGUF (as
    monitor/gguf/reader.py finds them), the draft, mmproj and LoRAs."""
    from monitor.gguf.reader import GgufError, _split_paths

    paths: list[str] = []
    for p in (spec.model_path, spec.draft_model):
        if p:
            try:
                paths.extend(_split_paths(os.path.abspath(p)))
            except GgufError:  # more splits than the reader reads: it fails, keyed by name
                paths.append(p)
    paths.extend(p for p in (spec.mmproj, *spec.lora) if p)
    return paths


def _devices_key(devices: Sequence[DeviceInfo]) -> tuple[Any, ...]:
    return tuple(
        (
            d.device_id,
            d.total_bytes,
            None if d.free_bytes is None else d.free_bytes // FREE_STEP_BYTES,
            d.memory_kind,
            d.overhead_bytes,
        )
        for d in devices
    )


def spec_key(
    spec: Any, devices: Sequence[DeviceInfo], cpu_features: tuple[str, ...] | None
) -> tuple[Any, ...] | None:
    """The key of a parsed launch (see the module docstring); None when it names more
    than ``MAX_FILES`` files (not cached)."""
    paths = _paths_of(spec)
    if len(paths) > MAX_FILES:
        return None
    files = tuple((p, file_identity(p)) for p in paths)
    spec = replace(spec, host=None, port=None)
    cpu = tuple(cpu_features) if cpu_features is not None else None
    key = (spec, files, _devices_key(devices), cpu, ESTIMATOR_VERSION)
    try:
        hash(key)
    except TypeError:  # a spec field that is not hashable: estimated afresh
        return None
    return key


def detached(exc: BaseException) -> BaseException:
    """A copy of ``exc`` (same type, args, attributes and message) without its traceback,
    context or cause. A kept failure must not keep the frames it went through alive:
    those of a GGUF parser hold its 1 MiB read buffer (measured: 1,040 KiB retained per
    cached error of a corrupt 3 MiB file, issue 32). ``exc`` without its traceback when
    no faithful copy can be made."""
    cls = type(exc)
    args = exc.args
    if isinstance(exc, OSError) and exc.filename is not None:
        args = (exc.errno, exc.strerror, exc.filename)
    try:
        copy = cls.__new__(cls, *args)
        copy.__dict__.update(getattr(exc, "__dict__", {}))
        if str(copy) == str(exc):
            return copy
    except Exception:  # noqa: BLE001 - an exception class of unusual construction
        pass
    exc.__context__ = exc.__cause__ = None
    return exc.with_traceback(None)


@dataclass
class EstimateCache:
    """``monitor.estimate.estimate`` of a parsed launch, by :func:`spec_key`: the load watch
    (monitor/daemon/watch.py) estimates every new server on its first tick, so a churn of
    one command costs one estimate. A failure of the types in ``errors`` is kept and
    raised again; anything else is not kept."""

    errors: tuple[type[BaseException], ...] = (ValueError, OSError)
    max_entries: int = MAX_ENTRIES
    estimated: int = 0
    hits: int = 0
    _entries: OrderedDict[tuple[Any, ...], Any] = field(default_factory=OrderedDict)

    def estimate(
        self, spec: Any, devices: Sequence[DeviceInfo], cpu_features: tuple[str, ...] | None
    ) -> Any:
        from monitor.estimate import estimate

        key = spec_key(spec, devices, cpu_features)
        if key is not None and key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            found = self._entries[key]
            if isinstance(found, BaseException):
                raise detached(found)  # the kept one never propagates: it gains no frames
            return found
        self.estimated += 1
        try:
            result = estimate(spec, list(devices), cpu=features_of(cpu_features))
        except self.errors as exc:
            self._keep(key, detached(exc))
            raise
        self._keep(key, result)
        return result

    def _keep(self, key: tuple[Any, ...] | None, value: Any) -> None:
        if key is None:
            return
        self._entries[key] = value
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


@dataclass
class AssessCache:
    """Assessments by launch (see the module docstring). ``estimated``: how many times
    :func:`monitor.analysis.assess.assess` ran (misses); ``hits``: launches answered from
    the cache."""

    read_header: Callable[[str], Any] | None = None
    max_entries: int = MAX_ENTRIES
    estimated: int = 0
    hits: int = 0
    _entries: OrderedDict[tuple[Any, ...], Assessment | None] = field(default_factory=OrderedDict)

    def key(
        self,
        info: ProcessInfo,
        devices: Sequence[DeviceInfo],
        env: Mapping[str, str] | None,
        cpu_features: tuple[str, ...] | None,
    ) -> tuple[Any, ...] | None:
        """The cache key of this launch, or None when it cannot be keyed (too many files)
        and is estimated afresh. A command that is not a server we estimate keys on its
        argv alone (:func:`assess` returns None for it without reading a file)."""
        from monitor.servers import parse_command

        spec = parse_command(list(info.argv), dict(env) if env else None, cwd=info.cwd)
        if spec is None:
            return ("none", tuple(info.argv))
        return spec_key(spec, devices, cpu_features)

    def assess(
        self,
        info: ProcessInfo,
        devices: Sequence[DeviceInfo],
        ts_ms: int,
        *,
        env: Mapping[str, str] | None = None,
        cpu_features: tuple[str, ...] | None = None,
    ) -> Assessment | None:
        """:func:`monitor.analysis.assess.assess` of ``info``, estimated once per launch."""
        key = self.key(info, devices, env, cpu_features)
        if key is not None and key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            found = self._entries[key]
            if found is None:
                return None
            return replace(
                found,
                pid=info.pid,
                start_ticks=info.start_ticks,
                ts_ms=ts_ms,
                launch_key=launch_key(info),
            )
        self.estimated += 1
        result = assess(
            info,
            devices,
            ts_ms,
            env=env,
            read_header=self.read_header,
            cpu=features_of(cpu_features),
        )
        if key is not None:
            self._entries[key] = result
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return result
