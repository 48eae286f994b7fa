"""amdsmi collector: a fake ``amdsmi`` module built from recorded-shaped JSON fixtures.

tests/fixtures/amdsmi/<scenario>.json hold what each amdsmi function returns for one box
(``_source`` in each file says where every shape comes from). :func:`build_fake` turns one
into a module with the real function names, enums and exception classes, strict like the
real interface (enum and handle types checked, NOT_INIT before ``amdsmi_init``), and it is
injected through ``AmdsmiCollector(..., lib=fake)`` so that the collector's own code runs.
The import-failure path runs for real in a subprocess against a fake ``amdsmi`` package.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from collections import Counter
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest

from collectors import amdsmi as amdsmi_collector
from collectors.amdsmi import LIB_MISSING, NOT_INSTALLED, AmdsmiCollector
from collectors.base import CollectorOptions, NoData, ProcessMemory, Reading, Roots, Tick
from collectors.drm import DrmCollector
from collectors.registry import CollectorSpec
from monitor.daemon import sampler as sampler_mod
from monitor.daemon.sampler import Sampler

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
NOW_MS = 1_750_000_000_000
KiB, MiB, GiB = 1024, 1024**2, 1024**3

# ---------------------------------------------------------------------------------------
# The fake amdsmi module

_STATUS = {  # amdsmi_wrapper.py 7.0.2 l.337-362, texts from amdsmi_exception.py
    2: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    10: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    32: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    34: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
}


class AmdSmiException(Exception):
    """Base smi exception class (as amdsmi_exception.py)."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _STATUS.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiParameterException(AmdSmiException):
    pass


class AmdSmiInitFlags(IntEnum):
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1


class AmdSmiClkType(IntEnum):  # amdsmi_interface.py: amdsmi_clk_type_t
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5
    VCLK0 = 6
    VCLK1 = 7
    DCLK0 = 8
    DCLK1 = 9


class ProcessorHandle:
    """Stands for amdsmi_wrapper.amdsmi_processor_handle (an opaque ctypes pointer)."""

    def __init__(self, index: int) -> None:
        self.index = index


class ProcessHandle:
    """Stands for amdsmi_wrapper.amdsmi_process_handle_t (older releases)."""

    def __init__(self, index: int) -> None:
        self.index = index


