"""amdsmi collector: AMD GPUs through ROCm's amd-smi library (optional; PyPI ``amdsmi``).

This is the only module that imports ``amdsmi``. The package is an optional extra: it is a
pure-Python ctypes wrapper that needs ROCm's ``libamd_smi.so`` (``amd-smi-lib``).

Import (sources.md 2.2): without ``libamd_smi.so``, ``import amdsmi`` *prints* two lines to
stdout (``amdsmi_wrapper.py`` 7.0.2 l.207-208, plain ``print``) and then raises
``KeyError: 'libamd_smi.so'`` (l.211). :func:`load_amdsmi` therefore imports it lazily, inside
a function, with ``sys.stdout``/``sys.stderr`` redirected *and* file descriptors 1 and 2
pointed at ``/dev/null`` (a daemon writing JSON to stdout must not get stray lines), catches
``Exception``, and turns the failure into :class:`NoData` with the reason. The failure is
cached: the import is tried once per collector. ``amdsmi_init`` failures (e.g. status 34
``AMDSMI_STATUS_DRIVER_NOT_LOADED``) are :class:`NoData` too, retried at most every
:data:`INIT_RETRY_MS` of tick time. Processor handles are enumerated once per init.

Sources and units (``amdsmi_interface.py`` of PyPI amdsmi 7.0.2, line numbers of that file;
``src/amd_smi/amd_smi.cc``, ``src/amd_smi/fdinfo.cc`` of ROCm/amdsmi):

* ``amdsmi_get_processor_handles()`` (l.969); ``amdsmi_get_gpu_device_bdf(h)`` (l.1924) ->
  ``"0000:c5:00.0"``, lower-case hex, 4-digit domain (``_format_bdf`` l.660).
* ``amdsmi_get_gpu_asic_info(h)`` (l.2027): ``market_name`` (``"N/A"`` when empty),
  ``device_id`` (hex string ``"0x1586"``).
* ``amdsmi_get_gpu_memory_total/usage(h, AmdSmiMemoryType.VRAM | VIS_VRAM | GTT)``
  (l.4205, l.4253): int **bytes**; rocm_smi reads sysfs ``mem_info_*`` for them, i.e. the
  very numbers the DRM collector reads.
* ``amdsmi_get_gpu_activity(h)`` (l.2321): ``gfx_activity`` **percent**; 0xFFFF -> "N/A".
* ``amdsmi_get_temp_metric(h, AmdSmiTemperatureType.EDGE, AmdSmiTemperatureMetric.CURRENT)``
  (l.4361), HOTSPOT when EDGE fails (MI300 has no edge sensor): whole **degrees C**. The
  README says millidegrees, but ``amd_smi.cc`` does ``*temperature /= 1000`` after
  ``rsmi_dev_temp_metric_get``; the CLI prints the value as degrees.
* ``amdsmi_get_power_info(h)`` (l.2887): **watts**; ``socket_power`` (7.x, "matches current
  or average"), else ``average_socket_power`` (Navi, MI200 and older; what hwmon
  ``power1_average`` is), else ``current_socket_power`` (MI300+). 0xFFFF -> "N/A" (ROCm RDC
  treats 65535 the same way). Older releases lack ``socket_power``/``current_socket_power``.
* ``amdsmi_get_clock_info(h, AmdSmiClkType.MEM)``: the memory clock, **MHz**, ``clk``
  (``amdsmi_clk_info_t``: clk, min_clk, max_clk, clk_locked, clk_deep_sleep; UINT32_MAX ->
  "N/A"), ``cur_clk`` in releases before 6.1 (ROCm 5.7 ``amdsmi_clk_info_t`` had cur_clk,
  min_clk, max_clk). The clock as amdgpu counts it (pp_dpm_mclk's figure).
* ``amdsmi_get_gpu_process_list(h)`` (l.2817): 6.2+ returns dicts ``{"name", "pid", "mem",
  "engine_usage": {"gfx", "enc"}, "memory_usage": {"gtt_mem", "cpu_mem", "vram_mem"},
  "cu_occupancy"}`` in **bytes**; older releases return process handles, each resolved with
  ``amdsmi_get_gpu_process_info(h, p)`` into the same dict (both are supported).

Every call is guarded on its own: an unsupported or failing call (``AmdSmiLibraryException``
``AMDSMI_STATUS_NOT_SUPPORTED`` ...) leaves only its fields ``None``; ``"N/A"`` and the
0xFFFF / 2**64-1 sentinels are ``None``, never 0. A handle whose BDF cannot be read is
skipped (without a ``drm:<bdf>`` id its figures could not be merged and would be shown twice).

Device ids and the merge with DRM: a GPU is ``device_id = "drm:<BDF>"``, exactly the DRM
collector's id, so the sampler merges the two field by field (monitor/daemon/sampler.py). DRM runs
first in the registry and wins every field both know (memory totals come from the same sysfs
files anyway); amdsmi only fills fields DRM left ``None``: temperature, power, utilisation,
visible VRAM, the memory clock, a name, and process rows DRM did not produce. Per process and
memory kind there is one figure, never a sum of the two collectors.

APU: the same decision as the DRM collector (collectors/drm.py: KFD topology, then the PCI
device id table, then hwmon ``in1_input``), taken from DRM's discovery of the same sysfs
tree; when sysfs does not show the card, amdsmi's own hint: ``asic_info["device_id"]`` in
:data:`collectors.drm.AMD_APU_DEVICE_IDS`. An APU is ``unified`` with total/used = VRAM
(carve-out) + GTT, as in drm.py; a dGPU is ``dedicated`` with total/used = VRAM.

Processes: amdsmi builds its list from ``/proc/*/fdinfo`` itself (fdinfo.cc, "gpuvsmi"): it
sums ``drm-memory-{vram,gtt,cpu}`` over *every* fd of the pid without de-duplicating by
``drm-client-id`` (a dup'ed fd counts twice), lists a fork()ed child that inherited the fd
as well as its parent, and in recent releases multiplies the KiB values by 1000, not 1024.
So its per-process figures are never better than DRM's, only a fallback:

* one row per (pid, device): a pid listed twice for one device keeps the entry with the
  largest total (the whole entry, so its fields stay consistent); the first on a tie;
* rows whose memory is all 0 are dropped (DRM does the same);
* when DRM already attributed memory to any pid this device lists (``tick.gpu_pids`` as it
  was when this collector started: DRM runs first), DRM covers the device, so amdsmi keeps
  only the pids DRM attributed (they merge, DRM's figures win) and drops the others: those
  are sharers of a DRM client that DRM counted once, at its lowest pid, and a row of their
  own would count that memory twice. Without DRM all listed pids are emitted. (A pid that
  some other collector, e.g. NVML, put in ``tick.gpu_pids`` also counts as "DRM covers it":
  a process on both an NVIDIA and an AMD GPU with DRM off is the rare case this misjudges.)

Cost: the process list walks every fd of every process for every GPU on each call. It is
called every tick and timed (``process_list_s``); when one call takes more than
:data:`SLOW_PROCESS_LIST_S`, that device's list is next read ``options.rescan_s`` later, and
the ticks in between carry no amdsmi process rows for it (DRM's rows stand).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from collectors import drm
from collectors.base import (
    CollectorError,
    CollectorOptions,
    DeviceSample,
    MemoryKind,
    NoData,
    ProcessMemory,
    Reading,
    Roots,
    Tick,
)
from collectors.probes import NOT_INSTALLED

INIT_RETRY_MS = 60_000  # amdsmi_init is retried at most this often (tick time)
SLOW_PROCESS_LIST_S = 0.05  # a process list call slower than this is backed off
_U16_NA = 0xFFFF  # amdsmi's "not available" for 16-bit power/activity fields
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

LIB_MISSING = "amdsmi: libamd_smi.so not found (install ROCm's amd-smi-lib), {detail}"
_STATUS_HINTS: dict[int, str] = {
    10: "permission denied: add the user to the 'render' and 'video' groups",
    34: "the amdgpu kernel driver is not loaded",
}


# ---------------------------------------------------------------------------------------
# Import


@contextlib.contextmanager
def _quiet_fds() -> Iterator[None]:
    """Point file descriptors 1 and 2 at /dev/null (a C library may write there directly).

    Process-wide while it lasts: output of other threads to fd 1/2 in that window is lost.
    It lasts one import.
    """
    _flush_python_streams()
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    saved: list[tuple[int, int]] = []
    try:
        for fd in (1, 2):
            try:
                saved.append((fd, os.dup(fd)))
            except OSError:  # fd closed (a daemon): nothing to protect
                continue
            os.dup2(devnull, fd)
        yield
    finally:
        _flush_python_streams()
        _flush_c_stdio()
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)


def _flush_python_streams() -> None:
    streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    for stream in {id(s): s for s in streams if s is not None}.values():
        with contextlib.suppress(Exception):
            stream.flush()


def _flush_c_stdio() -> None:
    """fflush(NULL): C stdio output buffered during the import goes to /dev/null, not later
    to the restored stdout."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def load_amdsmi() -> ModuleType:
    """``import amdsmi`` silently; :class:`NoData` with the reason when it cannot be used."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with _quiet_fds(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            import amdsmi
    except ModuleNotFoundError as exc:
        if exc.name == "amdsmi":
            raise NoData(NOT_INSTALLED) from None
        raise NoData(f"amdsmi: import failed, {describe(exc)}") from None
    except Exception as exc:  # KeyError: 'libamd_smi.so', AttributeError (symbol mismatch)
        said = _first_line(out.getvalue() + err.getvalue())
        detail = describe(exc) + (f" ({said})" if said else "")
        if "libamd_smi" in str(exc) or "libamd_smi" in said:
            raise NoData(LIB_MISSING.format(detail=detail)) from None
        raise NoData(f"amdsmi: import failed, {detail}") from None
    return amdsmi


def describe(exc: BaseException) -> str:
    """One line for an amdsmi exception: status name, number and a hint when known."""
    get_code = getattr(exc, "get_error_code", None)
    if callable(get_code):
        try:
            code = int(get_code())
        except Exception:
            code = None
        info = None
        get_info = getattr(exc, "get_error_info", None)
        if callable(get_info):
            with contextlib.suppress(Exception):
                info = str(get_info())
        text = info or " ".join(str(exc).split()) or type(exc).__name__
        if code is not None:
            text = f"{text} (status {code})"
            hint = _STATUS_HINTS.get(code)
            if hint:
                text = f"{text}: {hint}"
        return text
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


# ---------------------------------------------------------------------------------------
# Value cleaning


def _int(value: object, na: int | None = None) -> int | None:
    """An amdsmi number -> int; "N/A", other text, bools, sentinels and negatives -> None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text, 0) if text.lower().startswith("0x") else int(text)
        except ValueError:
            return None
    if isinstance(value, float):
        value = int(value)
    if not isinstance(value, int) or value < 0 or value in (_U32_MAX, _U64_MAX):
        return None
    if na is not None and value >= na:
        return None
    return value


