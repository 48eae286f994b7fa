"""Run the enabled collectors for one tick and merge their readings into a Snapshot.

Merge rule (one device, and one figure per process per memory kind, never counted twice):
collectors that see the same hardware name it with the same ``device_id`` (AMD: DRM and
amdsmi both use ``drm:<PCI address>``). Device samples with one ``device_id``, and process
rows with one ``(pid, device_id)``, are merged field by field: the first collector in
registry order that knows a field (not ``None``) gives it; the others only fill gaps.
Values are never added across collectors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from collectors.base import (
    COLLECTOR_TIMEOUT_S,
    Collector,
    CollectorOptions,
    CollectorRun,
    DeviceSample,
    GuardedCollector,
    ProcessInfo,
    ProcessMemory,
    Roots,
    Snapshot,
    Tick,
    Untracked,
    now_ms,
)
from collectors.cpuinfo import llama_cpu_features, read_cpu_flags
from collectors.registry import REGISTRY
from monitor.analysis.time_to_oom import OomClock

if TYPE_CHECKING:
    from collectors.base_rare import DeviceEvent, ExitedProcess, HiddenProcess, ProcessCgroup


class Sampler:
    """Owns one instance of each enabled collector (they keep caches between ticks)."""

    def __init__(
        self,
        roots: Roots,
        options: CollectorOptions | None = None,
        enabled: Iterable[str] | None = None,
        timeout_s: float | None = COLLECTOR_TIMEOUT_S,
    ) -> None:
        wanted = None if enabled is None else set(enabled)
        self.roots = roots
        self.collectors: list[Collector] = [
            spec.factory(roots, options or CollectorOptions())
            for spec in REGISTRY
            if (spec.default_enabled if wanted is None else spec.name in wanted)
        ]
        # Each collector runs in its own worker thread with a timeout (collectors/base.py).
        self.guards = [GuardedCollector(c, timeout_s) for c in self.collectors]
        # constant for the box: read once (llama.cpp's weight buffers depend on it)
        self.cpu_features = llama_cpu_features(read_cpu_flags(roots))
        self.clock = OomClock()  # each pool's recent fill, for its time to OOM

    def sample(self, ts_ms: int | None = None, execs: frozenset[int] | None = None) -> Snapshot:
        """One tick; ``execs``: the pids that exec'd since the last one, when known
        (:attr:`collectors.base.Tick.execs`)."""
        tick = Tick(self.roots, ts_ms if ts_ms is not None else now_ms(), execs=execs)
        devices: dict[str, DeviceSample] = {}
        processes: dict[int, ProcessInfo] = {}
        memory: dict[tuple[int, str], ProcessMemory] = {}
        hidden: list[HiddenProcess] = []
        exited: list[ExitedProcess] = []
        events: list[DeviceEvent] = []
        cgroups: list[ProcessCgroup] = []
        runs: list[CollectorRun] = []
        untracked: Untracked | None = None
        for guard in self.guards:
            reading, run = guard.run(tick)
            runs.append(run)
            for device in reading.devices:
                devices[device.device_id] = fill(devices.get(device.device_id), device)
            for info in reading.processes:
                processes.setdefault(info.pid, info)
            for row in reading.memory:
                key = (row.pid, row.device_id)
                memory[key] = fill(memory.get(key), row)
            hidden.extend(reading.hidden)
            exited.extend(reading.exited)
            events.extend(reading.events)
            cgroups.extend(reading.cgroups)
            untracked = reading.untracked or untracked
            tick.gpu_pids.update(m.pid for m in reading.memory if m.device_id != "host")
        snap = Snapshot(
            ts_ms=tick.now_ms,
            devices=tuple(devices.values()),
            processes=tuple(processes.values()),
            memory=tuple(memory.values()),
            hidden=tuple(hidden),
            exited=tuple(exited),
            runs=tuple(runs),
            events=tuple(events),
            cgroups=tuple(cgroups),
            cpu_features=self.cpu_features,
            untracked=untracked,
        )
        return dataclasses.replace(snap, time_to_oom=self.clock.tick(snap))

    def close(self) -> None:
        for guard in self.guards:
            guard.close()


T = TypeVar("T", DeviceSample, ProcessMemory)


def fill(first: T | None, later: T) -> T:
    """``first`` with its unknown (None) fields taken from ``later``; see the merge rule."""
    if first is None:
        return later
    gaps = {
        f.name: value
        for f in dataclasses.fields(first)
        if getattr(first, f.name) is None and (value := getattr(later, f.name)) is not None
    }
    return dataclasses.replace(first, **gaps) if gaps else first