def build_fake(scenario: dict[str, Any]) -> types.ModuleType:
    """A module named ``amdsmi`` answering from one fixture; ``fake.calls`` counts calls."""
    mod = types.ModuleType("amdsmi")
    calls: Counter[str] = Counter()
    state = {"init": False, "init_error": scenario.get("init_error")}
    devices = scenario["devices"]
    handles_api = scenario.get("process_api") == "handles"

    def need_init() -> None:
        if not state["init"]:
            raise AmdSmiLibraryException(32)

    def device(handle: object, function: str) -> dict[str, Any]:
        calls[function] += 1
        need_init()
        if not isinstance(handle, ProcessorHandle):
            raise AmdSmiParameterException(f"{function}: bad handle {handle!r}")
        dev = devices[handle.index]
        code = dev.get("raises", {}).get(function)
        if code is not None:
            raise AmdSmiLibraryException(code)
        return dev

    def amdsmi_init(flag: object = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        calls["amdsmi_init"] += 1
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag)
        if state["init_error"] is not None:
            raise AmdSmiLibraryException(state["init_error"])
        state["init"] = True

    def amdsmi_shut_down() -> None:
        calls["amdsmi_shut_down"] += 1
        need_init()
        state["init"] = False

    def amdsmi_get_processor_handles() -> list[ProcessorHandle]:
        calls["amdsmi_get_processor_handles"] += 1
        need_init()
        return [ProcessorHandle(i) for i in range(len(devices))]

    def amdsmi_get_gpu_device_bdf(handle: object) -> str:
        return device(handle, "amdsmi_get_gpu_device_bdf")["bdf"]

    def amdsmi_get_gpu_asic_info(handle: object) -> dict[str, Any]:
        return dict(device(handle, "amdsmi_get_gpu_asic_info")["asic_info"])

    def memory(handle: object, mem_type: object, function: str, key: str) -> int:
        dev = device(handle, function)
        if not isinstance(mem_type, AmdSmiMemoryType):
            raise AmdSmiParameterException(mem_type)
        return dev[key][mem_type.name]

    def amdsmi_get_gpu_memory_total(handle: object, mem_type: object) -> int:
        return memory(handle, mem_type, "amdsmi_get_gpu_memory_total", "memory_total")

    def amdsmi_get_gpu_memory_usage(handle: object, mem_type: object) -> int:
        return memory(handle, mem_type, "amdsmi_get_gpu_memory_usage", "memory_usage")

    def amdsmi_get_gpu_activity(handle: object) -> dict[str, Any]:
        return dict(device(handle, "amdsmi_get_gpu_activity")["activity"])

    def amdsmi_get_temp_metric(handle: object, sensor: object, metric: object) -> int:
        dev = device(handle, "amdsmi_get_temp_metric")
        if not isinstance(sensor, AmdSmiTemperatureType):
            raise AmdSmiParameterException(sensor)
        if not isinstance(metric, AmdSmiTemperatureMetric):
            raise AmdSmiParameterException(metric)
        value = dev["temp_metric"].get(sensor.name)
        if value is None or metric != AmdSmiTemperatureMetric.CURRENT:
            raise AmdSmiLibraryException(2)
        return value

    def amdsmi_get_power_info(handle: object) -> dict[str, Any]:
        return dict(device(handle, "amdsmi_get_power_info")["power_info"])

    def amdsmi_get_clock_info(handle: object, clock_type: object) -> dict[str, Any]:
        dev = device(handle, "amdsmi_get_clock_info")
        if not isinstance(clock_type, AmdSmiClkType):
            raise AmdSmiParameterException(clock_type)
        info = dev.get("clock_info", {}).get(clock_type.name)
        if info is None:
            raise AmdSmiLibraryException(2)
        return dict(info)

    def amdsmi_get_gpu_process_list(handle: object) -> list[Any]:
        dev = device(handle, "amdsmi_get_gpu_process_list")
        if handles_api:
            return [ProcessHandle(i) for i in range(len(dev["process_list"]))]
        return json.loads(json.dumps(dev["process_list"]))

    for func in (
        amdsmi_init,
        amdsmi_shut_down,
        amdsmi_get_processor_handles,
        amdsmi_get_gpu_device_bdf,
        amdsmi_get_gpu_asic_info,
        amdsmi_get_gpu_memory_total,
        amdsmi_get_gpu_memory_usage,
        amdsmi_get_gpu_activity,
        amdsmi_get_temp_metric,
        amdsmi_get_power_info,
        amdsmi_get_clock_info,
        amdsmi_get_gpu_process_list,
    ):
        setattr(mod, func.__name__, func)

    if handles_api:

        def amdsmi_get_gpu_process_info(handle: object, process: object) -> dict[str, Any]:
            dev = device(handle, "amdsmi_get_gpu_process_info")
            if not isinstance(process, ProcessHandle):
                raise AmdSmiParameterException(process)
            return json.loads(json.dumps(dev["process_list"][process.index]))

        mod.amdsmi_get_gpu_process_info = amdsmi_get_gpu_process_info

    for cls in (
        AmdSmiException,
        AmdSmiLibraryException,
        AmdSmiParameterException,
        AmdSmiInitFlags,
        AmdSmiMemoryType,
        AmdSmiTemperatureType,
        AmdSmiTemperatureMetric,
        AmdSmiClkType,
    ):
        setattr(mod, cls.__name__, cls)
    mod.calls = calls
    mod.state = state
    return mod


def load(scenario: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "amdsmi" / f"{scenario}.json").read_text())


def fake(scenario: str, **raises: int) -> types.ModuleType:
    data = load(scenario)
    for dev in data["devices"]:
        dev.setdefault("raises", {}).update(raises)
    return build_fake(data)