def _text(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    return text if text and text != "N/A" else None


def power_watts(info: object) -> float | None:
    """``amdsmi_get_power_info`` dict -> watts: socket, else average, else current."""
    if not isinstance(info, dict):
        return None
    for key in ("socket_power", "average_socket_power", "current_socket_power"):
        watts = _int(info.get(key), na=_U16_NA)
        if watts is not None:
            return float(watts)
    return None


def clock_mhz(info: object) -> float | None:
    """``amdsmi_get_clock_info`` dict -> the current clock in MHz: ``clk`` (6.1+), else
    ``cur_clk`` (older releases); "N/A", a sentinel or 0 is unknown."""
    if not isinstance(info, dict):
        return None
    for key in ("clk", "cur_clk"):
        mhz = _int(info.get(key))
        if mhz:
            return float(mhz)
    return None


@dataclass(frozen=True, slots=True)
class _Entry:
    pid: int
    vram: int | None
    gtt: int | None
    cpu: int | None

    def total(self) -> int:
        return sum(v for v in (self.vram, self.gtt, self.cpu) if v)


def parse_process(info: object) -> _Entry | None:
    """One process-list entry (6.2+ dict, or an older ``process_info`` dict) -> bytes."""
    if not isinstance(info, dict):
        return None
    pid = _int(info.get("pid"))
    if not pid:
        return None
    usage = info.get("memory_usage")
    usage = usage if isinstance(usage, dict) else {}
    return _Entry(
        pid, _int(usage.get("vram_mem")), _int(usage.get("gtt_mem")), _int(usage.get("cpu_mem"))
    )


def dedupe_entries(entries: list[_Entry]) -> list[_Entry]:
    """One entry per pid: the one with the largest total, the first on a tie; 0s dropped."""
    best: dict[int, _Entry] = {}
    for entry in entries:
        kept = best.get(entry.pid)
        if kept is None or entry.total() > kept.total():
            best[entry.pid] = entry
    return [e for _, e in sorted(best.items()) if e.total() > 0]


# ---------------------------------------------------------------------------------------
# Collector


@dataclass(frozen=True, slots=True)
class _Gpu:
    """What does not change while amdsmi stays initialised about one GPU."""

    handle: object
    device_id: str
    bdf: str
    name: str | None
    memory_kind: MemoryKind


class AmdsmiCollector:
    """AMD GPU totals, sensors and per-process memory from amdsmi (merged with DRM's)."""

    name = "amdsmi"

    def __init__(self, roots: Roots, options: CollectorOptions, lib: object | None = None) -> None:
        self.roots = roots
        self.options = options
        self._lib: Any = lib
        self._load_error: str | None = None
        self._initialised = False
        self._start_error: Exception | None = None
        self._start_failed_ms: int | None = None
        self._gpus: list[_Gpu] = []
        self._plist_next_ms: dict[str, int] = {}
        self._clock: Callable[[], float] = time.perf_counter
        self.process_list_s: dict[str, float] = {}  # device_id -> last call's wall time
        self.errors: dict[str, str] = {}  # amdsmi function -> its last failure

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        if self._initialised and self._lib is not None:
            with contextlib.suppress(Exception):
                self._lib.amdsmi_shut_down()
        self._initialised = False
        self._gpus = []
        self._plist_next_ms.clear()

    def _module(self) -> Any:
        if self._lib is None:
            if self._load_error is not None:
                raise NoData(self._load_error)
            try:
                self._lib = load_amdsmi()
            except NoData as exc:
                self._load_error = str(exc)
                raise
        return self._lib

    def _start(self, lib: Any, now: int) -> None:
        """``amdsmi_init`` and the GPU list; a failure is cached for INIT_RETRY_MS."""
        if self._initialised:
            return
        if (
            self._start_error is not None
            and self._start_failed_ms is not None
            and now - self._start_failed_ms < INIT_RETRY_MS
        ):
            raise type(self._start_error)(str(self._start_error))
        try:
            self._init(lib)
            self._initialised = True
            self._gpus = self._discover(lib)
            if not self._gpus:
                raise NoData("amdsmi: no AMD GPU found (amdsmi_get_processor_handles is empty)")
        except (NoData, CollectorError) as exc:
            self.close()
            self._start_error, self._start_failed_ms = exc, now
            raise
        self._start_error = self._start_failed_ms = None

    def _init(self, lib: Any) -> None:
        try:
            flags = getattr(lib, "AmdSmiInitFlags", None)
            if flags is not None:
                lib.amdsmi_init(flags.INIT_AMD_GPUS)
            else:
                lib.amdsmi_init()
        except Exception as exc:
            raise NoData(f"amdsmi: amdsmi_init failed: {describe(exc)}") from None

    def _discover(self, lib: Any) -> list[_Gpu]:
        try:
            handles = list(lib.amdsmi_get_processor_handles())
        except Exception as exc:
            raise CollectorError(
                f"amdsmi: amdsmi_get_processor_handles failed: {describe(exc)}"
            ) from None
        drm_kinds = {
            d.pci_slot: d.memory_kind
            for d in drm._discover(self.roots)
            if d.driver == "amdgpu" and d.pci_slot
        }
        gpus: dict[str, _Gpu] = {}
        for handle in handles:
            bdf = _text(self._call(lib, "amdsmi_get_gpu_device_bdf", handle))
            if bdf is None:
                continue
            bdf = bdf.lower()
            device_id = f"drm:{bdf}"
            if device_id in gpus:  # the first handle of a BDF speaks for it
                continue
            asic = self._call(lib, "amdsmi_get_gpu_asic_info", handle)
            asic = asic if isinstance(asic, dict) else {}
            pci_device = _int(asic.get("device_id"))
            kind: MemoryKind
            if bdf in drm_kinds:
                kind = drm_kinds[bdf]
            else:
                kind = "unified" if pci_device in drm.AMD_APU_DEVICE_IDS else "dedicated"
            name = _text(asic.get("market_name"))
            if name is not None and name.lower().startswith("0x"):
                name = None  # libdrm had no marketing name: amdsmi put the device id there
            if name is None and pci_device is not None:
                pci_id = f"1002:{pci_device:04x}"
                name = drm._apu_name(pci_id) or f"AMD GPU {pci_id}"
            gpus[device_id] = _Gpu(handle, device_id, bdf, name, kind)
        return list(gpus.values())

    # -- one tick -------------------------------------------------------------------

    def collect(self, tick: Tick) -> Reading:
        lib = self._module()
        self._start(lib, tick.now_ms)
        drm_pids = frozenset(tick.gpu_pids)  # before this collector adds its own
        samples = []
        memory: list[ProcessMemory] = []
        for gpu in self._gpus:
            samples.append(self._sample(lib, gpu))
            memory.extend(self._processes(lib, gpu, tick.now_ms, drm_pids))
        tick.gpu_pids.update(m.pid for m in memory)
        return Reading(devices=tuple(samples), memory=tuple(memory))

    def _call(self, lib: Any, function: str, *args: object) -> Any:
        """One guarded amdsmi call: its result, or None (the failure kept in ``errors``)."""
        func = getattr(lib, function, None)
        if func is None:
            return None
        try:
            return func(*args)
        except Exception as exc:
            self.errors[function] = describe(exc)
            return None

    def _sample(self, lib: Any, gpu: _Gpu) -> DeviceSample:
        h = gpu.handle
        vram_total = vram_used = vis_total = vis_used = gtt_total = gtt_used = None
        kinds = getattr(lib, "AmdSmiMemoryType", None)
        if kinds is not None:
            total_of = "amdsmi_get_gpu_memory_total"
            used_of = "amdsmi_get_gpu_memory_usage"
            vram_total = _int(self._call(lib, total_of, h, kinds.VRAM))
            vram_used = _int(self._call(lib, used_of, h, kinds.VRAM))
            vis_total = _int(self._call(lib, total_of, h, kinds.VIS_VRAM))
            vis_used = _int(self._call(lib, used_of, h, kinds.VIS_VRAM))
            gtt_total = _int(self._call(lib, total_of, h, kinds.GTT))
            gtt_used = _int(self._call(lib, used_of, h, kinds.GTT))
        activity = self._call(lib, "amdsmi_get_gpu_activity", h)
        busy = _int(activity.get("gfx_activity")) if isinstance(activity, dict) else None
        util = float(busy) if busy is not None and busy <= 100 else None
        power = power_watts(self._call(lib, "amdsmi_get_power_info", h))

        total, used, free = drm.pool_totals(
            gpu.memory_kind, vram_total, vram_used, gtt_total, gtt_used
        )
        return DeviceSample(
            device_id=gpu.device_id,
            collector=self.name,
            vendor="amd",
            name=gpu.name,
            memory_kind=gpu.memory_kind,
            total_bytes=total,
            used_bytes=used,
            free_bytes=free,
            pci_bus_id=gpu.bdf,
            vram_total_bytes=vram_total,
            vram_used_bytes=vram_used,
            vis_vram_total_bytes=vis_total,
            vis_vram_used_bytes=vis_used,
            gtt_total_bytes=gtt_total,
            gtt_used_bytes=gtt_used,
            util_pct=util,
            temp_c=self._temperature(lib, h),
            power_w=power,
            mem_clock_mhz=self._memory_clock(lib, h),
        )

    def _memory_clock(self, lib: Any, handle: object) -> float | None:
        kinds = getattr(lib, "AmdSmiClkType", None)
        kind = getattr(kinds, "MEM", None)
        if kind is None:
            return None
        return clock_mhz(self._call(lib, "amdsmi_get_clock_info", handle, kind))

    def _temperature(self, lib: Any, handle: object) -> float | None:
        sensors = getattr(lib, "AmdSmiTemperatureType", None)
        metrics = getattr(lib, "AmdSmiTemperatureMetric", None)
        if sensors is None or metrics is None:
            return None
        for sensor in ("EDGE", "HOTSPOT"):
            kind = getattr(sensors, sensor, None)
            if kind is None:
                continue
            value = self._call(lib, "amdsmi_get_temp_metric", handle, kind, metrics.CURRENT)
            number = value if isinstance(value, int | float) else None
            if number is not None and not isinstance(number, bool) and -100 < number < 1000:
                return float(number)  # whole degrees C; anything else is a sentinel
        return None

    def _processes(
        self, lib: Any, gpu: _Gpu, now: int, drm_pids: frozenset[int]
    ) -> list[ProcessMemory]:
        if now < self._plist_next_ms.get(gpu.device_id, now):
            return []  # backed off: the last call was slow
        start = self._clock()
        listed = self._call(lib, "amdsmi_get_gpu_process_list", gpu.handle)
        entries: list[_Entry] = []
        for item in listed if isinstance(listed, list | tuple) else ():
            info = item
            if not isinstance(item, dict):  # older releases: a process handle
                info = self._call(lib, "amdsmi_get_gpu_process_info", gpu.handle, item)
            entry = parse_process(info)
            if entry is not None:
                entries.append(entry)
        elapsed = self._clock() - start
        self.process_list_s[gpu.device_id] = elapsed
        if elapsed > SLOW_PROCESS_LIST_S:
            self._plist_next_ms[gpu.device_id] = now + int(self.options.rescan_s * 1000)
        else:
            self._plist_next_ms.pop(gpu.device_id, None)

        kept = dedupe_entries(entries)
        if any(e.pid in drm_pids for e in kept):
            kept = [e for e in kept if e.pid in drm_pids]
        return [
            ProcessMemory(e.pid, gpu.device_id, vram_bytes=e.vram, gtt_bytes=e.gtt, cpu_bytes=e.cpu)
            for e in kept
        ]
