"""NVIDIA GPUs through NVML (``pynvml`` from nvidia-ml-py): the only module importing it.

Sources and units (../shared/research/sources.md section 1):
- Device memory: ``nvmlDeviceGetMemoryInfo_v2`` (bytes; ``used`` excludes ``reserved``,
  which v1 counts as used: an idle A100 shows 912 MB "used" in v1, 7.8 MB in v2). Falls
  back to v1 when the driver lacks the v2 symbol (drivers before 510.39).
- Name, UUID, PCI bus id (``nvmlDeviceGetPciInfo_v3``), utilisation (%), temperature
  (deg C), power (mW -> W), the current memory clock (``nvmlDeviceGetClockInfo`` with
  ``NVML_CLOCK_MEM``, MHz: what ``nvidia-smi -q`` shows under Clocks/Memory), MIG mode.
  Any call that fails (NOT_SUPPORTED, NO_PERMISSION, a missing symbol,
  ``NVMLLibraryMismatchError`` which is not an ``NVMLError``) makes only
  its own field ``None``.
- Per-process memory: the compute and graphics lists, de-duplicated by pid (largest
  figure). The struct the driver writes is chosen the way nvitop does, by probing
  symbols once: ``nvmlDeviceGetRunningProcessDetailList`` (versioned, cannot be misread)
  -> ``..._v3`` with the 32-byte "legacy v3" struct when the driver also has
  ``nvmlDeviceGetConfComputeMemSizeInfo`` (R525-R535, nvitop #75/#88) -> ``..._v3``/
  ``_v2`` with 24 bytes -> the unversioned call with 16 bytes. ``usedGpuMemory`` of
  0xFFFF...FF (NVML_VALUE_NOT_AVAILABLE) is unknown (``None``), never 0.
- Unified-memory devices (GB10 / DGX Spark, Jetson): MemoryInfo is NOT_SUPPORTED (or
  total is 0). The device is ``unified`` and its pool is the host's: total = MemTotal,
  used = MemTotal - MemAvailable, free = MemAvailable from ``/proc/meminfo``. Per-process
  memory still comes from NVML; their sum is the device's ``processes_used_bytes``
  (what the GPU holds of the shared pool), and a ``unified_pool_exceeded`` warning is
  raised once when it is more than the pool.
- NVML reports host PIDs (nvidia-docker #1483). A PID that is not in our ``/proc`` is
  reported as hidden, with a hint and the bytes NVML reports for it, never matched to a
  local process by guess.
- Xid critical errors: an event set registered per device (when the device supports
  it), drained without waiting once per tick; each Xid becomes a ``xid`` event.
- No library (``NVMLError_LibraryNotFound``), no driver (``DriverNotLoaded``), or a
  driver/library mismatch: ``NoData`` with the exact reason; init is retried every 60 s.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pynvml

from collectors import _fs
from collectors.base import (
    CollectorError,
    CollectorOptions,
    DeviceSample,
    NoData,
    ProcessMemory,
    Reading,
    Roots,
    Tick,
)

if TYPE_CHECKING:
    from collectors.base_rare import DeviceEvent


class _DebugLog:
    """``log.debug`` of logging.getLogger(__name__), without importing logging (~19 M
    instructions of a one-shot command's start-up, issue 32 item 4): a debug record can
    only be shown by a handler, and only a program that imported logging has one (the
    daemon's --log-level debug), so where logging is not loaded the record goes nowhere,
    as it would with logging loaded and left unconfigured."""

    def debug(self, msg: str, *args: object) -> None:
        logging = sys.modules.get("logging")
        if logging is not None:
            logging.getLogger(__name__).debug(msg, *args)


log = _DebugLog()

NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong
RETRY_INIT_MS = 60_000
MAX_EVENTS_PER_TICK = 32
HIDDEN_HINT = (
    "NVML reports host PIDs: run vramscope on the host, or give its container "
    "the host PID namespace (docker run --pid=host)"
)
# Xids that mean the GPU or its context is gone (docs.nvidia.com/deploy/xid-errors).
CRITICAL_XIDS = frozenset({13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120})


class _ProcV1(ctypes.Structure):
    """16 bytes: the unversioned process struct of old drivers."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class _ProcV2(ctypes.Structure):
    """24 bytes: ``_v2`` and ``_v3`` (same layout)."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class _ProcLegacyV3(ctypes.Structure):
    """32 bytes: the ``_v3`` struct some R525-R535 drivers write (nvitop #75)."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
        ("usedGpuCcProtectedMemory", ctypes.c_ulonglong),
    ]


@dataclass(frozen=True, slots=True)
class ProcessApi:
    """How this driver lists processes: a symbol suffix and the struct it writes."""

    kind: str  # "detail", "v3", "v2" or "v1"
    struct: type[ctypes.Structure] | None

    def symbol(self, graphics: bool) -> str:
        base = (
            "nvmlDeviceGetGraphicsRunningProcesses"
            if graphics
            else "nvmlDeviceGetComputeRunningProcesses"
        )
        return base if self.kind == "v1" else f"{base}_{self.kind}"


def _has(name: str) -> bool:
    try:
        pynvml._nvmlGetFunctionPointer(name)
    except pynvml.NVMLError:
        return False
    return True


def choose_process_api(has: Callable[[str], bool] = _has) -> ProcessApi:
    """Probe the driver's symbols once and pick the process struct it really writes."""
    if has("nvmlDeviceGetRunningProcessDetailList"):
        return ProcessApi("detail", None)
    if has("nvmlDeviceGetComputeRunningProcesses_v3"):
        legacy = has("nvmlDeviceGetConfComputeMemSizeInfo")
        return ProcessApi("v3", _ProcLegacyV3 if legacy else _ProcV2)
    if has("nvmlDeviceGetComputeRunningProcesses_v2"):
        return ProcessApi("v2", _ProcV2)
    return ProcessApi("v1", _ProcV1)


def normalize_bus_id(bus_id: str | None) -> str | None:
    """NVML's ``00000000:01:00.0`` -> sysfs/DRM style ``0000:01:00.0``."""
    if not bus_id:
        return None
    domain, _, rest = bus_id.strip().lower().partition(":")
    if not rest:
        return bus_id.lower()
    return f"{int(domain, 16):04x}:{rest}"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class _Device:
    index: int
    handle: Any
    device_id: str
    uuid: str
    name: str | None
    bus_id: str | None


class NvmlCollector:
    """NVIDIA devices and their processes. ``lib`` replaces the C library (tests: a fake
    installed at pynvml's function-pointer lookup, so pynvml's own ctypes code runs)."""

    name = "nvml"

    def __init__(self, roots: Roots, options: CollectorOptions, lib: Any = None) -> None:
        self.roots = roots
        self.options = options
        self._lib = lib
        self._ready = False
        self._failed_ms: int | None = None
        self._reason = ""
        self._devices: list[_Device] = []
        self._api: ProcessApi | None = None
        self._memory_v2 = False
        self._events: Any = None
        self._unknown: set[str] = set()
        self._over_pool: set[str] = set()  # unified devices warned about (unified_pool_exceeded)

    # -- lifecycle ------------------------------------------------------------------

    def _init(self, now_ms: int) -> None:
        if self._ready:
            return
        if self._failed_ms is not None and now_ms - self._failed_ms < RETRY_INIT_MS:
            raise NoData(self._reason)
        if self._lib is not None:
            pynvml.nvmlLib = self._lib
            pynvml._nvmlGetFunctionPointer_cache.clear()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self._failed_ms = now_ms
            self._reason = _init_reason(exc)
            raise NoData(self._reason) from None
        try:
            self._api = choose_process_api()
            self._memory_v2 = _has("nvmlDeviceGetMemoryInfo_v2")
            self._devices = self._enumerate()
        except pynvml.NVMLError as exc:
            self._shutdown()
            raise CollectorError(f"NVML device enumeration failed: {exc}") from None
        self._events = self._register_events()
        self._ready = True
        log.debug("nvml: %d device(s), process api %s", len(self._devices), self._api.kind)

    def _enumerate(self) -> list[_Device]:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(self._query(pynvml.nvmlDeviceGetUUID, handle)) or f"index{index}"
            pci = self._query(pynvml.nvmlDeviceGetPciInfo_v3, handle)
            bus_id = normalize_bus_id(_text(pci.busId)) if pci is not None else None
            devices.append(
                _Device(
                    index,
                    handle,
                    f"nvml:{uuid}",
                    uuid,
                    _text(self._query(pynvml.nvmlDeviceGetName, handle)),
                    bus_id,
                )
            )
        return devices

    def _register_events(self) -> Any:
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
            return None
        registered = False
        for dev in self._devices:
            supported = self._query(pynvml.nvmlDeviceGetSupportedEventTypes, dev.handle)
            if supported and supported & pynvml.nvmlEventTypeXidCriticalError:
                try:
                    pynvml.nvmlDeviceRegisterEvents(
                        dev.handle, pynvml.nvmlEventTypeXidCriticalError, event_set
                    )
                    registered = True
                except pynvml.NVMLError as exc:
                    log.debug("nvml: no Xid events for %s: %s", dev.device_id, exc)
        return event_set if registered else None

    def _shutdown(self) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
        self._ready = False

    def close(self) -> None:
        if self._ready:
            self._shutdown()

    # -- one tick -------------------------------------------------------------------

    def _query(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call; any failure of it is ``None`` (logged once per function)."""
        try:
            return fn(*args)
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
            if fn.__name__ not in self._unknown:
                self._unknown.add(fn.__name__)
                log.debug("nvml: %s unavailable: %s", fn.__name__, exc)
            return None

    def collect(self, tick: Tick) -> Reading:
        self._init(tick.now_ms)
        if not self._devices:
            raise NoData("NVML found no NVIDIA device")
        samples, memory, hidden = [], [], []
        events: list[DeviceEvent] = []
        local = tick.pids()
        meminfo: bytes | None = None
        for dev in self._devices:
            sample, unified = self._sample(dev)
            processes = self._processes(dev)
            if unified:
                if meminfo is None:
                    meminfo = _fs.try_read_bytes(self.roots.proc / "meminfo") or b""
                sample = _with_host_pool(sample, meminfo, processes)
                events += self._pool_check(sample, tick.now_ms)
            samples.append(sample)
            for pid, used in sorted(processes.items()):
                if pid not in local:
                    from collectors.base_rare import HiddenProcess  # seldom: issue 32

                    hidden.append(
                        HiddenProcess(
                            pid,
                            f"NVML pid {pid} is not visible in this PID namespace",
                            device_id=dev.device_id,
                            hint=HIDDEN_HINT,
                            used_bytes=used,
                        )
                    )
                    continue
                memory.append(ProcessMemory(pid, dev.device_id, vram_bytes=used))
        tick.gpu_pids.update(m.pid for m in memory)
        events += self._drain_events(tick.now_ms)
        return Reading(
            devices=tuple(samples), memory=tuple(memory), hidden=tuple(hidden), events=tuple(events)
        )

    def _pool_check(self, sample: DeviceSample, now_ms: int) -> list[DeviceEvent]:
        """One warning when a unified GPU's processes hold more than the whole pool (NVML's
        per-process figures and MemTotal disagree); armed again once they fit."""
        held, pool = sample.processes_used_bytes, sample.total_bytes
        if held is None or pool is None or held <= pool:
            self._over_pool.discard(sample.device_id)
            return []
        if sample.device_id in self._over_pool:
            return []
        self._over_pool.add(sample.device_id)
        from collectors.base_rare import DeviceEvent  # seldom: issue 32 item 4

        return [
            DeviceEvent(
                ts_ms=now_ms,
                device_id=sample.device_id,
                kind="unified_pool_exceeded",
                severity="warning",
                message=(
                    f"GPU processes on {sample.name or sample.device_id} hold "
                    f"{held / 2**30:.1f} GiB, more than the {pool / 2**30:.1f} GiB pool it "
                    "shares with the host (NVML per-process figures vs /proc/meminfo)"
                ),
                data={"processes_used_bytes": held, "pool_bytes": pool},
            )
        ]

    def _sample(self, dev: _Device) -> tuple[DeviceSample, bool]:
        total = used = free = reserved = None
        unified = False
        mem = None
        if self._memory_v2:
            mem = self._query(pynvml.nvmlDeviceGetMemoryInfo, dev.handle, pynvml.nvmlMemory_v2)
            if mem is not None:
                reserved = mem.reserved
        if mem is None:
            try:
                mem = pynvml.nvmlDeviceGetMemoryInfo(dev.handle)
            except pynvml.NVMLError_NotSupported:
                unified = True
            except pynvml.NVMLError:
                mem = None
        if mem is not None:
            if mem.total == 0:
                unified, reserved = True, None
            else:
                total, used, free = mem.total, mem.used, mem.free
        util = self._query(pynvml.nvmlDeviceGetUtilizationRates, dev.handle)
        temp = self._query(pynvml.nvmlDeviceGetTemperature, dev.handle, pynvml.NVML_TEMPERATURE_GPU)
        power_mw = self._query(pynvml.nvmlDeviceGetPowerUsage, dev.handle)
        mem_clock = self._query(pynvml.nvmlDeviceGetClockInfo, dev.handle, pynvml.NVML_CLOCK_MEM)
        mig = self._query(pynvml.nvmlDeviceGetMigMode, dev.handle)
        sample = DeviceSample(
            device_id=dev.device_id,
            collector=self.name,
            vendor="nvidia",
            name=dev.name,
            memory_kind="unified" if unified else "dedicated",
            total_bytes=total,
            used_bytes=used,
            free_bytes=free,
            reserved_bytes=reserved,
            pci_bus_id=dev.bus_id,
            vram_total_bytes=total,
            vram_used_bytes=used,
            util_pct=float(util.gpu) if util is not None else None,
            temp_c=float(temp) if temp is not None else None,
            power_w=power_mw / 1000 if power_mw is not None else None,
            mem_clock_mhz=float(mem_clock) if mem_clock else None,  # 0 MHz: no reading
            mig_enabled=bool(mig[0]) if mig is not None else None,
        )
        return sample, unified

    def _processes(self, dev: _Device) -> dict[int, int | None]:
        """pid -> bytes (None: unknown) over the compute and graphics lists."""
        found: dict[int, int | None] = {}
        for graphics in (False, True):
            for pid, used in self._process_list(dev, graphics):
                if pid == 0:
                    continue
                old = found.get(pid)
                found[pid] = used if old is None else max(old, used or 0)
        return found

    def _process_list(self, dev: _Device, graphics: bool) -> list[tuple[int, int | None]]:
        api = self._api
        assert api is not None
        try:
            if api.kind == "detail":
                return detail_list(dev.handle, graphics)
            assert api.struct is not None
            return _two_call_list(
                pynvml._nvmlGetFunctionPointer(api.symbol(graphics)), dev.handle, api.struct
            )
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
            key = f"processes/{api.symbol(graphics)}"
            if key not in self._unknown:
                self._unknown.add(key)
                log.debug("nvml: %s unavailable: %s", key, exc)
            return []

    def _drain_events(self, now_ms: int) -> list[DeviceEvent]:
        if self._events is None:
            return []
        by_address = {ctypes.addressof(d.handle.contents): d for d in self._devices}
        events = []
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                data = pynvml.nvmlEventSetWait_v2(self._events, 0)
            except pynvml.NVMLError_Timeout:
                break
            except pynvml.NVMLError as exc:
                log.debug("nvml: event wait failed: %s", exc)
                break
            dev = by_address.get(ctypes.addressof(data.device.contents)) if data.device else None
            device_id = dev.device_id if dev else "nvml:unknown"
            xid = int(data.eventData)
            from collectors.base_rare import DeviceEvent  # seldom: issue 32 item 4

            events.append(
                DeviceEvent(
                    ts_ms=now_ms,
                    device_id=device_id,
                    kind="xid",
                    severity="critical" if xid in CRITICAL_XIDS else "warning",
                    message=f"NVIDIA Xid {xid} on {dev.name if dev else device_id}",
                    data={
                        "xid": xid,
                        "event_type": int(data.eventType),
                        "gpu_instance_id": int(data.gpuInstanceId),
                        "compute_instance_id": int(data.computeInstanceId),
                    },
                )
            )
        return events


def detail_list(handle: Any, graphics: bool) -> list[tuple[int, int | None]]:
    """``nvmlDeviceGetRunningProcessDetailList`` read with our own loop: pynvml's wrapper
    assigns ``None`` to a ctypes field when a process's memory is NVML_VALUE_NOT_AVAILABLE,
    a TypeError that would lose the whole device (found by collectors/nvml_recorder.py's tests;
    the figure is not available for every process in containers and under MIG)."""
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetRunningProcessDetailList")
    plist = pynvml.c_nvmlProcessDetailList_t()
    plist.version = pynvml.nvmlProcessDetailList_v1
    plist.mode = pynvml.NVML_PROCESS_MODE_GRAPHICS if graphics else pynvml.NVML_PROCESS_MODE_COMPUTE
    ret = fn(handle, ctypes.byref(plist))
    if ret == pynvml.NVML_SUCCESS:
        return []
    for _ in range(3):  # processes may start between the calls
        if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)
        size = plist.numProcArrayEntries * 2 + 5
        buf = (pynvml.c_nvmlProcessDetail_v1_t * size)()
        plist.numProcArrayEntries = size
        plist.procArray = ctypes.cast(buf, ctypes.POINTER(pynvml.c_nvmlProcessDetail_v1_t))
        ret = fn(handle, ctypes.byref(plist))
        if ret == pynvml.NVML_SUCCESS:
            rows = buf[: min(plist.numProcArrayEntries, size)]
            return [
                (int(r.pid), None if r.usedGpuMemory == NOT_AVAILABLE else int(r.usedGpuMemory))
                for r in rows
            ]
    raise pynvml.NVMLError(ret)


def _two_call_list(
    fn: Any, handle: Any, struct: type[ctypes.Structure]
) -> list[tuple[int, int | None]]:
    """NVML's size-then-fill protocol with our own struct (pynvml's would guess it)."""
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == pynvml.NVML_SUCCESS:
        return []
    if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise pynvml.NVMLError(ret)
    for _ in range(3):  # processes may start between the two calls
        count = ctypes.c_uint(count.value * 2 + 5)
        buf = (struct * count.value)()
        ret = fn(handle, ctypes.byref(count), buf)
        if ret == pynvml.NVML_SUCCESS:
            rows = []
            for i in range(min(count.value, len(buf))):
                used = buf[i].usedGpuMemory
                rows.append((int(buf[i].pid), None if used == NOT_AVAILABLE else int(used)))
            return rows
        if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)
    raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)


def _with_host_pool(
    sample: DeviceSample, meminfo: bytes, processes: dict[int, int | None]
) -> DeviceSample:
    """A unified-memory GPU's pool is the host's RAM (sources.md 1.9): the same figures
    as the ``host`` device, marked ``shares_pool_with="host"``. Beside them, what the GPU
    itself holds: the sum of NVML's per-process used figures (None when none is known)."""
    fields = _fs.parse_kv(meminfo)
    total = _fs.kib_field(fields, "MemTotal")
    available = _fs.kib_field(fields, "MemAvailable")
    used = total - available if total is not None and available is not None else None
    known = [b for b in processes.values() if b is not None]
    return replace(
        sample,
        total_bytes=total,
        used_bytes=used,
        free_bytes=available,
        available_bytes=available,
        vram_total_bytes=None,
        vram_used_bytes=None,
        processes_used_bytes=sum(known) if known or not processes else None,
        shares_pool_with="host",
    )


def _init_reason(exc: Exception) -> str:
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return (
            "libnvidia-ml.so.1 not found: no NVIDIA driver installed (or the container "
            "lacks the NVIDIA runtime)"
        )
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return "the NVIDIA kernel driver is not loaded (nvidia.ko); NVML cannot start"
    if isinstance(exc, pynvml.NVMLError_LibRmVersionMismatch):
        return (
            "NVIDIA driver/library version mismatch: the driver was upgraded without "
            "reloading the kernel module; reboot or reload nvidia.ko"
        )
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return "no permission to open /dev/nvidia*: add the user to the video group"
    return f"NVML init failed: {exc}"