def empty_roots(tmp_path: Path) -> Roots:
    (tmp_path / "proc").mkdir()
    (tmp_path / "sys").mkdir()
    return Roots(proc=tmp_path / "proc", sys=tmp_path / "sys")


def drm_roots(scenario: str) -> Roots:
    tree = FIXTURES / "drm" / scenario
    return Roots(proc=tree / "proc", sys=tree / "sys")


def collect(
    lib: types.ModuleType, roots: Roots, now_ms: int = NOW_MS
) -> tuple[Reading, Tick, AmdsmiCollector]:
    collector = AmdsmiCollector(roots, CollectorOptions(), lib=lib)
    tick = Tick(roots, now_ms=now_ms)
    return collector.collect(tick), tick, collector


def rows(reading: Reading) -> dict[int, tuple[int | None, int | None, int | None]]:
    return {m.pid: (m.vram_bytes, m.gtt_bytes, m.cpu_bytes) for m in reading.memory}


MEMORY_FIELDS = (
    "device_id",
    "memory_kind",
    "total_bytes",
    "used_bytes",
    "free_bytes",
    "pci_bus_id",
    "vram_total_bytes",
    "vram_used_bytes",
    "vis_vram_total_bytes",
    "vis_vram_used_bytes",
    "gtt_total_bytes",
    "gtt_used_bytes",
    "util_pct",
    "temp_c",
    "power_w",
)


# ---------------------------------------------------------------------------------------
# (a) Strix Halo APU


def test_strix_halo_agrees_with_drm_and_lists_llama_once() -> None:
    roots = drm_roots("strix-halo")
    reading, tick, _ = collect(fake("strix-halo"), roots)
    (dev,) = reading.devices
    drm_reading = DrmCollector(roots, CollectorOptions()).collect(Tick(roots, now_ms=NOW_MS))
    (drm_dev,) = drm_reading.devices
    for name in MEMORY_FIELDS:  # the same box seen twice: every shared field agrees
        assert getattr(dev, name) == getattr(drm_dev, name), name
    assert dev.memory_kind == "unified" and dev.collector == "amdsmi"
    assert dev.device_id == "drm:0000:c5:00.0"
    assert dev.total_bytes == 512 * MiB + 96 * GiB
    assert dev.gtt_ceiling_bytes is None  # only DRM knows ttm.pages_limit
    assert dev.name == "AMD Radeon 8060S Graphics"
    got = rows(reading)
    assert sorted(got) == [1890, 2101, 2412]  # 2412 listed twice -> one row
    # The larger of the two listings, whole: amdsmi's own (double-fd, x1000) figure.
    assert got[2412] == (602112000, 147094248000, 16000)
    assert got[1890] == (62464000, 187348000, 0)
    assert tick.gpu_pids == {1890, 2101, 2412}


def test_apu_from_amdsmi_device_id_when_sysfs_has_no_card(tmp_path: Path) -> None:
    reading, _, _ = collect(fake("strix-halo"), empty_roots(tmp_path))
    (dev,) = reading.devices
    assert dev.memory_kind == "unified"
    assert dev.total_bytes == 536870912 + 103079215104
    assert dev.used_bytes == 405798912 + 75628875776


# ---------------------------------------------------------------------------------------
# (b) dGPU with two processes


def test_w7900_two_processes(tmp_path: Path) -> None:
    reading, tick, _ = collect(fake("w7900-two-procs"), empty_roots(tmp_path))
    (dev,) = reading.devices
    assert (dev.device_id, dev.memory_kind, dev.vendor) == ("drm:0000:43:00.0", "dedicated", "amd")
    assert dev.name == "AMD Radeon PRO W7900"
    assert dev.total_bytes == dev.vram_total_bytes == 48 * GiB
    assert dev.used_bytes == 46170898432 and dev.free_bytes == 48 * GiB - 46170898432
    assert dev.gtt_total_bytes == 67245371392 and dev.vis_vram_used_bytes == 46170898432
    assert (dev.util_pct, dev.temp_c, dev.power_w) == (96.0, 64.0, 241.0)
    assert dev.mem_clock_mhz == 1124.0  # amdsmi_get_clock_info(h, MEM)["clk"]
    assert reading.memory == (
        ProcessMemory(5120, "drm:0000:43:00.0", 44040192000, 16384000, 0),
        ProcessMemory(5300, "drm:0000:43:00.0", 2097152000, 4096000, 0),
    )
    assert tick.gpu_pids == {5120, 5300}


