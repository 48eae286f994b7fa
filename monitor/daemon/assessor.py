"""The daemon assesses each server once per launch (issue 15 point 3).

Each tick hands :meth:`Assessor.on_tick` its snapshot. A server seen for the first time, or
whose argv/cwd changed, is queued for a background thread that reads its GGUF header(s)
and estimates it (monitor/analysis/assess.py), so a slow or hung model file never delays
sampling. Finished assessments are written by the tick's thread (the one SQLite writer)
into the ``estimates`` table and published for the HTTP API (``current``). A restarted
daemon takes up the stored assessment of a launch it already assessed instead of reading
the model again (the file may be gone by then). Per tick, with nothing new, the cost is a
dictionary lookup per server.

Churn costs no more than that (issue 32 item 3): a server is assessed from its second tick
on (or at once when it holds GPU memory, or on the assessor's first tick, a restarted
daemon's servers), so a process gone before its second tick costs no estimate and no
``estimates`` row; and the estimates themselves come from an
:class:`~monitor.analysis.assess_cache.AssessCache`, so a thousand processes launched with
one command line, model file and devices cost one estimate.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.base import ProcessInfo, Snapshot
from monitor.analysis.assess import Assessment, launch_key, to_json
from monitor.analysis.assess_cache import AssessCache
from monitor.analysis.stored import parsed
from monitor.estimate import ESTIMATOR_VERSION
from monitor.estimate.model import HOST, DeviceInfo, devices_from_samples

log = logging.getLogger(__name__)

SERVER_ENGINES = frozenset({"llama.cpp", "ollama", "vllm", "sglang"})
MAX_QUEUED = 64  # launches waiting for the thread; more wait for a later tick

Key = tuple[int, int]  # (pid, start_ticks)


@dataclass(frozen=True, slots=True)
class _Job:
    info: ProcessInfo
    devices: tuple[DeviceInfo, ...]
    ts_ms: int
    cpu_features: tuple[str, ...] | None = None


@dataclass
class Assessor:
    proc_root: Path = Path("/proc")
    gpu_overhead_bytes: int = 300 * 1024 * 1024
    threaded: bool = True  # False: assess inside on_tick (tests, tools)
    read_header: Callable[[str], Any] | None = None  # None: monitor.gguf.reader.read_header
    assessed: int = 0  # assessments computed (model headers read), not taken up from the db
    deferred: int = 0  # servers seen on one tick only so far, not assessed (yet)
    _current: Mapping[Key, Assessment] = field(default_factory=dict)
    _launch: dict[Key, tuple[tuple[str, ...], str | None, str]] = field(default_factory=dict)
    _wanted: dict[Key, str] = field(default_factory=dict)  # queued or assessed: launch key
    _unstored: dict[Key, tuple[Assessment, int | None]] = field(default_factory=dict)
    _done: list[Assessment] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _queue: queue.Queue[_Job | None] = field(default_factory=lambda: queue.Queue(MAX_QUEUED))
    _thread: threading.Thread | None = None
    _previous: frozenset[Key] | None = None  # the servers of the last tick; None: first
    _cache: AssessCache | None = None  # made on the assessing thread's first job

    def current(self) -> Mapping[Key, Assessment]:
        """The assessments of the servers of the latest tick; safe from any thread (the
        mapping is replaced, never changed)."""
        return self._current

    def close(self) -> None:
        if self._thread is not None:
            with contextlib.suppress(queue.Full):  # a daemon thread: ends with the process
                self._queue.put_nowait(None)
            self._thread.join(timeout=1.0)
            self._thread = None

    # -- the tick's side (one thread) ----------------------------------------------------

    def on_tick(self, snap: Snapshot, store: Any | None) -> None:
        """Queue the new launches of ``snap``, publish and store the finished ones.
        ``store``: the daemon's Store, or None while the database refuses writes."""
        from monitor.servers.recognise import helper_parents

        helpers = helper_parents({p.pid: p for p in snap.processes})
        servers = {
            (p.pid, p.start_ticks): p
            for p in snap.processes
            if p.engine in SERVER_ENGINES and p.pid not in helpers
        }
        current = {k: a for k, a in self._current.items() if k in servers}
        with self._lock:
            done, self._done = self._done, []
        for a in done:
            k = (a.pid, a.start_ticks)
            info = servers.get(k)
            if info is None or self._key(k, info) != a.launch_key:
                continue  # gone, or launched again meanwhile: that launch is queued
            current[k] = a
            self._unstored[k] = (a, info.started_at_ms)
        for k in [k for k in self._launch if k not in servers]:
            del self._launch[k]
        for k in [k for k in self._wanted if k not in servers]:
            del self._wanted[k]
        devices: tuple[DeviceInfo, ...] | None = None
        holders = {m.pid for m in snap.memory if m.device_id != HOST}
        for k, info in servers.items():
            if self._previous is not None and k not in self._previous and k[0] not in holders:
                self.deferred += 1  # its first tick: a short-lived one costs nothing
                continue
            key = self._key(k, info)
            if self._wanted.get(k) == key:
                continue
            found = self._stored(store, info, key)
            if found is not None:
                current[k] = found
                self._wanted[k] = key
                continue
            if devices is None:
                devices = tuple(devices_from_samples(snap.devices, self.gpu_overhead_bytes))
            if self._submit(_Job(info, devices, snap.ts_ms, snap.cpu_features)):
                self._wanted[k] = key
        if not self.threaded:
            with self._lock:
                done, self._done = self._done, []
            for a in done:
                k = (a.pid, a.start_ticks)
                current[k] = a
                self._unstored[k] = (a, servers[k].started_at_ms)
        self._current = current
        self._previous = frozenset(servers)
        if store is not None:
            self._write(store, servers)

    def _key(self, k: Key, info: ProcessInfo) -> str:
        cached = self._launch.get(k)
        if cached is not None and cached[0] == info.argv and cached[1] == info.cwd:
            return cached[2]
        key = launch_key(info)
        self._launch[k] = (info.argv, info.cwd, key)
        return key

    @staticmethod
    def _stored(store: Any | None, info: ProcessInfo, key: str) -> Assessment | None:
        if store is None:
            return None
        try:
            doc = store.stored_assessment(
                info.pid, info.start_ticks, info.started_at_ms, key, ESTIMATOR_VERSION
            )
        except sqlite3.Error as exc:
            log.debug("stored assessment of pid %d not read: %s", info.pid, exc)
            return None
        return None if doc is None else parsed(doc)

    def _write(self, store: Any, servers: Mapping[Key, ProcessInfo]) -> None:
        for k, (a, started_at_ms) in list(self._unstored.items()):
            if k not in servers:
                del self._unstored[k]
                continue
            try:
                written = store.add_assessment(to_json(a), started_at_ms)
            except sqlite3.Error as exc:
                log.error("cannot store the estimate of pid %d: %s", a.pid, exc)
                return
            if written:
                del self._unstored[k]

    def _submit(self, job: _Job) -> bool:
        if not self.threaded:
            self._run(job)
            return True
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="vramscope-assess", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            return False
        return True

    # -- the assessing thread ------------------------------------------------------------

    def _loop(self) -> None:
        while (job := self._queue.get()) is not None:
            self._run(job)

    def _run(self, job: _Job) -> None:
        from monitor.servers import read_llama_env

        if self._cache is None:
            self._cache = AssessCache(self.read_header)
        before = self._cache.estimated
        try:
            env = read_llama_env(self.proc_root, job.info.pid)
            a = self._cache.assess(
                job.info, job.devices, job.ts_ms, env=env, cpu_features=job.cpu_features
            )
        except Exception as exc:  # a bug here must not stop the thread
            log.error("assessing pid %d failed: %r", job.info.pid, exc)
            return
        self.assessed += self._cache.estimated - before
        if a is None:  # not a server we estimate (a vLLM worker): wanted, never shown
            return
        with self._lock:
            self._done.append(a)
