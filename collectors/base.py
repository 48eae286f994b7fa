"""The types every collector shares, and the harness that runs one collector.

A collector reads one source (``/proc``, DRM sysfs + fdinfo, NVML, amdsmi) and returns a
:class:`Reading`: devices, per-process memory, process identities, processes it could not
see, and processes that exited. Values are plain integers in the unit their name ends with
(``_bytes``, ``_ms``, ``_pct``, ``_c``, ``_w``, ``_mhz``); ``None`` means unknown, never 0.

Absent hardware raises :class:`NoData` (quiet); a real fault raises
:class:`CollectorError`. :func:`run_collector` times every run and turns any exception
into a recorded :class:`CollectorRun`, so one failing collector never stops the others.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from collectors import _fs, proctable

if TYPE_CHECKING:
    from collectors.base_rare import DeviceEvent as DeviceEvent
    from collectors.base_rare import ExitedProcess as ExitedProcess
    from collectors.base_rare import HiddenProcess as HiddenProcess
    from collectors.base_rare import OomForecast as OomForecast
    from collectors.base_rare import ProcessCgroup as ProcessCgroup

# The parts of a tick that a one-shot command seldom has (a hidden, exited or cgroup-limited
# process, a device event, a pool filling up) are built in collectors/base_rare.py, imported
# when first named: ``vramscope status`` builds no class it does not use (issue 32 item 4;
# each frozen dataclass costs about 1 ms at import). ``collectors.base.X`` still names them.
_RARE = ("ProcessCgroup", "HiddenProcess", "ExitedProcess", "DeviceEvent", "OomForecast")


def __getattr__(name: str) -> Any:
    if name in _RARE:
        from collectors import base_rare

        return getattr(base_rare, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MemoryKind = Literal["dedicated", "unified", "host"]
RunStatus = Literal["ok", "nodata", "error"]


class NoData(Exception):
    """The hardware or interface this collector reads is absent here (not a fault)."""


class CollectorError(Exception):
    """The source exists but reading it failed: a real fault worth recording."""


@dataclass(frozen=True, slots=True)
class Roots:
    """Where ``/proc`` and ``/sys`` are; a fixture tree in tests, the real ones in use."""

    proc: Path = Path("/proc")
    sys: Path = Path("/sys")

    def __post_init__(self) -> None:
        _fs.contain(self.proc)  # a tree, not the kernel's: reads stay inside it
        _fs.contain(self.sys)


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    """Knobs shared by collectors; defaults are the zero-config behaviour.

    ``rescan_s``: how often every process is re-examined (fd scan for DRM clients, memory
    ranking for the top N); new processes are always examined on the tick they appear.
    ``pss_interval_s``: how often one tracked process's ``smaps_rollup`` is read (it walks
    the page tables: up to hundreds of ms on a 70 GB mapping, sources.md section 4.3).
    """

    top_n: int = 5
    max_tracked: int = 64  # bounds the top-N list only: servers and GPU holders always
    rescan_s: float = 10.0
    pss_interval_s: float = 60.0
    pss_per_tick: int = 1


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One memory pool at one instant: a GPU, an APU's GPU view, or the host RAM (`host`).

    ``total_bytes``/``used_bytes`` are what the device can address and has in use. For an
    APU (``memory_kind="unified"``) that is carve-out VRAM + GTT; the parts stay in their
    own fields and are never summed anywhere else.
    """

    device_id: str
    collector: str
    vendor: str
    name: str | None
    memory_kind: MemoryKind
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None = None
    reserved_bytes: int | None = None
    pci_bus_id: str | None = None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    vis_vram_total_bytes: int | None = None
    vis_vram_used_bytes: int | None = None
    gtt_total_bytes: int | None = None
    gtt_used_bytes: int | None = None
    gtt_ceiling_bytes: int | None = None
    util_pct: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    # The memory clock now (MHz), as the driver reports it: NVML nvmlDeviceGetClockInfo
    # (NVML_CLOCK_MEM), amdsmi amdsmi_get_clock_info(MEM)["clk"], amdgpu sysfs pp_dpm_mclk
    # (the level marked '*'). GDDR/HBM figures as the driver gives them, not "effective".
    mem_clock_mhz: float | None = None
    mig_enabled: bool | None = None
    # Host pool only (/proc/meminfo), see collectors/procfs.py.
    available_bytes: int | None = None
    shmem_bytes: int | None = None
    unevictable_bytes: int | None = None
    mlocked_bytes: int | None = None
    hugepages_total_bytes: int | None = None
    hugepages_free_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None
    # NVIDIA unified memory (GB10): the sum of NVML's per-process used figures (the GPU's
    # own share of the pool), and the device whose pool this one is ("host").
    processes_used_bytes: int | None = None
    shares_pool_with: str | None = None