def test_older_process_handle_api_and_power_keys(tmp_path: Path) -> None:
    lib = fake("old-process-api")
    reading, tick, _ = collect(lib, empty_roots(tmp_path))
    (dev,) = reading.devices
    assert dev.power_w == 96.0  # average_socket_power: no socket_power key yet
    assert dev.mem_clock_mhz == 96.0  # "cur_clk": no "clk" key yet
    assert dev.temp_c == 48.0 and dev.util_pct == 12.0
    assert rows(reading) == {4410: (12901679104, 4194304, 0)}  # 4500 holds 0 bytes
    assert lib.calls["amdsmi_get_gpu_process_info"] == 2
    assert tick.gpu_pids == {4410}


# ---------------------------------------------------------------------------------------
# (c) unsupported calls: only their own fields go None


def test_unsupported_temperature_only_nulls_temperature() -> None:
    roots = drm_roots("rx7900xtx")
    lib = fake("rx7900xtx-no-temp")
    reading, _, collector = collect(lib, roots)
    (dev,) = reading.devices
    assert dev.temp_c is None
    assert lib.calls["amdsmi_get_temp_metric"] == 2  # EDGE, then HOTSPOT
    assert "NOT_SUPPORTED" in collector.errors["amdsmi_get_temp_metric"]
    assert (dev.util_pct, dev.power_w, dev.memory_kind) == (99.0, 339.0, "dedicated")
    assert dev.total_bytes == 25753026560 and dev.used_bytes == 23699927040
    assert len(reading.memory) == 3


NULLED_BY = {
    "amdsmi_get_temp_metric": {"temp_c"},
    "amdsmi_get_power_info": {"power_w"},
    "amdsmi_get_gpu_activity": {"util_pct"},
    "amdsmi_get_clock_info": {"mem_clock_mhz"},
    "amdsmi_get_gpu_memory_usage": {
        "used_bytes",
        "free_bytes",
        "vram_used_bytes",
        "vis_vram_used_bytes",
        "gtt_used_bytes",
    },
    "amdsmi_get_gpu_memory_total": {
        "total_bytes",
        "free_bytes",
        "vram_total_bytes",
        "vis_vram_total_bytes",
        "gtt_total_bytes",
    },
}


@pytest.mark.parametrize("function", sorted(NULLED_BY))
@pytest.mark.parametrize("code", [2, 10])
def test_each_failing_call_nulls_only_its_fields(tmp_path: Path, function: str, code: int) -> None:
    roots = empty_roots(tmp_path)
    good, _, _ = collect(fake("w7900-two-procs"), roots)
    bad, _, _ = collect(fake("w7900-two-procs", **{function: code}), roots)
    (g,), (b,) = good.devices, bad.devices
    changed = {f.name for f in dataclasses.fields(g) if getattr(g, f.name) != getattr(b, f.name)}
    assert changed == NULLED_BY[function]
    assert all(getattr(b, name) is None for name in changed)
    assert bad.memory == good.memory


def test_failing_asic_info_keeps_the_device_unnamed(tmp_path: Path) -> None:
    reading, _, _ = collect(
        fake("w7900-two-procs", amdsmi_get_gpu_asic_info=2), empty_roots(tmp_path)
    )
    (dev,) = reading.devices
    assert dev.name is None and dev.memory_kind == "dedicated" and dev.total_bytes == 48 * GiB


