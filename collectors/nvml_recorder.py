"""Record this machine's NVIDIA driver as a scenario the fake driver replays (``nvml.json``).

``vramscope capture`` calls :func:`record_nvml` on a box with a real GPU; the result, in the
format of ``tests/fixtures/nvml/*.json`` (``tests/fakes/nvml_fake.py``), can be committed as
a fixture and replayed through the real collector with ``nvml_fake.replay``. It holds:

- ``driver``; ``missing_symbols``: which of the symbols the fake can export
  (:data:`PROBED_SYMBOLS`) this library lacks, probed the way pynvml looks them up;
  ``process_struct_bytes``: the process record size, decided by the collector's own probe
  (:func:`collectors.nvml.choose_process_api`; 24 for the versioned detail list, whose
  record cannot be misread, which is what the driver's ``_v3`` calls then write).
- per device: ``name``, ``uuid``, ``bus_id``, ``memory`` (v2 semantics: ``used`` excludes
  ``reserved``; from the v1 call, with ``reserved`` 0 and ``used`` as v1 counts it, when
  the driver has no v2 or v2 fails, the latter noted as ``memory_v2``), ``util``,
  ``temp_c``, ``power_mw``, ``clock_mem_mhz`` (memory clock), ``mig``, ``event_types`` and
  the ``compute``/``graphics`` process lists. A call that fails is ``"not_supported"``
  (NOT_SUPPORTED, a missing symbol, pynvml's library-mismatch error) or ``{"error": N}``
  (any other return code).
- Processes by name, never by pid: ``<comm>-<pid>`` for a process in our ``/proc``,
  ``hidden-<pid>`` for one NVML reports from another PID namespace. ``_processes`` maps
  each name to ``{"pid", "comm", "argv0", "visible"}`` for the reader and for replaying
  next to a captured ``/proc`` tree. Nothing of a command line beyond the basename of
  ``argv[0]`` (cut at the first blank: a rewritten process title is one long argv[0]) is
  kept, and ``/proc/PID/environ`` is never opened.
- Notes for the reader (keys starting with ``_``, ignored on replay): ``_source``,
  ``_recorded``: true, ``_process_api`` (detail/v3/v2/v1), ``_processes``, and per device
  ``_process_errors`` when a process list call failed (it replays as an empty list).
- Not recorded: Xid events (only those arriving after registration are delivered: a
  recording would hold none), the MIG instance ids in process records, and ``init_error``
  (a driver that cannot start raises :class:`NvmlUnavailable` instead).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pynvml

from collectors.nvml import (
    ProcessApi,
    _has,
    _init_reason,
    _text,
    _two_call_list,
    choose_process_api,
    detail_list,
)

# Every symbol vramscope may call (the fake driver, tests/fakes/nvml_fake.py, exports these):
# the recording lists those the real library lacks.
PROBED_SYMBOLS = (
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetRunningProcessDetailList",
    "nvmlDeviceGetConfComputeMemSizeInfo",
    "nvmlEventSetCreate",
    "nvmlEventSetFree",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
)
DETAIL_STRUCT_BYTES = 24  # what a driver with the detail list writes for the _v3 calls
NOT_SUPPORTED = "not_supported"
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


class NvmlUnavailable(Exception):
    """NVML cannot be used here (no library, no driver, no device): ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def record_nvml(proc: Path | str = "/proc") -> dict[str, Any]:
    """Initialise NVML, record every device and process list as a fake-driver scenario, and
    shut NVML down again. ``proc``: where process names are read (``comm``, ``cmdline``).
    Raises :class:`NvmlUnavailable` when NVML does not start or finds no device."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(_unavailable_reason(exc)) from None
    try:
        return _record(Path(proc))
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _unavailable_reason(exc: pynvml.NVMLError) -> str:
    reason, raw = _init_reason(exc), str(exc)
    return reason if raw in reason else f"{reason} (NVML: {raw})"


def _record(proc: Path) -> dict[str, Any]:
    ok, driver = _call(pynvml.nvmlSystemGetDriverVersion)
    missing = [name for name in PROBED_SYMBOLS if not _has(name)]
    api = choose_process_api()  # the collector's probe, on the same symbols
    memory_v2 = _has("nvmlDeviceGetMemoryInfo_v2")
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML device enumeration failed: {exc}") from None
    if not handles:
        raise NvmlUnavailable("NVML found no NVIDIA device")
    names = ProcessNames(proc)
    devices = [_device(handle, api, memory_v2, names) for handle in handles]
    driver_text = _text(driver) if ok else "unknown"
    return {
        "_source": _source(driver_text or "unknown", devices),
        "_recorded": True,
        "_process_api": api.kind,
        "driver": driver_text if ok else "0",
        "missing_symbols": missing,
        "process_struct_bytes": (
            ctypes.sizeof(api.struct) if api.struct is not None else DETAIL_STRUCT_BYTES
        ),
        "devices": devices,
        "_processes": names.table(),
    }


def _source(driver: str, devices: list[dict[str, Any]]) -> str:
    counts = Counter(d["name"] if isinstance(d["name"], str) else "unnamed GPU" for d in devices)
    gpus = ", ".join(name if n == 1 else f"{n}x {name}" for name, n in counts.items())
    day = datetime.now(UTC).date().isoformat()
    return f"recorded by vramscope capture on {day}, driver {driver}, {gpus}; pids renamed"


# -- one call, one field ----------------------------------------------------------------


def _call(fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    """(True, value), or (False, how the scenario writes the failure)."""
    try:
        return True, fn(*args)
    except pynvml.NVMLError as exc:
        return False, failure(exc.value)
    except pynvml.NVMLLibraryMismatchError:
        return False, NOT_SUPPORTED


def failure(code: int) -> str | dict[str, int]:
    """An ``nvmlReturn_t`` as the fake driver's scenario writes it."""
    if code in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
        return NOT_SUPPORTED
    return {"error": int(code)}


