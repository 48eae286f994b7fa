"""Live load watch: judge a new inference server on the tick it appears, before its
allocations complete, and record when its load finishes.

A process the collectors newly see with an inference engine is parsed (argv + allow-listed
``LLAMA_ARG_*`` env), estimated for the devices of this tick, and judged against the
picture of this tick with its own already-measured memory given back (it is mid-load).
``oom_predicted`` (critical) is recorded at once when it will not fit (a server in a memory
cgroup is judged against its cgroup's room); ``load_started`` always, stamped with the
first tick but written on the second (issue 32 item 2: a server gone before its second tick,
a test harness's or a refused flag's, leaves no event, as it leaves no ``processes`` row; one
that already holds GPU memory on its first tick gets it at once). ``cgroup_near_limit``
(warning) when a server's cgroup charge passes ``cgroup_near_pct`` of its ``memory.max``,
once until it falls back below. ``load_finished`` follows when its memory has been steady
for ``steady_ticks`` ticks (or after ``max_load_s``), with the load time and measured vs
estimated per device.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from collectors.base import DeviceEvent, EventValue, ProcessInfo, Snapshot
from monitor.analysis.assess_cache import EstimateCache
from monitor.analysis.measured import measure
from monitor.analysis.picture import picture_from_snapshot
from monitor.analysis.predict_verdicts import judge
from monitor.errors import VramscopeError
from monitor.estimate.model import devices_from_samples
from monitor.servers import parse_command, read_llama_env
from monitor.servers.capabilities import ESTIMATED
from monitor.servers.recognise import helper_parents
from monitor.units import GIB, gib

log = logging.getLogger(__name__)


@dataclass
class _Loading:
    started_ms: int
    estimated: dict[str, int]
    last_total: int = -1
    steady: int = 0


@dataclass
class LoadWatch:
    proc_root: Path
    margin_bytes: int = GIB // 2
    gpu_overhead_bytes: int = 300 * 1024 * 1024
    steady_ticks: int = 3
    max_load_s: float = 600.0
    swap_url: str | None = None  # llama-swap on loopback: /running is polled for "starting"
    swap_config: Path | None = None
    swap_poll_s: float = 1.0
    _swap_states: dict[str, str] = field(default_factory=dict)
    _swap_next_ms: int = 0
    _seen: set[tuple[int, int]] = field(default_factory=set)
    _loading: dict[tuple[int, int], _Loading] = field(default_factory=dict)
    _primed: bool = False
    cgroup_near_pct: float = 90.0
    _near: set[tuple[int, str]] = field(default_factory=set)
    # load_started events of last tick's new servers, written if they live to this one
    _pending: dict[tuple[int, int], DeviceEvent] = field(default_factory=dict)
    dropped_one_tick: int = 0  # load_started events not written: gone before a second tick
    # a launch estimated once however many processes run it (monitor/analysis/assess_cache.py)
    estimates: EstimateCache = field(
        default_factory=lambda: EstimateCache(errors=(ValueError, VramscopeError, OSError))
    )

    def is_loading(self, pid: int, start_ticks: int) -> bool:
        return (pid, start_ticks) in self._loading

    def observe(self, snap: Snapshot) -> list[DeviceEvent]:
        """Events for this tick. Processes present on the first tick are not 'new'."""
        events: list[DeviceEvent] = []
        current = {(p.pid, p.start_ticks): p for p in snap.processes}
        if not self._primed:
            self._seen.update(current)
            self._primed = True
            return events
        events += self._release(snap, current)
        helpers = helper_parents({p.pid: p for p in snap.processes})
        for key, info in current.items():
            if key in self._seen:
                continue
            self._seen.add(key)
            if info.engine in ESTIMATED and info.pid not in helpers:
                events += self._defer(snap, info, self._on_new(snap, info))
        events += self._progress(snap, current)
        events += self._swap(snap)
        events += self._cgroups(snap)
        self._seen &= set(current) | set(self._loading)
        return events

    def _release(
        self, snap: Snapshot, current: dict[tuple[int, int], ProcessInfo]
    ) -> list[DeviceEvent]:
        """Last tick's deferred ``load_started`` events of the servers still running, or
        gone by an exit that alerts (a crash, an OOM kill: the post-mortem's evidence; the
        store keeps such a process's row too, monitor/store/database.py)."""
        from monitor.exits import ALERT_CAUSES, classify_legacy

        crashed = {
            (g.pid, g.start_ticks)
            for g in snap.exited
            if (g.pid, g.start_ticks) in self._pending and classify_legacy(g)[0] in ALERT_CAUSES
        }
        kept = [e for key, e in self._pending.items() if key in current or key in crashed]
        self.dropped_one_tick += len(self._pending) - len(kept)
        self._pending = {}
        return kept

    def _defer(
        self, snap: Snapshot, info: ProcessInfo, events: list[DeviceEvent]
    ) -> list[DeviceEvent]:
        """``events`` less their ``load_started``, kept for the next tick, unless the
        server already holds memory on a GPU (its VRAM or GTT in this tick's samples)."""
        holds_gpu = any(
            m.pid == info.pid and m.device_id != "host" and (m.vram_bytes or m.gtt_bytes)
            for m in snap.memory
        )
        out = []
        for e in events:
            if e.kind == "load_started" and not holds_gpu:
                self._pending[(info.pid, info.start_ticks)] = e
            else:
                out.append(e)
        return out

    def _cgroups(self, snap: Snapshot) -> list[DeviceEvent]:
        """A server's memory cgroup near its limit: the kernel kills inside it next. Near
        means the charge it cannot reclaim (anonymous memory, dirty and shmem pages): clean
        page cache, an mmap'd model's included, is dropped before any kill."""
        events = []
        names = {p.pid: p.comm for p in snap.processes}
        now = set()
        for c in snap.cgroups:
            g = c.cgroup
            held = g.unreclaimable_bytes
            if not g.memory_max_bytes or held is None:
                continue
            share = 100.0 * held / g.memory_max_bytes
            if share <= self.cgroup_near_pct:
                continue
            key = (c.pid, g.path)
            now.add(key)
            if key in self._near:
                continue
            events.append(
                DeviceEvent(
                    snap.ts_ms,
                    "host",
                    "cgroup_near_limit",
                    "warning",
                    f"{names.get(c.pid, '?')}[{c.pid}]: its memory cgroup {g.path} is at "
                    f"{share:.0f}% of memory.max ({held / GIB:.2f} of "
                    f"{g.memory_max_bytes / GIB:.2f} GiB that it cannot reclaim; "
                    f"{(g.memory_current_bytes or 0) / GIB:.2f} GiB charged with page cache); the "
                    "kernel OOM-kills in it at 100%",
                    {
                        "pid": c.pid,
                        "cgroup": g.path,
                        "memory_max_bytes": g.memory_max_bytes,
                        "memory_current_bytes": g.memory_current_bytes,
                        "reclaimable_bytes": g.reclaimable_bytes,
                    },
                )
            )
            log.warning("%s", events[-1].message)
        self._near = now
        return events

    def _swap(self, snap: Snapshot) -> list[DeviceEvent]:
        """A model llama-swap reports ``starting`` is judged before its server allocates;
        only ``/running`` is read (``/upstream/...`` would load the model)."""
        if not self.swap_url or not self.swap_config or snap.ts_ms < self._swap_next_ms:
            return []
        self._swap_next_ms = snap.ts_ms + int(self.swap_poll_s * 1000)
        from monitor.analysis.predict_verdicts import freed_by
        from monitor.integrations import llamaswap

        try:
            states = llamaswap.fetch_running(self.swap_url, timeout=0.5)
            config = llamaswap.load_config(self.swap_config)
        except (OSError, ValueError, VramscopeError) as exc:
            log.debug("llama-swap watch: %s", exc)
            return []
        events: list[DeviceEvent] = []
        for model_id, state in states.items():
            before = self._swap_states.get(model_id)
            self._swap_states[model_id] = state
            if state != "starting" or before == "starting" or model_id not in config.models:
                continue
            spec = parse_command(list(config.models[model_id].cmd))
            if spec is None:
                continue
            running = [
                m
                for m, st in states.items()
                if st not in ("stopped", "shutdown", "starting") and m in config.models
            ]
            try:
                evict = llamaswap.evictions(config, running, model_id)
                devices = devices_from_samples(snap.devices, self.gpu_overhead_bytes)
                est = self.estimates.estimate(spec, devices, snap.cpu_features)
            except (ValueError, VramscopeError, OSError) as exc:
                log.debug("llama-swap watch: %s: %s", model_id, exc)
                continue
            swap_limit = next(
                (
                    c.cgroup
                    for c in snap.cgroups
                    for p in snap.processes
                    if p.pid == c.pid and p.engine == "llama-swap"
                ),
                None,
            )
            picture = picture_from_snapshot(snap, self.margin_bytes, swap_limit)
            paths = set()
            for m in evict:
                evicted_spec = parse_command(list(config.models[m].cmd))
                if evicted_spec is not None and evicted_spec.model_path:
                    paths.add(evicted_spec.model_path)
            gone = [
                u
                for pic in picture.devices.values()
                for u in pic.processes
                if any(a in paths for a in u.argv)
            ]
            for v in judge(est, picture, freed_by(gone, picture)):
                if v.verdict == "oom":
                    events.append(
                        DeviceEvent(
                            snap.ts_ms,
                            v.device_id,
                            "oom_predicted",
                            "critical",
                            f"llama-swap is starting {model_id}: it will not fit on {v.device_id}:"
                            f" needs {v.need_bytes / GIB:.1f} GiB, can get {v.room_bytes / GIB:.1f}"
                            f" GiB after unloading {', '.join(evict) or 'nothing'}",
                            {
                                "model": model_id,
                                "need_bytes": v.need_bytes,
                                "room_bytes": v.room_bytes,
                                "source": "llama-swap",
                            },
                        )
                    )
            events.append(
                DeviceEvent(
                    snap.ts_ms,
                    "host",
                    "load_started",
                    "info",
                    f"llama-swap is starting {model_id}",
                    {"model": model_id, "source": "llama-swap"},
                )
            )
        return events

    def _on_new(self, snap: Snapshot, info: ProcessInfo) -> list[DeviceEvent]:
        spec = parse_command(
            list(info.argv), read_llama_env(self.proc_root, info.pid), cwd=info.cwd
        )
        if spec is None or spec.role not in ("server", "runner"):
            return []
        devices = devices_from_samples(snap.devices, self.gpu_overhead_bytes)
        subject = f"{info.comm}[{info.pid}]"
        try:
            est = self.estimates.estimate(spec, devices, snap.cpu_features)
        except (ValueError, VramscopeError, OSError) as exc:
            return [
                DeviceEvent(
                    snap.ts_ms,
                    "host",
                    "load_started",
                    "info",
                    f"{subject} started loading; no estimate: {exc}",
                    {"pid": info.pid},
                )
            ]
        limit = next((c.cgroup for c in snap.cgroups if c.pid == info.pid), None)
        picture = picture_from_snapshot(snap, self.margin_bytes, limit)
        own = {
            m.device_id: (m.vram_bytes or 0)
            + (m.gtt_bytes or 0)
            + ((m.rss_anon_bytes or 0) if m.device_id == "host" else 0)
            for m in snap.memory
            if m.pid == info.pid
        }
        verdicts = judge(est, picture, own)
        model = Path(spec.model_path or spec.model_name or "?").name
        data: dict[str, EventValue] = {"pid": info.pid, "model": model, "engine": spec.engine}
        for device_id, need in est.by_device().items():
            data[f"estimate_{device_id}"] = need
        self._loading[(info.pid, info.start_ticks)] = _Loading(snap.ts_ms, est.by_device())
        events = [
            DeviceEvent(
                snap.ts_ms,
                verdicts[0].device_id if verdicts else "host",
                "load_started",
                "info",
                f"{subject} started loading {model}: estimate "
                + ", ".join(f"{d} {n / GIB:.1f} GiB" for d, n in sorted(est.by_device().items())),
                data,
            )
        ]
        for v in verdicts:
            if v.verdict == "oom":
                events.append(
                    DeviceEvent(
                        snap.ts_ms,
                        v.device_id,
                        "oom_predicted",
                        "critical",
                        f"{subject} loading {model} will not fit on {v.device_id}: needs "
                        f"{v.need_bytes / GIB:.1f} GiB, the device can give "
                        f"{v.room_bytes / GIB:.1f} GiB ({v.binding})",
                        {**data, "need_bytes": v.need_bytes, "room_bytes": v.room_bytes},
                    )
                )
                log.warning("OOM predicted: %s", events[-1].message)
        return events

    def _progress(
        self, snap: Snapshot, current: dict[tuple[int, int], ProcessInfo]
    ) -> list[DeviceEvent]:
        events = []
        for key, state in list(self._loading.items()):
            if key not in current:
                del self._loading[key]  # gone mid-load: the exit is recorded elsewhere
                continue
            measured: dict[str, int] = {}  # the parts of monitor/analysis/measured.py, per device
            for m in snap.memory:
                if m.pid == key[0]:
                    if m.device_id != "host" and m.vram_bytes is None and m.gtt_bytes is None:
                        continue  # listed without its memory: unknown, never 0
                    held = (m.vram_bytes or 0) + (m.gtt_bytes or 0)
                    if m.device_id == "host":
                        held = (m.rss_anon_bytes or 0) + (m.rss_file_bytes or 0)
                    measured[m.device_id] = held
            total = sum(measured.values())  # the known parts: enough to see it settle
            state.steady = (
                state.steady + 1 if total and abs(total - state.last_total) <= 0.01 * total else 0
            )
            state.last_total = total
            elapsed = (snap.ts_ms - state.started_ms) / 1000
            if state.steady >= self.steady_ticks or elapsed >= self.max_load_s:
                info = current[key]
                helpers = [
                    h
                    for h, owner in helper_parents({p.pid: p for p in snap.processes}).items()
                    if owner == key[0]
                ]
                data: dict[str, EventValue] = {
                    "pid": key[0],
                    "load_time_ms": snap.ts_ms - state.started_ms,
                }
                for device_id, held in measured.items():
                    data[f"measured_{device_id}"] = held
                for device_id, need in state.estimated.items():
                    data[f"estimate_{device_id}"] = need
                measured_text = gib(
                    measure(key[0], snap.memory, helpers).total_bytes,
                    2,
                    unknown="unknown (a GPU lists it without its memory)",
                )
                events.append(
                    DeviceEvent(
                        snap.ts_ms,
                        "host",
                        "load_finished",
                        "info",
                        f"{info.comm}[{key[0]}] finished loading in {elapsed:.1f} s: measured "
                        f"{measured_text} vs estimated {gib(sum(state.estimated.values()), 2)}",
                        data,
                    )
                )
                del self._loading[key]
        return events