def test_failing_process_list_keeps_the_device(tmp_path: Path) -> None:
    reading, tick, _ = collect(
        fake("w7900-two-procs", amdsmi_get_gpu_process_list=10), empty_roots(tmp_path)
    )
    assert len(reading.devices) == 1 and reading.memory == () and tick.gpu_pids == set()


def test_unreadable_bdf_skips_the_device(tmp_path: Path) -> None:
    with pytest.raises(NoData, match="no AMD GPU"):
        collect(fake("w7900-two-procs", amdsmi_get_gpu_device_bdf=2), empty_roots(tmp_path))


def test_na_strings_and_sentinels_are_none(tmp_path: Path) -> None:
    data = load("w7900-two-procs")
    dev = data["devices"][0]
    dev["activity"]["gfx_activity"] = "N/A"
    dev["power_info"] = dict.fromkeys(dev["power_info"], "N/A")
    dev["power_info"]["socket_power"] = 0xFFFF
    dev["asic_info"]["market_name"] = "N/A"
    dev["memory_usage"]["GTT"] = 0xFFFF_FFFF_FFFF_FFFF
    dev["clock_info"]["MEM"]["clk"] = "N/A"
    dev["process_list"][0]["memory_usage"]["cpu_mem"] = "N/A"
    reading, _, _ = collect(build_fake(data), empty_roots(tmp_path))
    (d,) = reading.devices
    assert (d.util_pct, d.power_w, d.gtt_used_bytes) == (None, None, None)
    assert d.mem_clock_mhz is None  # "clk": "N/A" (UINT32_MAX in the library)
    assert d.name == "AMD GPU 1002:7448"  # no marketing name: the PCI id, as drm.py does
    assert d.used_bytes == 46170898432  # a dGPU's used is VRAM: the GTT gap does not matter
    assert rows(reading)[5120] == (44040192000, 16384000, None)


# ---------------------------------------------------------------------------------------
# (d) import failure, for real, in a subprocess


_FAKE_PACKAGE = {
    "print": """
        print("/opt/rocm/lib/libamd_smi.so: cannot open shared object file: "
              "No such file or directory")
        print("Unable to find libamd_smi.so library try installing amd-smi-lib from your "
              "package manager")
        raise KeyError("libamd_smi.so")
    """,
    # A C library writing to fd 1 and 2 directly, buffered stdio included.
    "fd": """
        import ctypes, os
        os.write(1, b"raw fd 1 write\\n")
        os.write(2, b"raw fd 2 write\\n")
        ctypes.CDLL(None).printf(b"buffered C stdio\\n")
        print("Unable to find libamd_smi.so library try installing amd-smi-lib from your "
              "package manager")
        raise KeyError("libamd_smi.so")
    """,
}

_CHILD = """
import json, sys
from pathlib import Path
from collectors.amdsmi import AmdsmiCollector
from collectors.base import CollectorOptions, NoData, Roots, Tick
roots = Roots(proc=Path("/nonexistent/proc"), sys=Path("/nonexistent/sys"))
collector = AmdsmiCollector(roots, CollectorOptions())
reasons = []
for now in (1000, 2000):
    try:
        collector.collect(Tick(roots, now_ms=now))
        reasons.append(None)
    except NoData as exc:
        reasons.append(str(exc))
sys.stderr.write("RESULT " + json.dumps(reasons) + "\\n")
print("stdout still works")
"""


@pytest.mark.parametrize("variant", sorted(_FAKE_PACKAGE))
def test_import_without_libamd_smi_is_nodata_and_silent(tmp_path: Path, variant: str) -> None:
    pkg = tmp_path / "amdsmi"
    pkg.mkdir()
    counter = tmp_path / "imported.txt"
    body = textwrap.dedent(_FAKE_PACKAGE[variant])
    count = f"open({str(counter)!r}, 'a').write('x')\n"
    (pkg / "__init__.py").write_text(count + body)
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + _CHILD],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},  # as a daemon
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "stdout still works\n"  # nothing from the import, fd 1 restored
    result = next(line for line in proc.stderr.splitlines() if line.startswith("RESULT "))
    first, second = json.loads(result[len("RESULT ") :])
    assert first.startswith("amdsmi: libamd_smi.so not found (install ROCm's amd-smi-lib), ")
    assert "KeyError: 'libamd_smi.so'" in first
    if variant == "print":  # what it printed is kept in the reason, not on stdout
        assert first.endswith(
            "(/opt/rocm/lib/libamd_smi.so: cannot open shared object file: "
            "No such file or directory)"
        )
    assert second == first  # cached reason
    assert counter.read_text() == "x"  # imported once, not on every tick
    assert proc.stderr.splitlines() == [result]  # nothing leaked to fd 2 either