def _field(fn: Callable[..., Any], *args: Any, convert: Callable[[Any], Any] = lambda v: v) -> Any:
    ok, value = _call(fn, *args)
    return convert(value) if ok else value


def _memory(handle: Any, memory_v2: bool) -> dict[str, Any]:
    """``memory`` (and ``memory_v2`` when only v2 fails), the calls the collector makes."""
    out: dict[str, Any] = {}
    if memory_v2:
        ok, mem = _call(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2)
        if ok:
            return {
                "memory": {
                    "total": int(mem.total),
                    "used": int(mem.used),
                    "free": int(mem.free),
                    "reserved": int(mem.reserved),
                }
            }
        out["memory_v2"] = mem
    ok, mem = _call(pynvml.nvmlDeviceGetMemoryInfo, handle)
    if not ok:
        return {"memory": mem}  # the v2 call, if any, fails the same way on replay
    # v1 counts the reserved memory as used and does not tell it apart
    out["memory"] = {
        "total": int(mem.total),
        "used": int(mem.used),
        "free": int(mem.free),
        "reserved": 0,
    }
    return out


def _device(handle: Any, api: ProcessApi, memory_v2: bool, names: ProcessNames) -> dict[str, Any]:
    dev: dict[str, Any] = {
        "name": _field(pynvml.nvmlDeviceGetName, handle, convert=_text),
        "uuid": _field(pynvml.nvmlDeviceGetUUID, handle, convert=_text),
        "bus_id": _field(
            pynvml.nvmlDeviceGetPciInfo_v3, handle, convert=lambda pci: _text(pci.busId)
        ),
        **_memory(handle, memory_v2),
        "util": _field(
            pynvml.nvmlDeviceGetUtilizationRates,
            handle,
            convert=lambda u: {"gpu": int(u.gpu), "memory": int(u.memory)},
        ),
        "temp_c": _field(
            pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU, convert=int
        ),
        "power_mw": _field(pynvml.nvmlDeviceGetPowerUsage, handle, convert=int),
        "clock_mem_mhz": _field(
            pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM, convert=int
        ),
        "mig": _field(
            pynvml.nvmlDeviceGetMigMode, handle, convert=lambda m: [int(m[0]), int(m[1])]
        ),
        "event_types": _field(pynvml.nvmlDeviceGetSupportedEventTypes, handle, convert=int),
    }
    errors = {}
    for key, graphics in (("compute", False), ("graphics", True)):
        try:
            rows = process_rows(api, handle, graphics)
        except pynvml.NVMLError as exc:  # the collector reads an empty list, so does replay
            rows, errors[key] = [], failure(exc.value)
        dev[key] = [{"pid": names.name(pid), "used": used} for pid, used in rows]
    if errors:
        dev["_process_errors"] = errors
    return dev


# -- processes --------------------------------------------------------------------------


def process_rows(api: ProcessApi, handle: Any, graphics: bool) -> list[tuple[int, int | None]]:
    """(pid, bytes or None) as the driver lists them, read with the struct the collector
    chose (``_two_call_list`` is the collector's own reader)."""
    if api.kind == "detail":
        return detail_list(handle, graphics)
    assert api.struct is not None
    return _two_call_list(pynvml._nvmlGetFunctionPointer(api.symbol(graphics)), handle, api.struct)


def argv0_basename(cmdline: bytes) -> str | None:
    """The program name and nothing else of a command line: argv[0], cut at the first
    blank (a process that rewrote its title has one long argv[0]), without its folder."""
    first = cmdline.split(b"\0", 1)[0].decode("utf-8", "replace").strip()
    if not first:
        return None
    return os.path.basename(first.split()[0])[:64] or None


class ProcessNames:
    """pid -> a stable name (``comm-pid``, ``hidden-pid``), and the table behind it."""

    def __init__(self, proc: Path) -> None:
        self.proc = proc
        self._names: dict[int, str | int] = {}
        self._table: dict[str, dict[str, Any]] = {}
        self._listed: set[int] | None = None

    def _visible(self, pid: int) -> bool:
        if self._listed is None:  # as the collector decides: the /proc listing
            try:
                self._listed = {int(n) for n in os.listdir(self.proc) if n.isdigit()}
            except OSError:
                self._listed = set()
        return pid in self._listed

    def _read(self, pid: int, name: str) -> bytes | None:
        try:
            return (self.proc / str(pid) / name).read_bytes()
        except OSError:
            return None

    def name(self, pid: int) -> str | int:
        if pid == 0:
            return 0  # no process: the collector skips it, replay writes it back as is
        if pid in self._names:
            return self._names[pid]
        comm = argv0 = None
        visible = self._visible(pid)
        if visible:
            raw_comm = self._read(pid, "comm") or b""
            comm = raw_comm.decode("utf-8", "replace").strip() or None
            cmdline = self._read(pid, "cmdline")
            argv0 = argv0_basename(cmdline) if cmdline else None
            stem = _NAME_UNSAFE.sub("_", comm or argv0 or "pid").strip("_")[:32] or "pid"
        else:
            stem = "hidden"
        name = f"{stem}-{pid}"
        self._names[pid] = name
        self._table[name] = {"pid": pid, "comm": comm, "argv0": argv0, "visible": visible}
        return name

    def table(self) -> dict[str, dict[str, Any]]:
        return dict(sorted(self._table.items()))
