"""Prometheus metrics built from the daemon's latest snapshot at scrape time.

A custom collector on its own :class:`CollectorRegistry` (no module-level metrics; the
daemon's own ``process_*`` from prometheus-client's ProcessCollector beside it): every
scrape re-reads the latest :class:`Snapshot` and keeps nothing, so the series of a
process that exited vanish on the next scrape. Values are gauges unless ``_total``; sizes
are bytes, durations seconds, timestamps epoch seconds. A value the collectors did not
know (``None``) is left out, never exported as 0. :func:`encode` answers in
prometheus-client's text format, OpenMetrics when ``Accept`` asks, gzip when allowed.
docs/metrics-changes.md lists the renames.

``pid`` labels are bounded (:func:`labelled_pids`): only servers and GPU holders, once
``PID_LABEL_MIN_AGE_S`` old, at most ``MAX_PID_SERIES`` per scrape; the rest are summed
in ``vramscope_unlabelled_process_memory_bytes``.

Metrics and labels (``D`` = ``device,name,device_type,gpu,UUID,modelName``, see
:func:`device_labels`):

- ``vramscope_build_info{version,python}``: 1;
- ``vramscope_device_memory_total_bytes{D}``: what the device can address
  (``device_type`` = ``dedicated`` / ``unified`` / ``host``; ``device`` = the device id,
  e.g. ``nvml:GPU-...``, ``drm:0000:c3:00.0``, ``host``; ``gpu`` / ``UUID`` /
  ``modelName`` as dcgm-exporter names them);
- ``vramscope_device_memory_used_bytes{D}``;
- ``vramscope_device_memory_free_bytes{D}``;
- ``vramscope_device_memory_gtt_used_bytes{D}``: GTT in use (AMD; for an
  APU part of ``used``, never to be added to it);
- ``vramscope_device_temperature_celsius{D}``,
  ``vramscope_device_power_watts{D}``,
  ``vramscope_device_memory_clock_hertz{D}`` (MHz x 1e6; the clock as the
  driver counts it: NVML / amdsmi / amdgpu ``pp_dpm_mclk``, GDDR6 at half the data rate on
  AMD) and ``vramscope_device_utilization_ratio{D}`` (0..1): what NVML /
  amdsmi / DRM sysfs report for a GPU; absent when the device does not report it;
- ``vramscope_host_memory_available_bytes``: MemAvailable of the host;
- ``vramscope_process_memory_bytes{pid,comm,engine,model,device,memory_kind}``: one
  tracked process's memory on one device, ``memory_kind`` = ``vram`` / ``gtt`` (GPU rows) or
  ``rss_anon`` / ``rss_file`` (the ``host`` row). ``model`` is the model file's name
  (``-m``, no directory) or the engine's model id (a llama-server router's child: its
  model id, the ``--alias`` the router set), ``""`` when none; the command line is
  never a label. Only tracked processes: every inference server and every process a GPU
  collector saw holding memory, whatever ``[collectors] max_tracked`` says; the cap bounds
  the top-N host-memory list only;
- ``vramscope_unlabelled_processes`` and
  ``vramscope_unlabelled_process_memory_bytes{device,memory_kind}``: the tracked processes
  with no ``pid`` series this scrape, and what they hold summed;
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
  daemon started (one seen on a single tick included, which the database keeps only as
  ``meta.short_lived_processes`` unless its exit alerts), by exit class (monitor/exits.py)
  and the model the process served (its file's base name or model id, at most 64
  characters; ``""`` for none). Every
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
- ``vramscope_db_dropped_ticks_total``: a counter, ticks dropped since the start because
  the backlog was full;
- ``vramscope_db_integrity_ok``: 1 when the last ``SQLite quick_check`` of the database
  passed (at the start, then every ``[daemon] integrity_check_s`` and after any
  SQLITE_CORRUPT), 0 when it failed: the next start moves the file aside;
- ``vramscope_db_integrity_checked_timestamp_seconds``: when that check ran.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import logging
import platform
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import (
    CONTENT_TYPE_LATEST,
    CONTENT_TYPE_PLAIN_0_0_4,
    choose_encoder,
    generate_latest,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from collectors.base import ProcessInfo, Snapshot
from monitor.analysis.measured import measure
from monitor.servers.label import model_label
from monitor.servers.recognise import helper_parents

log = logging.getLogger(__name__)

__all__ = [
    "CONTENT_TYPE_LATEST",
    "Assessments",
    "Counts",
    "Estimates",
    "Growth",
    "SnapshotCollector",
    "build_registry",
    "encode",
    "ceilings_from_assessments",
    "estimates_from_assessments",
    "model_label",
    "render",
]

Estimates = Callable[[], dict[int, dict[str, int]]]
Assessments = Callable[[], Mapping[tuple[int, int], Any]]  # (pid, start_ticks) -> Assessment
Counts = Callable[[], Any]  # () -> monitor.daemon.counters.CountTotals | None
Growth = Callable[[], Mapping[int, Mapping[str, int]]]  # pid -> cause -> bytes
_DEVICE_LABELS = ["device", "name", "device_type", "gpu", "UUID", "modelName"]
_PROCESS_KINDS = (
    ("vram", "vram_bytes"),
    ("gtt", "gtt_bytes"),
    ("rss_anon", "rss_anon_bytes"),
    ("rss_file", "rss_file_bytes"),
)
_MAX_LABEL = 200
MAX_PID_SERIES = 256
"""At most this many processes get series with a ``pid`` label per scrape (the largest
first); the rest are summed in ``vramscope_unlabelled_process_memory_bytes``."""
PID_LABEL_MIN_AGE_S = 30.0
"""A process gets ``pid`` series once it has run this long (``ProcessInfo.started_at_ms``;
unknown start: at once): a launch that ends within seconds makes no series of its own."""
GZIP_MIN_BYTES = 1024  # smaller answers go out uncompressed even when gzip is accepted


def _label(value: object) -> str:
    text = "" if value is None else str(value)
    return text[:_MAX_LABEL]


def _model(p: ProcessInfo, every: Mapping[int, ProcessInfo]) -> str:
    if not (p.engine or p.argv):
        return ""
    parent = every.get(p.ppid) if p.ppid is not None else None  # a router's child: its
    return model_label(p.argv, parent_argv=parent.argv if parent else None)  # model id


def _version() -> str:
    try:
        return importlib.metadata.version("vramscope")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def labelled_pids(
    snap: Snapshot, infos: Mapping[int, ProcessInfo], min_age_s: float = PID_LABEL_MIN_AGE_S
) -> set[int]:
    """The tracked processes whose series carry a ``pid`` label this scrape: every one but
    those tracked only for the top-N host-memory list (``reasons == ("top",)``: any busy
    process can enter it) and those younger than ``min_age_s`` at the snapshot
    (``[http] pid_series_after_s``, default ``PID_LABEL_MIN_AGE_S``);
    at most ``MAX_PID_SERIES``, the most memory first (so the pid label's series count
    stays bounded however many processes come and go)."""
    held: dict[int, int] = {}
    for m in snap.memory:
        for _, field in _PROCESS_KINDS:
            held[m.pid] = held.get(m.pid, 0) + (getattr(m, field) or 0)
    chosen = [
        pid
        for pid, p in infos.items()
        if not (p.reasons and set(p.reasons) <= {"top"})
        and (p.started_at_ms is None or snap.ts_ms - p.started_at_ms >= min_age_s * 1000)
    ]
    chosen.sort(key=lambda pid: (-held.get(pid, 0), pid))
    return set(chosen[:MAX_PID_SERIES])


def device_labels(snap: Snapshot) -> dict[str, list[str]]:
    """device id -> the values of ``_DEVICE_LABELS``: ``device_type`` is the memory kind
    of the device (``dedicated`` / ``unified`` / ``host``); ``gpu``, ``UUID`` and
    ``modelName`` are dcgm-exporter's labels, so dashboards built on it join on them:
    ``gpu`` is NVML's index (the NVML collector samples its devices in index order) and
    ``UUID`` NVML's ``GPU-...`` (both ``""`` for a device NVML does not list);
    ``modelName`` is the device's name (``""`` for host memory)."""
    out: dict[str, list[str]] = {}
    nvml_index = 0
    for d in snap.devices:
        gpu = uuid = ""
        if d.collector == "nvml":
            gpu = str(nvml_index)
            nvml_index += 1
            if d.device_id.startswith("nvml:GPU-"):
                uuid = d.device_id.removeprefix("nvml:")
        model = "" if d.memory_kind == "host" else _label(d.name)
        out[d.device_id] = [_label(d.device_id), _label(d.name), d.memory_kind, gpu, uuid, model]
    return out


