"""The NVML collector against fake drivers installed at pynvml's function-pointer lookup.

pynvml's own ctypes wrappers run; only the C library is replaced (tests/fakes/nvml_fake.py).
Process ids are real processes started by the test, so the PID-namespace check is real too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nvml_fake
import pynvml
import pytest

from collectors.base import CollectorOptions, NoData, Roots, Tick
from collectors.nvml import NvmlCollector, _ProcLegacyV3, _ProcV2, _two_call_list

MIB, GIB = 1024**2, 1024**3
ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("fresh_pynvml")


def collect(scenario: str | dict, pids: dict[str, int], now_ms: int = 1_000_000):
    lib = nvml_fake.install(scenario, pids)
    collector = NvmlCollector(Roots(), CollectorOptions(), lib=lib)
    reading = collector.collect(Tick(Roots(), now_ms))
    return collector, lib, reading


def test_rtx4060_with_llama_server_and_a_draft_process(procs: dict[str, int]) -> None:
    _, lib, reading = collect("rtx4060", procs)
    (dev,) = reading.devices
    assert dev.device_id == "nvml:GPU-4060aaaa-1111-2222-3333-444455556666"
    assert (dev.name, dev.pci_bus_id, dev.memory_kind) == (
        "NVIDIA GeForce RTX 4060",
        "0000:01:00.0",
        "dedicated",
    )
    # v2 semantics: used excludes the 301 MiB the driver reserves
    assert (dev.total_bytes, dev.used_bytes, dev.reserved_bytes) == (
        8188 * MIB,
        7021 * MIB,
        301 * MIB,
    )
    assert (dev.util_pct, dev.temp_c, dev.power_w, dev.mig_enabled) == (97.0, 66.0, 112.345, None)
    rows = {m.pid: m.vram_bytes for m in reading.memory}
    # llama-server is in both the compute and graphics lists: counted once
    assert rows == {procs["llama"]: 5734 * MIB, procs["draft"]: 1187 * MIB}
    assert "nvmlDeviceGetRunningProcessDetailList" in lib.calls  # the versioned API
    assert reading.hidden == () and reading.events == ()


def test_r535_legacy_v3_struct_is_read_with_the_right_size(procs: dict[str, int]) -> None:
    _, lib, reading = collect("a100-535", procs)
    rows = {m.pid: m.vram_bytes for m in reading.memory}
    assert rows == {
        procs["vllm"]: 28000 * MIB,
        procs["worker"]: 2000 * MIB,
        procs["idle"]: None,
    }  # NOT_AVAILABLE is unknown, never 0
    (dev,) = reading.devices
    assert dev.mig_enabled is False
    # The same driver read with the 24-byte struct garbles every record after the first:
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    wrong = [pid for pid, _ in _two_call_list(fn, handle, _ProcV2)]
    right = [pid for pid, _ in _two_call_list(fn, handle, _ProcLegacyV3)]
    assert right == [procs["vllm"], procs["worker"], procs["idle"]]
    assert wrong != right and wrong[0] == procs["vllm"]


def test_gb10_unified_memory_pool_comes_from_meminfo(procs: dict[str, int]) -> None:
    _, _, reading = collect("gb10", procs)
    (dev,) = reading.devices
    meminfo = dict(
        (line.split(":")[0], int(line.split()[1]) * 1024)
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.endswith("kB")
    )
    assert dev.memory_kind == "unified"
    assert dev.total_bytes == meminfo["MemTotal"]
    assert dev.used_bytes is not None and 0 < dev.used_bytes < dev.total_bytes
    assert dev.reserved_bytes is None and dev.vram_total_bytes is None
    assert dev.power_w is None and dev.temp_c == 48.0  # one unsupported call, one field
    assert dev.pci_bus_id == "000f:01:00.0"
    assert {m.pid: m.vram_bytes for m in reading.memory} == {procs["llama"]: 61 * GIB}


def test_two_gpus_one_process_on_both_a_foreign_pid_and_an_xid(procs: dict[str, int]) -> None:
    collector, _, reading = collect("two-gpus", procs)
    ids = [d.device_id for d in reading.devices]
    assert ids == [
        "nvml:GPU-h100dddd-0000-2222-3333-444455556666",
        "nvml:GPU-h100eeee-1111-2222-3333-444455556666",
    ]
    rows = {(m.pid, m.device_id): m.vram_bytes for m in reading.memory}
    assert rows == {(procs["llama"], ids[0]): 38000 * MIB, (procs["llama"], ids[1]): 36000 * MIB}
    (hidden,) = reading.hidden
    assert hidden.pid == 4194000 and hidden.device_id == ids[0]
    assert "--pid=host" in (hidden.hint or "")
    (event,) = reading.events
    assert (event.kind, event.device_id, event.severity, event.data["xid"]) == (
        "xid",
        ids[1],
        "critical",
        79,
    )
    assert [d.mig_enabled for d in reading.devices] == [False, True]
    again = collector.collect(Tick(Roots(), 1_001_000))
    assert again.events == ()  # drained once


def test_old_driver_falls_back_to_v1_memory_and_v2_processes(procs: dict[str, int]) -> None:
    _, lib, reading = collect("old-driver-470", procs)
    (dev,) = reading.devices
    assert dev.used_bytes == 9200 * MIB  # v1 'used' includes the reserved 200 MiB
    assert dev.reserved_bytes is None
    assert {m.pid: m.vram_bytes for m in reading.memory} == {procs["llama"]: 8900 * MIB}
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in lib.calls
    assert "nvmlDeviceGetMemoryInfo" in lib.calls


def test_one_unsupported_call_never_aborts_the_sample(procs: dict[str, int]) -> None:
    scenario = nvml_fake.load("rtx4060")
    dev = scenario["devices"][0]
    dev["util"] = dev["temp_c"] = dev["bus_id"] = "not_supported"
    scenario["missing_symbols"] = ["nvmlDeviceGetMigMode", "nvmlDeviceGetPowerUsage"]
    _, _, reading = collect(scenario, procs)
    (sample,) = reading.devices
    assert (
        sample.util_pct,
        sample.temp_c,
        sample.pci_bus_id,
        sample.mig_enabled,
        sample.power_w,
    ) == (None, None, None, None, None)
    assert sample.used_bytes == 7021 * MIB
    assert len(reading.memory) == 2


def test_driver_not_loaded_is_no_data_with_the_reason_and_is_retried_later() -> None:
    lib = nvml_fake.install("no-driver")
    collector = NvmlCollector(Roots(), CollectorOptions(), lib=lib)
    with pytest.raises(NoData, match="kernel driver is not loaded"):
        collector.collect(Tick(Roots(), 0))
    with pytest.raises(NoData):
        collector.collect(Tick(Roots(), 30_000))
    assert lib.calls.count("nvmlInitWithFlags") == 1  # not retried within 60 s
    with pytest.raises(NoData):
        collector.collect(Tick(Roots(), 61_000))
    assert lib.calls.count("nvmlInitWithFlags") == 2


def test_no_library_at_all_is_no_data() -> None:
    # This machine has no libnvidia-ml.so.1: pynvml's real CDLL load fails.
    collector = NvmlCollector(Roots(), CollectorOptions())
    with pytest.raises(NoData, match=r"libnvidia-ml\.so\.1 not found"):
        collector.collect(Tick(Roots(), 0))


def test_status_json_end_to_end_on_the_fake_driver(procs: dict[str, int]) -> None:
    script = (
        "import sys, nvml_fake\n"
        f"nvml_fake.install('rtx4060', {procs!r})\n"
        "from monitor.cli.main import main\n"
        "sys.argv = ['vramscope', 'status', '--json']\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "fakes")}
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    dev = next(d for d in doc["devices"] if d["collector"] == "nvml")
    assert dev["used_bytes"] == 7021 * MIB and dev["name"] == "NVIDIA GeForce RTX 4060"
    llama = next(p for p in doc["processes"] if p["pid"] == procs["llama"])
    assert llama["memory"][dev["device_id"]] == {"vram_bytes": 5734 * MIB}
    assert "gpu" in llama["reasons"]
    assert {r["collector"]: r["status"] for r in doc["collectors"]}["nvml"] == "ok"


def test_memory_clock_comes_from_nvml_clock_info(procs: dict[str, int]) -> None:
    _, lib, reading = collect("rtx4060", procs)
    (dev,) = reading.devices
    assert dev.mem_clock_mhz == 8500.0  # nvmlDeviceGetClockInfo(NVML_CLOCK_MEM), MHz
    assert "nvmlDeviceGetClockInfo" in lib.calls
    _, _, reading = collect("two-gpus", procs)
    assert [d.mem_clock_mhz for d in reading.devices] == [2619.0, 2619.0]


@pytest.mark.parametrize("answer", ["not_supported", {"error": 4}, 0, "missing_symbol"])
def test_memory_clock_the_driver_cannot_give_is_unknown(
    procs: dict[str, int], answer: object
) -> None:
    scenario = nvml_fake.load("rtx4060")
    dev = scenario["devices"][0]
    if answer == "missing_symbol":  # a driver without the call (or an old recording)
        scenario["missing_symbols"] = ["nvmlDeviceGetClockInfo"]
    else:
        dev["clock_mem_mhz"] = answer
    _, _, reading = collect(scenario, procs)
    (sample,) = reading.devices
    assert sample.mem_clock_mhz is None
    assert (sample.temp_c, sample.power_w, sample.used_bytes) == (66.0, 112.345, 7021 * MIB)


def test_gb10_memory_clock_is_unknown(procs: dict[str, int]) -> None:
    _, _, reading = collect("gb10", procs)
    (dev,) = reading.devices
    assert dev.mem_clock_mhz is None  # the scenario answers NOT_SUPPORTED