def test_lib_missing_message_shape() -> None:
    assert LIB_MISSING.format(detail="d") == (
        "amdsmi: libamd_smi.so not found (install ROCm's amd-smi-lib), d"
    )


# ---------------------------------------------------------------------------------------
# (e) package not installed, and other import failures


def test_package_not_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import raises ModuleNotFoundError
    collector = AmdsmiCollector(empty_roots(tmp_path), CollectorOptions())
    tick = Tick(collector.roots, now_ms=NOW_MS)
    with pytest.raises(NoData) as exc:
        collector.collect(tick)
    assert str(exc.value) == NOT_INSTALLED
    assert str(exc.value).startswith("python package amdsmi is not installed")
    monkeypatch.delitem(sys.modules, "amdsmi")  # even if importable now: the reason is cached
    with pytest.raises(NoData, match="is not installed"):
        collector.collect(tick)


def test_other_import_failure_is_nodata_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pkg = tmp_path / "pkgs" / "amdsmi"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "print('noise')\nraise AttributeError('function amdsmi_get_gpu_xcp_metrics not found')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    with pytest.raises(NoData) as exc:
        amdsmi_collector.load_amdsmi()
    assert str(exc.value) == (
        "amdsmi: import failed, AttributeError: function amdsmi_get_gpu_xcp_metrics not found"
        " (noise)"
    )
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------------------------------
# (f) amdsmi_init failure, retried at most every 60 s


def test_init_failure_is_nodata_and_retried_every_60s(tmp_path: Path) -> None:
    lib = fake("driver-not-loaded")
    roots = empty_roots(tmp_path)
    collector = AmdsmiCollector(roots, CollectorOptions(), lib=lib)
    expected = (
        "amdsmi: amdsmi_init failed: AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded "
        "(status 34): the amdgpu kernel driver is not loaded"
    )
    for now, inits in ((NOW_MS, 1), (NOW_MS + 30_000, 1), (NOW_MS + 59_999, 1)):
        with pytest.raises(NoData) as exc:
            collector.collect(Tick(roots, now_ms=now))
        assert str(exc.value) == expected
        assert lib.calls["amdsmi_init"] == inits
    with pytest.raises(NoData):
        collector.collect(Tick(roots, now_ms=NOW_MS + 60_000))
    assert lib.calls["amdsmi_init"] == 2


def test_init_recovers_after_retry(tmp_path: Path) -> None:
    data = load("w7900-two-procs")
    data["init_error"] = 34
    lib = build_fake(data)
    roots = empty_roots(tmp_path)
    collector = AmdsmiCollector(roots, CollectorOptions(), lib=lib)
    with pytest.raises(NoData, match="DRIVER_NOT_LOADED"):
        collector.collect(Tick(roots, now_ms=NOW_MS))
    lib.state["init_error"] = None  # modprobe amdgpu
    with pytest.raises(NoData):
        collector.collect(Tick(roots, now_ms=NOW_MS + 10_000))  # still the cached failure
    reading = collector.collect(Tick(roots, now_ms=NOW_MS + 60_000))
    assert len(reading.devices) == 1 and lib.calls["amdsmi_init"] == 2


