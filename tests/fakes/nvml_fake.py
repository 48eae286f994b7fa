"""A fake ``libnvidia-ml.so.1`` at pynvml's function-pointer lookup.

pynvml looks every C function up with ``getattr(nvmlLib, name)``; installing an instance
of :class:`FakeNvmlLib` as ``pynvml.nvmlLib`` makes those lookups return the Python
functions below, which behave like the C ABI: they receive pynvml's ctypes arguments
(``byref`` pointers, string buffers, struct arrays) and write into them, and return an
``nvmlReturn_t`` code. A symbol the scenario's driver lacks is missing from the object, so
pynvml raises its real ``FunctionNotFound``. pynvml's own wrapper code therefore runs
unchanged; only the driver is fake.

Scenarios are JSON (tests/fixtures/nvml/*.json); each states its source in ``_source``.
A device field the driver cannot answer is ``"not_supported"`` (or absent), or
``{"error": N}`` for another ``nvmlReturn_t`` (``vramscope capture`` records NO_PERMISSION
and the like that way); ``memory_v2`` (optional, a failure only) makes
``nvmlDeviceGetMemoryInfo_v2`` fail while the v1 call still answers ``memory``. Keys
starting with ``_`` are notes for the reader (``_processes`` in a recording included).
The process lists write records of the *driver's* struct size (``process_struct_bytes``)
into the caller's buffer, whatever struct the caller allocated: that is how the R535
"legacy v3" misalignment happens on real drivers (nvitop #75).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml

from collectors.nvml_recorder import PROBED_SYMBOLS

SUCCESS, NOT_SUPPORTED, INSUFFICIENT_SIZE, TIMEOUT, ARG_VERSION_MISMATCH = 0, 3, 7, 10, 25
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
MEMORY_V2 = 0x02000028
DETAIL_LIST_V1 = 0x1000018

# Every symbol a modern driver exports that vramscope may call (the recorder probes the same).
ALL_SYMBOLS = PROBED_SYMBOLS


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _obj(ref: Any) -> Any:
    """The object behind a ``byref(...)`` argument."""
    return ref._obj


def _failure(value: Any) -> int | None:
    """The ``nvmlReturn_t`` a scenario value stands for when it is a failure, else None."""
    if value is None or value == "not_supported":
        return NOT_SUPPORTED
    if isinstance(value, dict) and set(value) == {"error"}:
        return int(value["error"])
    return None


class _Failed:
    """A field the driver answers with an error code."""

    def __init__(self, code: int) -> None:
        self.code = code


class FakeNvmlLib:
    """One scenario's driver. Attributes are the exported C functions."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        self.scenario = scenario
        self.calls: list[str] = []
        missing = set(scenario.get("missing_symbols", ()))
        self._devices = scenario.get("devices", [])
        self._structs = [pynvml.struct_c_nvmlDevice_t() for _ in self._devices]
        self._events = [(i, e) for i, d in enumerate(self._devices) for e in d.get("events", [])]
        self._registered: set[int] = set()
        self._event_set = pynvml.struct_c_nvmlEventSet_t()
        self.stride = int(scenario.get("process_struct_bytes", 24))
        for name in ALL_SYMBOLS:
            if name not in missing:
                setattr(self, name, self._traced(name, getattr(self, "_" + name)))

    def _traced(self, name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            self.calls.append(name)
            return fn(*args)

        call.__name__ = name
        return call

    # -- helpers ------------------------------------------------------------------

    def _dev(self, handle: Any) -> dict[str, Any]:
        address = ctypes.addressof(handle.contents)
        for dev, st in zip(self._devices, self._structs, strict=True):
            if ctypes.addressof(st) == address:
                return dev
        raise AssertionError("unknown device handle")

    def _field(self, handle: Any, key: str) -> Any:
        """The scenario's value; a failure (see ``_failure``) comes back as ``_Failed``."""
        value = self._dev(handle).get(key)
        code = _failure(value)
        return value if code is None else _Failed(code)

    # -- library ------------------------------------------------------------------

    def _nvmlInitWithFlags(self, flags: Any) -> int:
        return int(self.scenario.get("init_error") or SUCCESS)

    def _nvmlShutdown(self) -> int:
        return SUCCESS

    def _nvmlErrorString(self, code: Any) -> bytes:
        return f"fake NVML error {code}".encode()

    def _nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        buf.value = self.scenario.get("driver", "0").encode()
        return SUCCESS

    def _nvmlDeviceGetCount_v2(self, count_ref: Any) -> int:
        _obj(count_ref).value = len(self._devices)
        return SUCCESS

    def _nvmlDeviceGetHandleByIndex_v2(self, index: Any, handle_ref: Any) -> int:
        i = index.value
        if i >= len(self._structs):
            return 2  # INVALID_ARGUMENT
        _obj(handle_ref).contents = self._structs[i]
        return SUCCESS

    def _string(self, handle: Any, buf: Any, key: str) -> int:
        value = self._field(handle, key)
        if isinstance(value, _Failed):
            return value.code
        buf.value = value.encode()
        return SUCCESS

    def _nvmlDeviceGetName(self, handle: Any, buf: Any, size: Any) -> int:
        return self._string(handle, buf, "name")

    def _nvmlDeviceGetUUID(self, handle: Any, buf: Any, size: Any) -> int:
        return self._string(handle, buf, "uuid")

    def _nvmlDeviceGetPciInfo_v3(self, handle: Any, info_ref: Any) -> int:
        bus_id = self._field(handle, "bus_id")
        if isinstance(bus_id, _Failed):
            return bus_id.code
        _obj(info_ref).busId = bus_id.encode()
        return SUCCESS

    def _memory(self, handle: Any) -> Any:
        return self._field(handle, "memory")

    def _nvmlDeviceGetMemoryInfo(self, handle: Any, mem_ref: Any) -> int:
        mem = self._memory(handle)
        if isinstance(mem, _Failed):
            return mem.code
        out = _obj(mem_ref)
        # v1 semantics: used includes the reserved memory (sources.md 1.4)
        out.total, out.free = mem["total"], mem["free"]
        out.used = mem["used"] + mem.get("reserved", 0)
        return SUCCESS

    def _nvmlDeviceGetMemoryInfo_v2(self, handle: Any, mem_ref: Any) -> int:
        out = _obj(mem_ref)
        if out.version != MEMORY_V2:
            return ARG_VERSION_MISMATCH
        if "memory_v2" in self._dev(handle):
            v2_code = _failure(self._dev(handle)["memory_v2"])
            assert v2_code is not None, "memory_v2 can only be a failure"
            return v2_code
        mem = self._memory(handle)
        if isinstance(mem, _Failed):
            return mem.code
        out.total, out.free, out.used = mem["total"], mem["free"], mem["used"]
        out.reserved = mem.get("reserved", 0)
        return SUCCESS

    def _nvmlDeviceGetUtilizationRates(self, handle: Any, util_ref: Any) -> int:
        util = self._field(handle, "util")
        if isinstance(util, _Failed):
            return util.code
        _obj(util_ref).gpu, _obj(util_ref).memory = util["gpu"], util["memory"]
        return SUCCESS

    def _scalar(self, handle: Any, ref: Any, key: str) -> int:
        value = self._field(handle, key)
        if isinstance(value, _Failed):
            return value.code
        _obj(ref).value = value
        return SUCCESS

    def _nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, ref: Any) -> int:
        return self._scalar(handle, ref, "temp_c")

    def _nvmlDeviceGetPowerUsage(self, handle: Any, ref: Any) -> int:
        return self._scalar(handle, ref, "power_mw")

    def _nvmlDeviceGetClockInfo(self, handle: Any, clock_type: Any, ref: Any) -> int:
        """Only the memory clock (NVML_CLOCK_MEM, MHz: ``clock_mem_mhz``) is in scenarios;
        any other clock type answers NOT_SUPPORTED."""
        if clock_type.value != pynvml.NVML_CLOCK_MEM:
            return NOT_SUPPORTED
        return self._scalar(handle, ref, "clock_mem_mhz")

    def _nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        mig = self._field(handle, "mig")
        if isinstance(mig, _Failed):
            return mig.code
        _obj(current).value, _obj(pending).value = mig
        return SUCCESS

    def _nvmlDeviceGetConfComputeMemSizeInfo(self, *args: Any) -> int:
        return NOT_SUPPORTED

    # -- processes: the driver writes its own struct size ---------------------------

    def _records(self, handle: Any, graphics: bool) -> list[tuple[int, int]]:
        rows = self._dev(handle).get("graphics" if graphics else "compute", [])
        return [(r["pid"], 2**64 - 1 if r["used"] is None else r["used"]) for r in rows]

    def _fill(self, rows: list[tuple[int, int]], count_ref: Any, buf: Any) -> int:
        count = _obj(count_ref)
        if buf is None or count.value < len(rows):
            count.value = len(rows)
            return SUCCESS if not rows else INSUFFICIENT_SIZE
        raw = b"".join(
            struct.pack("<IxxxxQII", pid, used, 0xFFFFFFFF, 0xFFFFFFFF).ljust(self.stride, b"\0")[
                : self.stride
            ]
            if self.stride >= 24
            else struct.pack("<IxxxxQ", pid, used)
            for pid, used in rows
        )
        ctypes.memmove(ctypes.addressof(buf), raw, len(raw))
        count.value = len(rows)
        return SUCCESS

    def _nvmlDeviceGetComputeRunningProcesses(self, h: Any, c: Any, b: Any) -> int:
        return self._fill(self._records(h, False), c, b)

    def _nvmlDeviceGetGraphicsRunningProcesses(self, h: Any, c: Any, b: Any) -> int:
        return self._fill(self._records(h, True), c, b)

    _nvmlDeviceGetComputeRunningProcesses_v2 = _nvmlDeviceGetComputeRunningProcesses
    _nvmlDeviceGetComputeRunningProcesses_v3 = _nvmlDeviceGetComputeRunningProcesses
    _nvmlDeviceGetGraphicsRunningProcesses_v2 = _nvmlDeviceGetGraphicsRunningProcesses
    _nvmlDeviceGetGraphicsRunningProcesses_v3 = _nvmlDeviceGetGraphicsRunningProcesses

    def _nvmlDeviceGetRunningProcessDetailList(self, handle: Any, list_ref: Any) -> int:
        plist = _obj(list_ref)
        if plist.version != DETAIL_LIST_V1:
            return ARG_VERSION_MISMATCH
        rows = self._records(handle, graphics=plist.mode == 1)
        if not plist.procArray or plist.numProcArrayEntries < len(rows):
            plist.numProcArrayEntries = len(rows)
            return SUCCESS if not rows else INSUFFICIENT_SIZE
        for i, (pid, used) in enumerate(rows):
            plist.procArray[i].pid = pid
            plist.procArray[i].usedGpuMemory = used
            plist.procArray[i].usedGpuCcProtectedMemory = 0
        plist.numProcArrayEntries = len(rows)
        return SUCCESS

    # -- events -------------------------------------------------------------------

    def _nvmlEventSetCreate(self, set_ref: Any) -> int:
        _obj(set_ref).contents = self._event_set
        return SUCCESS

    def _nvmlEventSetFree(self, event_set: Any) -> int:
        return SUCCESS

    def _nvmlDeviceGetSupportedEventTypes(self, handle: Any, ref: Any) -> int:
        return self._scalar(handle, ref, "event_types")

    def _nvmlDeviceRegisterEvents(self, handle: Any, types: Any, event_set: Any) -> int:
        self._registered.add(self._devices.index(self._dev(handle)))
        return SUCCESS

    def _nvmlEventSetWait_v2(self, event_set: Any, data_ref: Any, timeout: Any) -> int:
        pending = [(i, e) for i, e in self._events if i in self._registered]
        if not pending:
            return TIMEOUT
        index, event = pending[0]
        self._events.remove(pending[0])
        data = _obj(data_ref)
        data.device.contents = self._structs[index]
        data.eventType, data.eventData = 0x8, event["xid"]
        return SUCCESS