@dataclass(frozen=True, slots=True)
class CgroupMemory:
    """The memory cgroup limit that binds a process (collectors/cgroup.py): ``path`` is the
    cgroup (as in ``/proc/PID/cgroup``) whose limit leaves the least room, with its
    ``memory.max`` / ``memory.high`` (None: unlimited; v1 has no high), its charge
    ``memory.current`` (anonymous memory and page cache), and of that charge the clean page
    cache the kernel reclaims before it OOM-kills (``reclaimable_bytes``, from memory.stat;
    None when unknown)."""

    path: str
    memory_max_bytes: int | None
    memory_high_bytes: int | None
    memory_current_bytes: int | None
    reclaimable_bytes: int | None = None

    @property
    def unreclaimable_bytes(self) -> int | None:
        """The charge the kernel cannot take back by dropping clean page cache."""
        if self.memory_current_bytes is None:
            return None
        reclaim = min(self.reclaimable_bytes or 0, self.memory_current_bytes)
        return self.memory_current_bytes - reclaim

    @property
    def room_bytes(self) -> int | None:
        """What more the cgroup may charge before the kernel OOM-kills in it: memcg
        reclaim drops clean file pages first (mm/vmscan.c), so the room is ``max -
        (current - reclaimable)``."""
        if self.memory_max_bytes is None or self.unreclaimable_bytes is None:
            return None
        return max(0, self.memory_max_bytes - self.unreclaimable_bytes)

    def room_parts(self) -> str:
        """The room said with its parts, in GiB."""
        gib = 1024**3
        if self.memory_max_bytes is None or self.memory_current_bytes is None:
            return f"cgroup {self.path}: no memory limit known"
        reclaim = min(self.reclaimable_bytes or 0, self.memory_current_bytes)
        return (
            f"cgroup {self.path}: limit {self.memory_max_bytes / gib:.2f} GiB - (charged "
            f"{self.memory_current_bytes / gib:.2f} GiB - reclaimable page cache "
            f"{reclaim / gib:.2f} GiB) = room {(self.room_bytes or 0) / gib:.2f} GiB"
        )


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """Who a process is. Identity is ``(pid, start_ticks)``: PIDs are reused.

    ``start_ticks`` is field 22 of ``/proc/PID/stat`` (clock ticks after boot);
    ``argv`` is the command line with secrets already redacted (collectors/redact.py).
    ``reasons`` says why it is tracked: ``inference``, ``gpu``, ``top``.
    ``cwd`` is the target of ``/proc/PID/cwd`` (``readlink``, never followed): relative
    paths on the command line (``-m x.gguf``) are relative to it. None when unreadable.
    """

    pid: int
    start_ticks: int
    started_at_ms: int | None
    ppid: int | None
    uid: int | None
    comm: str
    argv: tuple[str, ...]
    engine: str | None = None
    reasons: tuple[str, ...] = ()
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """One process's memory on one device. GPU rows fill vram/gtt/cpu; host rows the rss
    fields (from ``/proc/PID/status``, kB converted to bytes) and ``pss_bytes`` when
    ``smaps_rollup`` was read this tick."""

    pid: int
    device_id: str
    vram_bytes: int | None = None
    gtt_bytes: int | None = None
    cpu_bytes: int | None = None
    rss_anon_bytes: int | None = None
    rss_file_bytes: int | None = None
    rss_shmem_bytes: int | None = None
    swap_bytes: int | None = None
    hwm_bytes: int | None = None
    locked_bytes: int | None = None
    pss_bytes: int | None = None