def test_close_shuts_down_once_and_collect_reinitialises(tmp_path: Path) -> None:
    lib = fake("w7900-two-procs")
    reading, _, collector = collect(lib, empty_roots(tmp_path))
    collector.collect(Tick(collector.roots, now_ms=NOW_MS + 1000))
    assert lib.calls["amdsmi_init"] == 1 and lib.calls["amdsmi_get_processor_handles"] == 1
    collector.close()
    collector.close()
    assert lib.calls["amdsmi_shut_down"] == 1 and lib.state["init"] is False
    again = collector.collect(Tick(collector.roots, now_ms=NOW_MS + 2000))
    assert again.devices == reading.devices and lib.calls["amdsmi_init"] == 2


# ---------------------------------------------------------------------------------------
# Cost: a slow process list is backed off to rescan_s


def test_slow_process_list_is_backed_off(tmp_path: Path) -> None:
    lib = fake("w7900-two-procs")
    roots = empty_roots(tmp_path)
    collector = AmdsmiCollector(roots, CollectorOptions(rescan_s=10.0), lib=lib)
    times = iter([0.0, 0.2, 1.0, 1.001, 2.0, 2.001])  # a 200 ms call, then 1 ms calls
    collector._clock = lambda: next(times)
    first = collector.collect(Tick(roots, now_ms=NOW_MS))
    assert len(first.memory) == 2 and collector.process_list_s["drm:0000:43:00.0"] == 0.2
    skipped = collector.collect(Tick(roots, now_ms=NOW_MS + 2_000))
    assert skipped.memory == () and len(skipped.devices) == 1
    assert lib.calls["amdsmi_get_gpu_process_list"] == 1
    again = collector.collect(Tick(roots, now_ms=NOW_MS + 10_000))
    assert len(again.memory) == 2 and lib.calls["amdsmi_get_gpu_process_list"] == 2
    fast = collector.collect(Tick(roots, now_ms=NOW_MS + 11_000))  # fast again: every tick
    assert len(fast.memory) == 2 and lib.calls["amdsmi_get_gpu_process_list"] == 3


def test_fake_collect_is_cheap(tmp_path: Path) -> None:
    roots = drm_roots("strix-halo")
    collector = AmdsmiCollector(roots, CollectorOptions(), lib=fake("strix-halo"))
    collector.collect(Tick(roots, now_ms=NOW_MS))  # init + discovery
    import time

    start = time.process_time()  # CPU seconds: a busy box's waits do not count
    for i in range(200):
        collector.collect(Tick(roots, now_ms=NOW_MS + i))
    # a guard against a blow-up (re-discovery every tick), not a speed figure: that is bench/
    assert (time.process_time() - start) / 200 < 0.02


# ---------------------------------------------------------------------------------------
# The merge with DRM through the real Sampler


def _sampler(monkeypatch: pytest.MonkeyPatch, roots: Roots, lib: types.ModuleType) -> Sampler:
    specs = (
        CollectorSpec("drm", DrmCollector, True, ""),
        CollectorSpec("amdsmi", lambda r, o: AmdsmiCollector(r, o, lib=lib), True, ""),
    )
    monkeypatch.setattr(sampler_mod, "REGISTRY", specs)
    return Sampler(roots)


def test_merge_with_drm_strix_halo_one_device_one_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    roots = drm_roots("strix-halo")
    snap = _sampler(monkeypatch, roots, fake("strix-halo")).sample(NOW_MS)
    assert [(r.collector, r.status) for r in snap.runs] == [("drm", "ok"), ("amdsmi", "ok")]
    (dev,) = snap.devices
    assert (dev.device_id, dev.collector, dev.memory_kind) == ("drm:0000:c5:00.0", "drm", "unified")
    assert dev.name == "AMD Strix Halo [Radeon 8050S / 8060S]"  # DRM's, first in order
    assert dev.gtt_ceiling_bytes == 23068672 * 4096  # DRM-only field kept
    assert dev.total_bytes == 512 * MiB + 96 * GiB  # not doubled
    mem = {(m.pid, m.device_id): m for m in snap.memory}
    assert sorted(mem) == [(p, "drm:0000:c5:00.0") for p in (1890, 2101, 2412)]
    llama = mem[(2412, "drm:0000:c5:00.0")]
    # DRM's figure (one client, counted once), not amdsmi's ~147 GB, not the sum.
    assert (llama.vram_bytes, llama.gtt_bytes, llama.cpu_bytes) == (
        294 * MiB,
        73547120 * KiB,
        8 * KiB,
    )