class SnapshotCollector:
    """Builds every family from ``latest()`` when the registry is scraped; keeps nothing
    between scrapes."""

    def __init__(
        self,
        latest: Callable[[], Snapshot | None],
        estimates: Estimates | None = None,
        health: Callable[[], Any] | None = None,
        ceilings: Estimates | None = None,
        counts: Counts | None = None,
        growth: Growth | None = None,
        pid_min_age_s: float = PID_LABEL_MIN_AGE_S,
    ) -> None:
        self._latest = latest
        self._pid_min_age_s = pid_min_age_s  # [http] pid_series_after_s
        self._growth = growth
        self._estimates = estimates
        self._ceilings = ceilings
        self._health = health  # () -> monitor.store.database.WriterHealth | None
        self._counts = counts
        self._version = _version()

    def describe(self) -> list[Metric]:
        return []  # no fixed description: the families depend on the snapshot

    def collect(self) -> Iterator[Metric]:
        return iter(list(self._collect()))

    def _collect(self) -> Iterator[Metric]:
        build = GaugeMetricFamily(  # a gauge, as node_exporter's *_info: promtool reads it
            "vramscope_build_info",
            "1, labelled with the running daemon's version and Python.",
            labels=["version", "python"],
        )
        build.add_metric([self._version, platform.python_version()], 1)
        yield build
        yield from self._db_health()
        yield from self._counters()
        snap = self._latest()
        if snap is None:
            return
        yield from self._devices(snap)
        infos = {p.pid: p for p in snap.processes}
        labelled = labelled_pids(snap, infos, self._pid_min_age_s)
        yield from self._processes(snap, infos, labelled)
        yield from self._unlabelled(snap, infos, labelled)
        yield from self._untracked(snap)
        yield from self._cgroups(snap, infos, labelled)
        yield from self._time_to_oom(snap)
        yield from self._collectors(snap)
        tick = GaugeMetricFamily(
            "vramscope_last_tick_timestamp_seconds",
            "When the latest snapshot was taken (epoch seconds).",
        )
        tick.add_metric([], snap.ts_ms / 1000)
        yield tick

    def _db_health(self) -> Iterator[Metric]:
        health = self._health() if self._health is not None else None
        if health is None:
            return
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
                "vramscope_db_integrity_ok",
                None if health.integrity_ok is None else int(health.integrity_ok),
                "1 when the last SQLite quick_check of the database passed, 0 when it failed.",
            ),
            (
                "vramscope_db_integrity_checked_timestamp_seconds",
                None if health.integrity_checked_ms is None else health.integrity_checked_ms / 1000,
                "When the database's integrity was last checked.",
            ),
        ):
            if value is None:
                continue
            family = GaugeMetricFamily(name, text)
            family.add_metric([], value)
            yield family
        dropped = CounterMetricFamily(
            "vramscope_db_dropped_ticks",
            "Ticks dropped since the daemon started because the backlog was full.",
        )
        dropped.add_metric([], health.dropped_ticks)
        yield dropped

    def _unlabelled(
        self, snap: Snapshot, infos: Mapping[int, ProcessInfo], labelled: set[int]
    ) -> Iterator[Metric]:
        count = GaugeMetricFamily(
            "vramscope_unlabelled_processes",
            "Tracked processes with no pid series this scrape (top-N host list only, "
            "younger than the minimum age, or past the cap).",
        )
        memory = GaugeMetricFamily(
            "vramscope_unlabelled_process_memory_bytes",
            "Memory those processes hold, summed by device and memory kind.",
            labels=["device", "memory_kind"],
        )
        rest = {pid for pid in infos if pid not in labelled}
        count.add_metric([], len(rest))
        sums: dict[tuple[str, str], int] = {}
        for m in snap.memory:
            if m.pid not in rest:
                continue
            for kind, field in _PROCESS_KINDS:
                value = getattr(m, field)
                if value is not None:
                    key = (_label(m.device_id), kind)
                    sums[key] = sums.get(key, 0) + value
        for (device, kind), value in sorted(sums.items()):
            memory.add_metric([device, kind], value)
        yield count
        yield memory

    def _devices(self, snap: Snapshot) -> Iterator[Metric]:
        labels = device_labels(snap)
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
                    family.add_metric(labels[d.device_id], value)
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
                    family.add_metric(labels[d.device_id], value * scale)
            yield family
        available = GaugeMetricFamily(
            "vramscope_host_memory_available_bytes",
            "Host memory available for new allocations (MemAvailable).",
        )
        host = next((d for d in snap.devices if d.memory_kind == "host"), None)
        if host is not None and host.available_bytes is not None:
            available.add_metric([], host.available_bytes)
        yield available

    def _processes(
        self, snap: Snapshot, every: dict[int, ProcessInfo], labelled: set[int]
    ) -> Iterator[Metric]:
        infos = {pid: every[pid] for pid in sorted(labelled)}
        models = {pid: _model(p, every) for pid, p in infos.items()}  # this scrape's only
        memory = GaugeMetricFamily(
            "vramscope_process_memory_bytes",
            "Memory a tracked process holds on a device, by kind (vram, gtt, rss_anon, rss_file).",
            labels=["pid", "comm", "engine", "model", "device", "memory_kind"],
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
                    models[m.pid],
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
        helpers = helper_parents(every)
        for pid, p in sorted(infos.items()):
            if pid in helpers:
                continue  # counted in its server's: a sum over pids stays true
            total = measure(
                pid, snap.memory, [h for h, owner in helpers.items() if owner == pid]
            ).total_bytes
            if total is not None:
                measured.add_metric([str(pid), _label(p.comm), models[pid]], total)
        yield measured
        hidden = GaugeMetricFamily(
            "vramscope_hidden_process_memory_bytes",
            "Memory the driver reports for a process not visible here (another PID namespace).",
            labels=["pid", "device"],
        )
        known = [h for h in snap.hidden if h.used_bytes is not None and h.device_id is not None]
        known.sort(key=lambda h: (-(h.used_bytes or 0), h.pid))
        for h in known[:MAX_PID_SERIES]:  # bounded like the tracked processes' pids
            hidden.add_metric([str(h.pid), _label(h.device_id)], h.used_bytes or 0)
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
                if pid not in models:
                    continue
                for device_id, value in sorted(by_device.items()):
                    if value is not None:
                        estimate.add_metric([str(pid), models[pid], _label(device_id)], value)
            yield estimate
        yield self._reported_growth(models)

    def _reported_growth(self, models: dict[int, str]) -> Metric:
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
            if pid not in models:  # gone, or without pid series this scrape
                continue
            for cause, value in sorted(by_cause.items()):
                family.add_metric([str(pid), models[pid], _label(cause)], value)
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
    def _cgroups(
        snap: Snapshot, infos: dict[int, ProcessInfo], labelled: set[int]
    ) -> Iterator[Metric]:
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
            if pc.pid in labelled:  # the cgroup's own series whatever its servers' age
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
    pid_min_age_s: float = PID_LABEL_MIN_AGE_S,
) -> CollectorRegistry:
    """A fresh registry holding the snapshot collector and the daemon's own process
    collector (nothing registered globally)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SnapshotCollector(latest, estimates, health, ceilings, counts, growth, pid_min_age_s)
    )
    # process_*: this daemon's own CPU seconds, resident and virtual memory, open and max
    # fds and start time, read from /proc/self at each scrape (absent where there is none)
    registry.register(ProcessCollector(registry=None))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition format (``CONTENT_TYPE_LATEST``)."""
    return generate_latest(registry)


def encode(
    registry: CollectorRegistry, accept: str | None, accept_encoding: str | None
) -> tuple[bytes, str, dict[str, str]]:
    """One scrape of ``registry`` as the client asked: (body, content type, headers).

    prometheus-client's own encoders: OpenMetrics when ``Accept`` names
    ``application/openmetrics-text`` (as Prometheus sends it), else the text format 0.0.4;
    gzip when ``Accept-Encoding`` lists ``gzip`` (not refused with ``q=0``) and the body
    is at least ``GZIP_MIN_BYTES``."""
    try:
        encoder, content_type = choose_encoder((accept or "")[:1024])
    except Exception:  # a malformed version= or escaping= the library cannot parse
        encoder, content_type = generate_latest, CONTENT_TYPE_PLAIN_0_0_4
    body = encoder(registry)
    headers = {"Vary": "Accept, Accept-Encoding"}
    if len(body) >= GZIP_MIN_BYTES and _accepts_gzip(accept_encoding):
        body = gzip.compress(body, compresslevel=6, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return body, content_type, headers


def _accepts_gzip(header: str | None) -> bool:
    for part in (header or "").split(",")[:32]:
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip"):
            continue
        q = params.strip().lower().replace(" ", "")
        return q not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False