def with_pids(scenario: dict[str, Any], pids: dict[str, int]) -> dict[str, Any]:
    """Replace symbolic pids ("llama") in a scenario by real ones (processes the test runs)."""
    out = json.loads(json.dumps(scenario))
    for dev in out.get("devices", []):
        for key in ("compute", "graphics"):
            for row in dev.get(key, []):
                if isinstance(row["pid"], str):
                    row["pid"] = pids[row["pid"]]
    return out


def install(scenario: dict[str, Any] | str, pids: dict[str, int] | None = None) -> FakeNvmlLib:
    """Make pynvml use a fake driver for ``scenario`` (a dict or a fixture name)."""
    data = load(scenario) if isinstance(scenario, str) else scenario
    lib = FakeNvmlLib(with_pids(data, pids or {}))
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    return lib


# -- recordings (``vramscope capture``'s nvml.json, collectors/nvml_recorder.py) -------------


def _pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 4194304  # the kernel's ceiling (PID_MAX_LIMIT on 64-bit)


@contextlib.contextmanager
def stand_ins(recording: dict[str, Any]) -> Iterator[dict[str, int]]:
    """Pids for a recording's process names on this machine: a sleeping process for each
    one that was visible where it was recorded, and for each hidden one (another PID
    namespace) a pid above ``pid_max``, which no process here can have."""
    children: list[subprocess.Popen[bytes]] = []
    pids: dict[str, int] = {}
    first_free = _pid_max() + 1
    try:
        for name, info in sorted(recording.get("_processes", {}).items()):
            if info.get("visible"):
                child = subprocess.Popen(["sleep", "600"])
                children.append(child)
                pids[name] = child.pid
            else:
                pids[name] = first_free
                first_free += 1
        yield pids
    finally:
        for child in children:
            child.kill()
            child.wait()


def recorded_pids(recording: dict[str, Any]) -> dict[str, int]:
    """The original pids, for replaying next to the /proc tree captured with the recording
    (``vramscope capture`` writes both; pass ``Roots(proc=DIR/proc)`` to the collector)."""
    return {name: int(info["pid"]) for name, info in recording.get("_processes", {}).items()}


@contextlib.contextmanager
def replay(recording: dict[str, Any] | str | Path) -> Iterator[tuple[FakeNvmlLib, dict[str, int]]]:
    """Install a recording (a dict, a fixture name, or a path to its JSON) with stand-in
    processes; yields the fake library and the name -> pid map it was installed with."""
    if isinstance(recording, Path):
        recording = json.loads(recording.read_text())
    elif isinstance(recording, str):
        recording = load(recording)
    with stand_ins(recording) as pids:
        yield install(recording, pids), pids