def test_merge_fills_sensors_drm_lacks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "drm" / "strix-halo", tree, symlinks=True)
    device = tree / "sys/class/drm/card1/device"
    shutil.rmtree(device / "hwmon")
    (device / "gpu_busy_percent").unlink()
    roots = Roots(proc=tree / "proc", sys=tree / "sys")
    (dev,) = _sampler(monkeypatch, roots, fake("strix-halo")).sample(NOW_MS).devices
    assert dev.collector == "drm"
    # DRM lost hwmon and gpu_busy_percent; amdsmi fills exactly those gaps.
    assert (dev.temp_c, dev.power_w, dev.util_pct) == (52.0, 78.0, 87.0)
    # Without in1_input the PCI id table still makes it an APU for both collectors.
    assert dev.memory_kind == "unified"


def test_merge_keeps_drm_fork_deduplication(monkeypatch: pytest.MonkeyPatch) -> None:
    roots = drm_roots("rx7900xtx")
    snap = _sampler(monkeypatch, roots, fake("rx7900xtx-no-temp")).sample(NOW_MS)
    (dev,) = snap.devices
    assert dev.temp_c == 71.0  # from DRM's hwmon; amdsmi could not read it
    assert dev.mem_clock_mhz == 1249.0  # both know it: DRM's pp_dpm_mclk, one figure
    mem = {m.pid: m for m in snap.memory if m.device_id == "drm:0000:03:00.0"}
    assert sorted(mem) == [2001, 3100]  # 3104 shares 3100's client: no second row
    assert mem[3100].vram_bytes == 1843212 * KiB


def test_amdsmi_alone_lists_the_fork_child(tmp_path: Path) -> None:
    """Without DRM there is nothing to tell the shared client apart: amdsmi's own view."""
    reading, _, _ = collect(fake("rx7900xtx-no-temp"), empty_roots(tmp_path))
    assert sorted(rows(reading)) == [2001, 3100, 3104]


@pytest.mark.parametrize(
    ("info", "mhz"),
    [
        ({"clk": 1249, "min_clk": 96, "max_clk": 1249}, 1249.0),
        ({"cur_clk": 456, "min_clk": 96, "max_clk": 1249, "sleep_clk": 0}, 456.0),
        ({"clk": "N/A"}, None),
        ({"clk": 0xFFFF_FFFF}, None),  # UINT32_MAX: an older wrapper passes it through
        ({"clk": 0}, None),
        ({}, None),
        ("N/A", None),
        (None, None),
    ],
)
def test_clock_mhz(info: object, mhz: float | None) -> None:
    assert amdsmi_collector.clock_mhz(info) == mhz


def test_memory_clock_unknown_where_amdsmi_has_none(tmp_path: Path) -> None:
    lib = fake("strix-halo")  # the fixture has no MEM clock: NOT_SUPPORTED
    reading, _, collector = collect(lib, empty_roots(tmp_path))
    (dev,) = reading.devices
    assert dev.mem_clock_mhz is None
    assert lib.calls["amdsmi_get_clock_info"] == 1
    assert "NOT_SUPPORTED" in collector.errors["amdsmi_get_clock_info"]


def test_merge_fills_the_memory_clock_drm_lacks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "drm" / "rx7900xtx", tree, symlinks=True)
    (tree / "sys/class/drm/card0/device/pp_dpm_mclk").unlink()
    roots = Roots(proc=tree / "proc", sys=tree / "sys")
    (dev,) = _sampler(monkeypatch, roots, fake("rx7900xtx-no-temp")).sample(NOW_MS).devices
    assert (dev.collector, dev.mem_clock_mhz) == ("drm", 1249.0)  # amdsmi's clk fills the gap
