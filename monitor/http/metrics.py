"""Prometheus metrics built from the daemon's latest snapshot at scrape time.

A custom collector on its own :class:`CollectorRegistry` (no module-level metrics, no
process/platform collectors): every scrape re-reads the latest :class:`Snapshot`, so the
series of a process that exited vanish on the next scrape. All values are gauges; sizes
are bytes, durations seconds, timestamps epoch seconds. A value the collectors did not
know (``None``) is left out, never exported as 0.

Metrics and labels:

- ``vramscope_device_memory_total_bytes{device,name,kind}``: what the device can address
  (``kind`` = ``dedicated`` / ``unified`` / ``host``; ``device`` = the device id, e.g.
  ``nvml:GPU-...``, ``drm:0000:c3:00.0``, ``host``);
- ``vramscope_device_memory_used_bytes{device,name,kind}``;
- ``vramscope_device_memory_free_bytes{device,name,kind}``;
- ``vramscope_device_memory_gtt_used_bytes{device,name,kind}``: GTT in use (AMD; for an
  APU part of ``used``, never to be added to it);
- ``vramscope_device_temperature_celsius{device,name,kind}``,
  ``vramscope_device_power_watts{device,name,kind}``,
  ``vramscope_device_memory_clock_hertz{device,name,kind}`` (MHz x 1e6; the clock as the
  driver counts it: NVML / amdsmi / amdgpu ``pp_dpm_mclk``, GDDR6 at half the data rate on
  AMD) and ``vramscope_device_utilization_ratio{device,name,kind}`` (0..1): what NVML /
  amdsmi / DRM sysfs report for a GPU; absent when the device does not report it;
- ``vramscope_host_memory_available_bytes``: MemAvailable of the host;
- ``vramscope_process_memory_bytes{pid,comm,engine,model,device,kind}``: one tracked
  process's memory on one device, ``kind`` = ``vram`` / ``gtt`` (GPU rows) or
  ``rss_anon`` / ``rss_file`` (the ``host`` row). ``model`` is the model file's name
  (``-m``, no directory) or the engine's model id (a llama-server router's child: its
  model id, the ``--alias`` the router set), ``""`` when none; the command line is
  never a label. Only tracked processes: every inference server and every process a GPU
  collector saw holding memory, whatever ``[collectors] max_tracked`` says; the cap bounds
  the top-N host-memory list only;
- ``vramscope_untracked_processes`` and ``vramscope_untracked_bytes``: how many processes
  of the top-N host-memory list ``max_tracked`` left out this tick, and the resident
  memory they hold (0 and 0 when nothing is left out; absent while unknown);
- ``vramscope_process_measured_bytes{pid,comm,model}``: what a tracked process holds by
  the one definition every view uses (monitor/analysis/measured.py: VRAM+GTT on every GPU, with its
  forked helpers' GPU memory, + RssAnon + RssFile); left out when a GPU lists it without
  its memory (unknown, never 0), and for a helper (its GPU memory is in its server's).
  Its parts are ``vramscope_process_memory_bytes``;
- ``vramscope_hidden_process_memory_bytes{pid,device}``: what the driver reports a process
  we cannot see holding (NVML, a pid outside our PID namespace: run with ``--pid=host``);
  counted as attributed on the device, never as unattributed;
- ``vramscope_process_estimate_bytes{pid,model,device}``: what the estimator expects the
  server to hold on the device at load (``host`` included), from the daemon's stored
  assessment of it (monitor/daemon/assessor.py: once per launch, never at scrape time);
  absent while it is not assessed yet and when its model cannot be estimated;
- ``vramscope_process_estimate_ceiling_bytes{pid,model,device}``: the same estimate with
  what grows at run time up to its bound (a full KV cache of every slot, the compute
  buffers of the longest batch): what the server may come to hold;
- ``vramscope_process_reported_growth_bytes{pid,model,cause}``: what a llama-server's own
  log (its ``--log-file``, followed by the daemon each tick: monitor/daemon/growth_logs.py)
  says its run-time buffers hold now, ``cause`` = ``prompt_cache`` / ``checkpoints``;
  absent when the server has no log or its log has not said (unknown, never 0);
- ``vramscope_cgroup_memory_max_bytes{cgroup}``, ``vramscope_cgroup_memory_high_bytes{cgroup}``
  and ``vramscope_cgroup_memory_current_bytes{cgroup}``: the memory cgroup whose limit
  binds a tracked server (collectors/cgroup.py; ``cgroup`` is its path as in
  ``/proc/PID/cgroup``); an unlimited max/high has no series;
- ``vramscope_cgroup_memory_reclaimable_bytes{cgroup}``: of its charge, the clean page
  cache the kernel reclaims before it OOM-kills (memory.stat; absent: unknown);
- ``vramscope_time_to_oom_seconds{pool}`` and ``vramscope_pool_fill_rate_bytes_per_second{pool}``:
  for a pool filling steadily (``host``, a GPU's device id, ``cgroup /path``), the seconds
  until it reaches its limit at that rate (monitor/analysis/time_to_oom.py: the 5-minute
  slope, confirmed in each third of it, so a single load is no forecast); absent when
  nothing fills steadily;
- ``vramscope_process_cgroup_info{pid,cgroup}``: 1, linking a tracked server to that cgroup;
- ``vramscope_process_exits_total{cause,model}``: tracked processes that ended since the
  daemon started, by exit class (monitor/exits.py) and the model the process
  served (its file's base name or model id, at most 64 characters; ``""`` for none). Every
  class is present at 0 for ``model=""`` and ``model="other"`` from the start, and for a
  model from when a tracked server first serves it; at most 16 models have series of their
  own, the rest count as ``other`` (monitor/daemon/counters.py says when a model's place
  frees);
- ``vramscope_log_events_total{kind}``: kernel and engine log records since the daemon
  started (``oom_kill``, ``oomd_kill``, ``oom_invoked``, ``xid``, ``amdgpu_error``,
  ``app_oom``, ``engine_oom``); an engine log's merged event (monitor/logs/reader.py)
  counts every line it stands for;
- ``vramscope_collector_up{collector}``: 1 when the collector's last run succeeded, 0 when
  it failed; a collector whose hardware is absent here (status ``nodata``) has no series;
- ``vramscope_collector_duration_seconds{collector}``: wall time of its last run;
- ``vramscope_last_tick_timestamp_seconds``: when the latest snapshot was taken;
- ``vramscope_db_write_ok``: 1 while the daemon's writes reach the database, 0 while it
  refuses them (locked by another writer, disk full, read-only);
- ``vramscope_db_backlog_ticks``: ticks kept in memory waiting for the database;
- ``vramscope_db_dropped_ticks``: ticks dropped since the start because the backlog was
  full (a count that only grows while the daemon runs);
- ``vramscope_db_integrity_ok``: 1 when the last ``SQLite quick_check`` of the database
  passed (at the start, then every ``[daemon] integrity_check_s`` and after any
  SQLITE_CORRUPT), 0 when it failed: the next start moves the file aside;
- ``vramscope_db_integrity_checked_timestamp_seconds``: when that check ran.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from collectors.base import ProcessInfo, Snapshot
from monitor.analysis.measured import measure
from monitor.engines.label import model_label
from monitor.engines.recognise import helper_parents

log = logging.getLogger(__name__)

__all__ = [
    "CONTENT_TYPE_LATEST",
    "Assessments",
    "Counts",
    "Estimates",
    "Growth",
    "SnapshotCollector",
    "build_registry",
    "ceilings_from_assessments",
    "estimates_from_assessments",
    "model_label",
    "render",
]

Estimates = Callable[[], dict[int, dict[str, int]]]
Assessments = Callable[[], Mapping[tuple[int, int], Any]]  # (pid, start_ticks) -> Assessment
Counts = Callable[[], Any]  # () -> monitor.daemon.counters.CountTotals | None
Growth = Callable[[], Mapping[int, Mapping[str, int]]]  # pid -> cause -> bytes
_DEVICE_LABELS = ["device", "name", "kind"]
_PROCESS_KINDS = (
    ("vram", "vram_bytes"),
    ("gtt", "gtt_bytes"),
    ("rss_anon", "rss_anon_bytes"),
    ("rss_file", "rss_file_bytes"),
)
_MAX_LABEL = 200


def _label(value: object) -> str:
    text = "" if value is None else str(value)
    return text[:_MAX_LABEL]


class SnapshotCollector:
    """Builds every family from ``latest()`` when the registry is scraped."""

    def __init__(
        self,
        latest: Callable[[], Snapshot | None],
        estimates: Estimates | None = None,
        health: Callable[[], Any] | None = None,
        ceilings: Estimates | None = None,
        counts: Counts | None = None,
        growth: Growth | None = None,
    ) -> None:
        self._latest = latest
        self._growth = growth
        self._estimates = estimates
        self._ceilings = ceilings
        self._health = health  # () -> monitor.store.database.WriterHealth | None
        self._counts = counts
        # (pid, start_ticks) -> model label; pruned to the processes present at each scrape
        self._models: dict[tuple[int, int], str] = {}
        self._infos: dict[int, ProcessInfo] = {}  # the latest scrape's processes, by pid
        self._lock = threading.Lock()  # scrapes run in the server's request threads

    def describe(self) -> list[Metric]:
        return []  # no fixed description: the families depend on the snapshot

    def _model(self, p: ProcessInfo) -> str:
        key = (p.pid, p.start_ticks)
        if key not in self._models:
            parent = self._infos.get(p.ppid) if p.ppid is not None else None  # a router's child:
            self._models[key] = (  # its model id
                model_label(p.argv, parent_argv=parent.argv if parent else None)
                if p.engine or p.argv
                else ""
            )
        return self._models[key]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            return iter(list(self._collect()))

    def _collect(self) -> Iterator[Metric]:
        health = self._health() if self._health is not None else None
        if health is not None:
            for name, value, text in (
                (
                    "vramscope_db_write_ok",
                    int(health.write_ok),
                    "1 while writes reach the database, 0 while it refuses them.",
                ),
                (
                    "vramscope_db_backlog_ticks",
                    health.backlog_ticks,
                    "Ticks kept in memory waiting for the database.",
                ),
                (
                    "vramscope_db_dropped_ticks",
                    health.dropped_ticks,
                    "Ticks dropped since the start because the backlog was full.",
                ),
                (
                    "vramscope_db_integrity_ok",
                    None if health.integrity_ok is None else int(health.integrity_ok),
                    "1 when the last SQLite quick_check of the database passed, 0 when it failed.",
                ),
                (
                    "vramscope_db_integrity_checked_timestamp_seconds",
                    None
                    if health.integrity_checked_ms is None
                    else health.integrity_checked_ms / 1000,
                    "When the database's integrity was last checked.",
                ),
            ):
                if value is None:
                    continue
                family = GaugeMetricFamily(name, text)
                family.add_metric([], value)
                yield family
        yield from self._counters()
        snap = self._latest()
        if snap is None:
            return
        yield from self._devices(snap)
        infos = self._infos = {p.pid: p for p in snap.processes}
        self._models = {
            k: v
            for k, v in self._models.items()
            if (p := infos.get(k[0])) is not None and p.start_ticks == k[1]
        }
        yield from self._processes(snap, infos)
        yield from self._untracked(snap)
        yield from self._cgroups(snap, infos)
        yield from self._time_to_oom(snap)
        yield from self._collectors(snap)
        tick = GaugeMetricFamily(
            "vramscope_last_tick_timestamp_seconds",
            "When the latest snapshot was taken (epoch seconds).",
        )
        tick.add_metric([], snap.ts_ms / 1000)
        yield tick

    def _devices(self, snap: Snapshot) -> Iterator[Metric]:
        helps = {
            "total_bytes": "Memory the device can address.",
            "used_bytes": "Memory in use on the device.",
            "free_bytes": "Free memory on the device.",
            "gtt_used_bytes": "GTT (GPU-mapped system memory) in use on the device.",
        }
        for field, help_text in helps.items():
            family = GaugeMetricFamily(
                f"vramscope_device_memory_{field}", help_text, labels=_DEVICE_LABELS
            )
            for d in snap.devices:
                value = getattr(d, field)
                if value is not None:
                    family.add_metric([_label(d.device_id), _label(d.name), d.memory_kind], value)
            yield family
        for name, field, scale, help_text in (
            ("temperature_celsius", "temp_c", 1.0, "GPU temperature."),
            ("power_watts", "power_w", 1.0, "GPU power draw."),
            ("memory_clock_hertz", "mem_clock_mhz", 1e6, "GPU memory clock (driver's figure)."),
            ("utilization_ratio", "util_pct", 0.01, "GPU busy fraction (0..1)."),
        ):
            family = GaugeMetricFamily(f"vramscope_device_{name}", help_text, labels=_DEVICE_LABELS)
            for d in snap.devices:
                value = getattr(d, field)
                if value is not None:
                    labels = [_label(d.device_id), _label(d.name), d.memory_kind]
                    family.add_metric(labels, value * scale)
            yield family
        available = GaugeMetricFamily(
            "vramscope_host_memory_available_bytes",
            "Host memory available for new allocations (MemAvailable).",
        )
        host = next((d for d in snap.devices if d.memory_kind == "host"), None)
        if host is not None and host.available_bytes is not None:
            available.add_metric([], host.available_bytes)
        yield available

    def _processes(self, snap: Snapshot, infos: dict[int, ProcessInfo]) -> Iterator[Metric]:
        memory = GaugeMetricFamily(
            "vramscope_process_memory_bytes",
            "Memory a tracked process holds on a device, by kind (vram, gtt, rss_anon, rss_file).",
            labels=["pid", "comm", "engine", "model", "device", "kind"],
        )
        seen: set[tuple[str, ...]] = set()
        for m in snap.memory:
            p = infos.get(m.pid)
            if p is None:
                continue
            for kind, field in _PROCESS_KINDS:
                value = getattr(m, field)
                labels = (
                    str(m.pid),
                    _label(p.comm),
                    _label(p.engine),
                    self._model(p),
                    _label(m.device_id),
                    kind,
                )
                if value is None or labels in seen:
                    continue
                seen.add(labels)
                memory.add_metric(list(labels), value)
        yield memory
        measured = GaugeMetricFamily(
            "vramscope_process_measured_bytes",
            "What a tracked process holds: VRAM+GTT (with its helpers') + RssAnon + RssFile "
            "(absent when unknown).",
            labels=["pid", "comm", "model"],
        )
        helpers = helper_parents(infos)
        for pid, p in sorted(infos.items()):
            if pid in helpers:
                continue  # counted in its server's: a sum over pids stays true
            total = measure(
                pid, snap.memory, [h for h, owner in helpers.items() if owner == pid]
            ).total_bytes
            if total is not None:
                measured.add_metric([str(pid), _label(p.comm), self._model(p)], total)
        yield measured
        hidden = GaugeMetricFamily(
            "vramscope_hidden_process_memory_bytes",
            "Memory the driver reports for a process not visible here (another PID namespace).",
            labels=["pid", "device"],
        )
        for h in snap.hidden:
            if h.used_bytes is not None and h.device_id is not None:
                hidden.add_metric([str(h.pid), _label(h.device_id)], h.used_bytes)
        yield hidden
        for name, source, help_text in (
            (
                "vramscope_process_estimate_bytes",
                self._estimates,
                "What the estimator expects a tracked process to hold on a device at load.",
            ),
            (
                "vramscope_process_estimate_ceiling_bytes",
                self._ceilings,
                "What the estimator expects a tracked process may grow to hold on a device.",
            ),
        ):
            estimate = GaugeMetricFamily(name, help_text, labels=["pid", "model", "device"])
            for pid, by_device in sorted(self._estimate_rows(source).items()):
                p = infos.get(pid)
                if p is None:
                    continue
                for device_id, value in sorted(by_device.items()):
                    if value is not None:
                        estimate.add_metric([str(pid), self._model(p), _label(device_id)], value)
            yield estimate
        yield self._reported_growth(infos)

    def _reported_growth(self, infos: dict[int, ProcessInfo]) -> Metric:
        family = GaugeMetricFamily(
            "vramscope_process_reported_growth_bytes",
            "What a llama-server's own log says its run-time buffers hold now, by cause.",
            labels=["pid", "model", "cause"],
        )
        try:
            rows = dict(self._growth() or {}) if self._growth is not None else {}
        except Exception:  # extra, like the estimates: a failure there keeps the rest
            log.exception("the reported growth for /metrics failed")
            rows = {}
        for pid, by_cause in sorted(rows.items()):
            p = infos.get(pid)
            if p is None:
                continue
            for cause, value in sorted(by_cause.items()):
                family.add_metric([str(pid), self._model(p), _label(cause)], value)
        return family

    @staticmethod
    def _untracked(snap: Snapshot) -> Iterator[Metric]:
        processes = GaugeMetricFamily(
            "vramscope_untracked_processes",
            "Processes of the top-N host-memory list that max_tracked left out this tick.",
        )
        held = GaugeMetricFamily(
            "vramscope_untracked_bytes",
            "Resident memory of the processes max_tracked left out this tick.",
        )
        if snap.untracked is not None:
            processes.add_metric([], snap.untracked.processes)
            held.add_metric([], snap.untracked.bytes)
        yield processes
        yield held

    @staticmethod
    def _estimate_rows(source: Estimates | None) -> dict[int, dict[str, Any]]:
        if source is None:
            return {}
        try:
            return dict(source() or {})
        except Exception:  # the estimates are extra: a failure there keeps the rest
            log.exception("the estimates for /metrics failed")
            return {}

    def _counters(self) -> Iterator[Metric]:
        totals = self._counts() if self._counts is not None else None
        if totals is None:
            return
        exits = CounterMetricFamily(
            "vramscope_process_exits",
            "Tracked processes that ended since the daemon started, by exit class and model.",
            labels=["cause", "model"],
        )
        for (cause, model), n in sorted(totals.exits_by_model.items()):
            exits.add_metric([cause, model], n)
        yield exits
        events = CounterMetricFamily(
            "vramscope_log_events",
            "Kernel and engine log records since the daemon started, by kind.",
            labels=["kind"],
        )
        for kind, n in sorted(totals.log_events.items()):
            events.add_metric([kind], n)
        yield events

    @staticmethod
    def _time_to_oom(snap: Snapshot) -> Iterator[Metric]:
        seconds = GaugeMetricFamily(
            "vramscope_time_to_oom_seconds",
            "Seconds until a steadily filling pool (host, a GPU, a server's cgroup) reaches "
            "its limit at the current rate (absent: not filling steadily).",
            labels=["pool"],
        )
        rate = GaugeMetricFamily(
            "vramscope_pool_fill_rate_bytes_per_second",
            "The steady rate that forecast is made at.",
            labels=["pool"],
        )
        for f in snap.time_to_oom:
            seconds.add_metric([_label(f.pool)], f.seconds)
            rate.add_metric([_label(f.pool)], f.rate_bytes_per_s)
        yield seconds
        yield rate

    @staticmethod
    def _cgroups(snap: Snapshot, infos: dict[int, ProcessInfo]) -> Iterator[Metric]:
        families = {
            "memory_max_bytes": GaugeMetricFamily(
                "vramscope_cgroup_memory_max_bytes",
                "memory.max of the cgroup that binds a tracked server (absent: unlimited).",
                labels=["cgroup"],
            ),
            "memory_high_bytes": GaugeMetricFamily(
                "vramscope_cgroup_memory_high_bytes",
                "memory.high of that cgroup (absent: unlimited, or cgroup v1).",
                labels=["cgroup"],
            ),
            "memory_current_bytes": GaugeMetricFamily(
                "vramscope_cgroup_memory_current_bytes",
                "memory.current of that cgroup: what it is charged now.",
                labels=["cgroup"],
            ),
            "reclaimable_bytes": GaugeMetricFamily(
                "vramscope_cgroup_memory_reclaimable_bytes",
                "Of that charge, the clean page cache the kernel reclaims before an OOM kill "
                "(memory.stat file LRU less dirty and writeback).",
                labels=["cgroup"],
            ),
        }
        link = GaugeMetricFamily(
            "vramscope_process_cgroup_info",
            "1: the tracked server pid is bound by the memory cgroup named.",
            labels=["pid", "cgroup"],
        )
        seen: set[str] = set()
        for pc in sorted(snap.cgroups, key=lambda c: c.pid):
            if pc.pid not in infos:
                continue
            path = _label(pc.cgroup.path)
            link.add_metric([str(pc.pid), path], 1)
            if path in seen:
                continue
            seen.add(path)
            for field, family in families.items():
                value = getattr(pc.cgroup, field)
                if value is not None:
                    family.add_metric([path], value)
        yield from families.values()
        yield link

    @staticmethod
    def _collectors(snap: Snapshot) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "vramscope_collector_up",
            "1 when the collector's last run succeeded, 0 when it failed.",
            labels=["collector"],
        )
        duration = GaugeMetricFamily(
            "vramscope_collector_duration_seconds",
            "Wall time of the collector's last run.",
            labels=["collector"],
        )
        for run in snap.runs:
            if run.status != "nodata":
                up.add_metric([run.collector], 1 if run.status == "ok" else 0)
            duration.add_metric([run.collector], run.duration_s)
        yield up
        yield duration


def estimates_from_assessments(
    latest: Callable[[], Snapshot | None], assessments: Assessments
) -> Estimates:
    """pid -> bytes per device from the daemon's assessments (monitor/analysis/assess.py),
    for the processes of the latest tick only (a pid reused since is not the same
    process)."""

    def rows() -> dict[int, dict[str, int]]:
        snap = latest()
        if snap is None:
            return {}
        live = {(p.pid, p.start_ticks) for p in snap.processes}
        return {
            k[0]: a.by_device
            for k, a in assessments().items()
            if k in live and a.estimate is not None
        }

    return rows


def ceilings_from_assessments(
    latest: Callable[[], Snapshot | None], assessments: Assessments
) -> Estimates:
    """Like :func:`estimates_from_assessments`, with what grows at run time to its bound."""

    def rows() -> dict[int, dict[str, int]]:
        snap = latest()
        if snap is None:
            return {}
        live = {(p.pid, p.start_ticks) for p in snap.processes}
        return {
            k[0]: a.estimate.by_device(include_growth=True)
            for k, a in assessments().items()
            if k in live and a.estimate is not None
        }

    return rows


def build_registry(
    latest: Callable[[], Snapshot | None],
    estimates: Estimates | None = None,
    health: Callable[[], Any] | None = None,
    ceilings: Estimates | None = None,
    counts: Counts | None = None,
    growth: Growth | None = None,
) -> CollectorRegistry:
    """A fresh registry holding only the snapshot collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(latest, estimates, health, ceilings, counts, growth))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition format (``CONTENT_TYPE_LATEST``)."""
    return generate_latest(registry)
