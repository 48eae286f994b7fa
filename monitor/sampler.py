"""Run the enabled collectors for one tick and merge their readings into a Snapshot."""

from __future__ import annotations

from collections.abc import Iterable

from collectors.base import (
    Collector,
    CollectorOptions,
    CollectorRun,
    DeviceSample,
    ExitedProcess,
    HiddenProcess,
    ProcessInfo,
    ProcessMemory,
    Roots,
    Snapshot,
    Tick,
    now_ms,
    run_collector,
)
from collectors.registry import REGISTRY


class Sampler:
    """Owns one instance of each enabled collector (they keep caches between ticks)."""

    def __init__(
        self,
        roots: Roots,
        options: CollectorOptions | None = None,
        enabled: Iterable[str] | None = None,
    ) -> None:
        wanted = None if enabled is None else set(enabled)
        self.roots = roots
        self.collectors: list[Collector] = [
            spec.factory(roots, options or CollectorOptions())
            for spec in REGISTRY
            if (spec.default_enabled if wanted is None else spec.name in wanted)
        ]

    def sample(self, ts_ms: int | None = None) -> Snapshot:
        tick = Tick(self.roots, ts_ms if ts_ms is not None else now_ms())
        devices: list[DeviceSample] = []
        processes: dict[int, ProcessInfo] = {}
        memory: list[ProcessMemory] = []
        hidden: list[HiddenProcess] = []
        exited: list[ExitedProcess] = []
        runs: list[CollectorRun] = []
        for collector in self.collectors:
            reading, run = run_collector(collector, tick)
            runs.append(run)
            devices.extend(reading.devices)
            for info in reading.processes:
                processes.setdefault(info.pid, info)
            memory.extend(reading.memory)
            hidden.extend(reading.hidden)
            exited.extend(reading.exited)
            tick.gpu_pids.update(m.pid for m in reading.memory if m.device_id != "host")
        return Snapshot(
            ts_ms=tick.now_ms,
            devices=tuple(devices),
            processes=tuple(processes.values()),
            memory=tuple(memory),
            hidden=tuple(hidden),
            exited=tuple(exited),
            runs=tuple(runs),
        )

    def close(self) -> None:
        for collector in self.collectors:
            collector.close()