Severity = Literal["info", "warning", "critical"]
# One value of an event's data: stored as JSON in the events table.
EventValue = int | float | str | bool | list[str] | None


@dataclass(frozen=True, slots=True)
class Untracked:
    """What tracking left out this tick: processes of the top-N host-memory list that
    ``max_tracked`` had no room for (servers and GPU holders are always tracked), and the
    resident memory they hold (``/proc/PID/statm`` at the last rescan)."""

    processes: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Reading:
    """What one collector returns for one tick."""

    devices: tuple[DeviceSample, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    memory: tuple[ProcessMemory, ...] = ()
    hidden: tuple[HiddenProcess, ...] = ()
    exited: tuple[ExitedProcess, ...] = ()
    events: tuple[DeviceEvent, ...] = ()
    cgroups: tuple[ProcessCgroup, ...] = ()
    untracked: Untracked | None = None  # the /proc collector's; None from the others


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """How one collector run went: wall and CPU time, and its outcome."""

    collector: str
    ts_ms: int
    duration_s: float
    cpu_s: float
    status: RunStatus
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything sampled in one tick, merged across collectors."""

    ts_ms: int
    devices: tuple[DeviceSample, ...]
    processes: tuple[ProcessInfo, ...]
    memory: tuple[ProcessMemory, ...]
    hidden: tuple[HiddenProcess, ...]
    exited: tuple[ExitedProcess, ...]
    runs: tuple[CollectorRun, ...]
    events: tuple[DeviceEvent, ...] = ()
    cgroups: tuple[ProcessCgroup, ...] = ()
    # the CPU features llama.cpp's CPU backend picks buffer types by (collectors/cpuinfo.py
    # LLAMA_CPU_FEATURES); None when unknown (an old state file, a database moment)
    cpu_features: tuple[str, ...] | None = None
    # pools filling steadily, with their time to OOM (a sampler that keeps ticking; a
    # one-shot sample has no rate to tell)
    time_to_oom: tuple[OomForecast, ...] = ()
    # what tracking left out (the /proc collector); None when unknown (a database moment,
    # an old state file)
    untracked: Untracked | None = None
    # llama-server router facts a status document recorded (its "router" and
    # "router_child"), as the LLAMA_ARG_* / LLAMA_SERVER_ROUTER_PORT keys they came from:
    # pid -> ((key, value), ...). A remote or recorded snapshot's reader cannot read the
    # process's environment, so it links routers with these (monitor/servers/router.py
    # snapshot_links); empty for a live sample
    router_env: tuple[tuple[int, tuple[tuple[str, str], ...]], ...] = ()


@dataclass(slots=True)
class Tick:
    """The context of one sampling tick, shared by the collectors that run in it.

    ``gpu_pids`` grows as GPU collectors run (they come first in the registry), so the
    ``/proc`` collector can track every process that holds GPU memory. The ``/proc``
    listing is read once per tick, lazily, and shared.
    """

    roots: Roots
    now_ms: int
    gpu_pids: set[int] = field(default_factory=set)
    # the pids that exec'd since the last tick, from the process-event connector
    # (collectors/proc_events.py ``take_execs``); None: not known, so the /proc collector
    # re-reads every young process's stat to spot an exec
    execs: frozenset[int] | None = None
    _pids: dict[int, int] | None = None

    def pids(self) -> dict[int, int]:
        """PID -> inode number of ``/proc/PID`` (see collectors/proctable.py)."""
        if self._pids is None:
            self._pids = proctable.list_pids(self.roots.proc)
        return self._pids


class Collector(Protocol):
    """One source. Stateful collectors keep caches between ticks; ``close`` frees them."""

    name: str

    def collect(self, tick: Tick) -> Reading: ...

    def close(self) -> None: ...


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds (UTC): the timestamp of every stored row."""
    return time.time_ns() // 1_000_000


def run_collector(collector: Collector, tick: Tick) -> tuple[Reading, CollectorRun]:
    """Run one collector, timed (wall and thread CPU); never raises."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    status: RunStatus = "ok"
    error: str | None = None
    reading = Reading()
    try:
        reading = _checked(collector.collect(tick))
    except NoData as exc:
        status, error = "nodata", str(exc) or None
    except CollectorError as exc:
        status, error = "error", str(exc) or type(exc).__name__
    except Exception as exc:  # a bug or an unexpected OS error: recorded, never fatal
        status, error = "error", f"{type(exc).__name__}: {exc}"
    run = CollectorRun(
        collector=collector.name,
        ts_ms=tick.now_ms,
        duration_s=time.perf_counter() - wall0,
        cpu_s=time.thread_time() - cpu0,
        status=status,
        error=error,
    )
    return reading, run


_READING_TYPES = {
    "devices": "DeviceSample",
    "processes": "ProcessInfo",
    "memory": "ProcessMemory",
    "hidden": "HiddenProcess",
    "exited": "ExitedProcess",
    "events": "DeviceEvent",
}  # fmt: skip (class names: the rare ones are imported only when a reading holds one)
_NUMERIC = (DeviceSample, ProcessMemory)


def _checked(reading: object) -> Reading:
    """``reading`` if it is a well-formed Reading; else TypeError (garbage never reaches the
    merge or the database, where it would cost the other collectors' rows too)."""
    if not isinstance(reading, Reading):
        raise TypeError(f"collect() returned {type(reading).__name__}, not a Reading")
    for name, kind_name in _READING_TYPES.items():
        items = getattr(reading, name)
        if not isinstance(items, tuple | list):
            raise TypeError(f"Reading.{name} is {type(items).__name__}, not a tuple")
        if not items:
            continue
        kind = globals().get(kind_name) or __getattr__(kind_name)
        for item in items:
            if type(item) is not kind:
                raise TypeError(f"Reading.{name} holds a {type(item).__name__}")
            if isinstance(item, _NUMERIC):
                for f in dataclasses.fields(item):
                    value = getattr(item, f.name)
                    if value is not None and not isinstance(value, int | float | str):
                        raise TypeError(f"{kind.__name__}.{f.name} is {type(value).__name__}")
    return reading


# A collector call that has not returned after this long is abandoned for the tick (it
# keeps running in its own thread) and skipped, with exponential backoff, until it does.
COLLECTOR_TIMEOUT_S = 2.0
FIRST_TIMEOUT_S = 10.0  # the first call may load a library (nvmlInit) or scan everything
MAX_BACKOFF_S = 300.0
# A collector whose hardware or library is absent (NoData) is asked again this often, not
# every tick: three such collectors (nvml, drm, amdsmi on a box without them) cost ~0.4
# ms of CPU a tick in thread hand-offs alone (issue 32 item 3). A device or driver that
# appears later is seen within this long.
NODATA_RETRY_S = 10.0
_T = TypeVar("_T")


class _Call(Generic[_T]):
    """One call handed to a :class:`_Worker`: its result or its exception once it returns.
    The part of concurrent.futures.Future this module uses, without that package, whose
    import loads logging (~22 M instructions of every one-shot command's start-up, issue
    32 item 4)."""

    __slots__ = ("_done", "_result", "_exc")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: _T | None = None
        self._exc: BaseException | None = None

    def set_result(self, result: _T) -> None:
        self._result = result
        self._done.set()

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float) -> _T:
        """The call's result (or its exception, raised); TimeoutError if it has not
        returned within ``timeout`` seconds, as Future.result does."""
        if not self._done.wait(timeout):
            raise TimeoutError
        if self._exc is not None:
            raise self._exc
        return self._result  # type: ignore[return-value]  # set: done, no exception


class _Worker:
    """One daemon thread that runs one collector's calls in order. A daemon thread, so a
    call that never returns cannot keep the process from exiting."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[_Call[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._loop, name=f"collector-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], _T]) -> _Call[_T]:
        future: _Call[_T] = _Call()
        self._jobs.put((future, fn))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn = job
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)


class GuardedCollector:
    """A collector run in its own worker thread with a per-call timeout.

    A call that times out is recorded as an error ("timed out after N s"); while it has
    not returned the collector is skipped (recorded with the same error), and it is tried
    again after a backoff that doubles from ``timeout_s`` up to ``MAX_BACKOFF_S``. The
    other collectors never wait for it beyond the timeout. ``timeout_s`` None or <= 0
    runs the collector inline, as :func:`run_collector` does. A collector that answered
    ``nodata`` is not called again for ``NODATA_RETRY_S``: its ticks until then repeat
    that answer (status and reason), with no work and no thread hand-off.
    """

    def __init__(
        self,
        collector: Collector,
        timeout_s: float | None = COLLECTOR_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.collector = collector
        self.name = collector.name
        self.timeout_s = timeout_s if timeout_s and timeout_s > 0 else None
        self._clock = clock
        self._worker: _Worker | None = None
        self._stuck: _Call[tuple[Reading, CollectorRun]] | None = None
        self._calls = 0
        self.timeouts = 0  # consecutive timeouts: the backoff exponent
        self.retry_at = 0.0
        self.asked = 0  # ticks not answered from a recent nodata (for tests and benches)
        self._absent: tuple[float, CollectorRun] | None = None  # (clock, its nodata run)

    def run(self, tick: Tick) -> tuple[Reading, CollectorRun]:
        """The collector's reading for ``tick``, or its last ``nodata`` answer repeated
        while that is younger than ``NODATA_RETRY_S``."""
        absent = self._absent
        if absent is not None and self._clock() - absent[0] < NODATA_RETRY_S:
            return Reading(), dataclasses.replace(
                absent[1], ts_ms=tick.now_ms, duration_s=0.0, cpu_s=0.0
            )
        reading, run = self._run(tick)
        self._absent = (self._clock(), run) if run.status == "nodata" else None
        return reading, run

    def _run(self, tick: Tick) -> tuple[Reading, CollectorRun]:
        self.asked += 1
        if self.timeout_s is None:
            return run_collector(self.collector, tick)
        if self._stuck is not None:
            if self._clock() >= self.retry_at and not self._stuck.done():
                self._back_off()  # due, but the last call is still running
            if self._clock() < self.retry_at:
                return Reading(), CollectorRun(
                    self.name,
                    tick.now_ms,
                    0.0,
                    0.0,
                    "error",
                    f"timed out after {self.timeout_s:g} s; skipped until it returns",
                )
            self._stuck = None  # the late call returned: its stale reading is dropped
        if self._worker is None:
            self._worker = _Worker(self.name)
        limit = self.timeout_s if self._calls else max(self.timeout_s, FIRST_TIMEOUT_S)
        self._calls += 1
        wall0 = time.perf_counter()
        future = self._worker.submit(lambda: run_collector(self.collector, tick))
        try:
            result = future.result(timeout=limit)
        except TimeoutError:  # what concurrent.futures.TimeoutError is since Python 3.11
            self._stuck = future
            self._back_off()
            return Reading(), CollectorRun(
                self.name,
                tick.now_ms,
                time.perf_counter() - wall0,
                0.0,
                "error",
                f"timed out after {limit:g} s",
            )
        self.timeouts = 0
        return result

    def _back_off(self) -> None:
        assert self.timeout_s is not None
        self.timeouts += 1
        delay = min(MAX_BACKOFF_S, self.timeout_s * 2 ** (self.timeouts - 1))
        self.retry_at = self._clock() + delay

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        if self._stuck is None or self._stuck.done():
            self.collector.close()
