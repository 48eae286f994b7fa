"""The NVML recorder (collectors/nvml_recorder.py) against the fake driver, round trip included.

Each scenario is installed, recorded with :func:`record_nvml`, and the recording replayed
through the fake (``nvml_fake.replay``): the real collector must read the same devices and
per-process memory from both, process ids mapped through the recorded names. Recordings
committed under tests/fixtures/nvml (``"_recorded": true``) are replayed the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nvml_fake
import pytest

from collectors.base import CollectorOptions, Reading, Roots, Tick
from collectors.nvml import NvmlCollector
from collectors.nvml_recorder import (
    NvmlUnavailable,
    argv0_basename,
    record_nvml,
)

MIB = 1024**2
MEMINFO = b"MemTotal: 131072000 kB\nMemFree: 1000000 kB\nMemAvailable: 65536000 kB\n"
FIXTURES = ["rtx4060", "a100-535", "old-driver-470", "gb10", "two-gpus"]
RECORDED = sorted(
    p.stem for p in nvml_fake.FIXTURES.glob("*.json") if json.loads(p.read_text()).get("_recorded")
)


pytestmark = pytest.mark.usefixtures("fresh_pynvml")


@pytest.fixture
def roots(tmp_path: Path) -> Roots:
    """A fixed /proc/meminfo (unified devices read their pool there) so two reads agree;
    process visibility still comes from the real /proc (the Tick's roots)."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_bytes(MEMINFO)
    return Roots(proc=tmp_path / "proc")


def read(lib: nvml_fake.FakeNvmlLib, roots: Roots) -> Reading:
    collector = NvmlCollector(roots, CollectorOptions(), lib=lib)
    try:
        return collector.collect(Tick(Roots(), 1_000_000))
    finally:
        collector.close()


def by_name(reading: Reading, names: dict[int, str]) -> dict[str, Any]:
    """The reading with every pid replaced by its recorded name."""
    return {
        "devices": reading.devices,
        "memory": sorted((names[m.pid], m.device_id, m.vram_bytes) for m in reading.memory),
        "hidden": sorted((names[h.pid], h.device_id, h.hint) for h in reading.hidden),
    }


def pid_names(recording: dict[str, Any]) -> dict[int, str]:
    return {info["pid"]: name for name, info in recording["_processes"].items()}


def record() -> dict[str, Any]:
    recording = record_nvml()
    assert json.loads(json.dumps(recording)) == recording  # what capture writes is all of it
    return recording


def renamed(recording: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]]:
    """The recording's devices with process names translated through ``names``."""
    devices = json.loads(json.dumps(recording["devices"]))
    for dev in devices:
        for key in ("compute", "graphics"):
            for row in dev[key]:
                row["pid"] = names.get(row["pid"], row["pid"])
    return devices


def round_trip(
    scenario: dict[str, Any] | str, procs: dict[str, int], roots: Roots
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(recording, the original read by name, the replay read by name); also checks that
    recording the replay gives the recording back."""
    original = read(nvml_fake.install(scenario, procs), roots)
    recording = record()
    with nvml_fake.replay(recording) as (lib, pids):
        replayed = read(lib, roots)
        again = record()
    back = {pid: name for name, pid in pids.items()}
    second_to_first = {name: back[info["pid"]] for name, info in again["_processes"].items()}
    assert renamed(again, second_to_first) == recording["devices"]
    assert again["missing_symbols"] == recording["missing_symbols"]
    assert again["process_struct_bytes"] == recording["process_struct_bytes"]
    return recording, by_name(original, pid_names(recording)), by_name(replayed, back)


def variant(name: str) -> dict[str, Any]:
    """Scenarios for the process APIs and failures the fixtures do not cover."""
    if name == "v3-24":  # _v3 without the confidential-computing symbol: 24-byte records
        scenario = nvml_fake.load("a100-535")
        scenario["missing_symbols"] += ["nvmlDeviceGetConfComputeMemSizeInfo"]
        scenario["process_struct_bytes"] = 24
    elif name == "v1-16":  # only the unversioned calls: 16-byte records
        scenario = nvml_fake.load("old-driver-470")
        scenario["missing_symbols"] += [
            "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetGraphicsRunningProcesses_v2",
        ]
        scenario["process_struct_bytes"] = 16
    else:  # "failures": other return codes, v2 memory failing alone, a 3 that is a value
        scenario = nvml_fake.load("rtx4060")
        first = scenario["devices"][0]
        first.update(memory_v2={"error": 999}, power_mw={"error": 4}, temp_c=3)
        second = json.loads(json.dumps(first))
        del second["memory_v2"]
        second.update(
            uuid="GPU-4060bbbb-1111-2222-3333-444455556666",
            memory={"error": 999},
            util="not_supported",
            event_types=3,
            compute=[{"pid": "idle", "used": 0}],
            graphics=[],
        )
        scenario["devices"].append(second)
        scenario["missing_symbols"] = ["nvmlDeviceGetMigMode"]
    return scenario


@pytest.mark.parametrize("name", FIXTURES + ["v3-24", "v1-16", "failures"])
def test_recording_replays_to_the_same_reading(
    name: str, procs: dict[str, int], roots: Roots
) -> None:
    scenario = nvml_fake.load(name) if name in FIXTURES else variant(name)
    recording, original, replayed = round_trip(scenario, procs, roots)
    assert original["memory"]  # every scenario has processes: the comparison is not empty
    assert replayed == original
    assert recording["process_struct_bytes"] == scenario.get("process_struct_bytes", 24)
    assert sorted(recording["missing_symbols"]) == sorted(scenario.get("missing_symbols", []))
    assert recording["_recorded"] is True
    assert recording["driver"] == scenario["driver"]
    assert recording["_source"].startswith("recorded by vramscope capture on ")
    assert f"driver {scenario['driver']}" in recording["_source"]
    assert recording["_source"].endswith("; pids renamed")
    assert all("events" not in dev for dev in recording["devices"])  # never recorded


def test_the_recorded_fields_and_process_names(procs: dict[str, int], roots: Roots) -> None:
    recording, original, _ = round_trip("two-gpus", procs, roots)
    llama = f"sleep-{procs['llama']}"
    assert recording["_processes"] == {
        llama: {"pid": procs["llama"], "comm": "sleep", "argv0": "sleep", "visible": True},
        "hidden-4194000": {"pid": 4194000, "comm": None, "argv0": None, "visible": False},
    }
    first, second = recording["devices"]
    assert first["compute"] == [
        {"pid": llama, "used": 39845888000},
        {"pid": "hidden-4194000", "used": 2097152000},
    ]
    assert second["mig"] == [1, 1] and second["bus_id"] == "00000000:2a:00.0"
    assert [d["clock_mem_mhz"] for d in recording["devices"]] == [2619, 2619]
    assert recording["_process_api"] == "detail"
    assert "2x NVIDIA H100 80GB HBM3" in recording["_source"]
    assert original["hidden"] == [
        ("hidden-4194000", "nvml:" + first["uuid"], original["hidden"][0][2])
    ]


def test_failures_are_recorded_as_the_fake_writes_them(procs: dict[str, int], roots: Roots) -> None:
    recording, original, _ = round_trip(variant("failures"), procs, roots)
    first, second = recording["devices"]
    # v2 failed alone: v1's figures, whose 'used' counts the reserved memory
    assert first["memory_v2"] == {"error": 999}
    assert first["memory"] == {
        "total": 8585740288,
        "used": 7362052096 + 315621376,
        "free": 908066816,
        "reserved": 0,
    }
    assert (first["power_mw"], first["temp_c"], first["mig"]) == ({"error": 4}, 3, "not_supported")
    assert (second["memory"], second["util"], second["event_types"]) == (
        {"error": 999},
        "not_supported",
        3,
    )
    dev0, dev1 = original["devices"]
    assert (dev0.used_bytes, dev0.reserved_bytes, dev0.temp_c, dev0.power_w) == (
        7021 * MIB + 301 * MIB,
        None,
        3.0,
        None,
    )
    # an error other than NOT_SUPPORTED is no figure, not a unified device
    assert (dev1.memory_kind, dev1.total_bytes, dev1.util_pct) == ("dedicated", None, None)


def test_detail_list_unknown_figure_is_recorded_as_unknown(procs: dict[str, int]) -> None:
    scenario = nvml_fake.load("rtx4060")
    scenario["devices"][0]["compute"][1]["used"] = None  # NVML_VALUE_NOT_AVAILABLE
    nvml_fake.install(scenario, procs)
    rows = record()["devices"][0]["compute"]
    assert [r["used"] for r in rows] == [6012534784, None]


def test_collector_reads_a_detail_list_with_an_unknown_figure(
    procs: dict[str, int], roots: Roots
) -> None:
    scenario = nvml_fake.load("rtx4060")
    scenario["devices"][0]["compute"][1]["used"] = None
    reading = read(nvml_fake.install(scenario, procs), roots)
    assert {m.pid: m.vram_bytes for m in reading.memory}[procs["draft"]] is None


_OPENED: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], str | bytes | Path):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


def test_no_argv_beyond_argv0_basename_nor_environ_is_recorded(procs: dict[str, int]) -> None:
    global _OPENED
    secret = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "--api-key", "SECRET_ARG_42"],
        env={**os.environ, "HF_TOKEN": "SECRET_ENV_42"},
    )
    try:
        # the secrets are there to be found: the test would catch a leak (on a busy machine
        # the new process's cmdline may read empty for a moment)
        deadline = time.monotonic() + 30
        while (
            b"SECRET_ARG_42" not in Path(f"/proc/{secret.pid}/cmdline").read_bytes()
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        assert b"SECRET_ARG_42" in Path(f"/proc/{secret.pid}/cmdline").read_bytes()
        assert b"SECRET_ENV_42" in Path(f"/proc/{secret.pid}/environ").read_bytes()
        nvml_fake.install("rtx4060", {**procs, "llama": secret.pid})
        _OPENED = []
        try:
            recording = record()
        finally:
            opened, _OPENED = _OPENED, None
    finally:
        secret.kill()
        secret.wait()
    text = json.dumps(recording)
    for leak in ("SECRET", "--api-key", "HF_TOKEN", "import time", os.path.dirname(sys.executable)):
        assert leak not in text
    per_process = sorted(p.rsplit("/", 1)[-1] for p in opened if p.startswith("/proc/"))
    assert per_process == ["cmdline", "cmdline", "comm", "comm"]  # two processes, no environ
    name = next(n for n, info in recording["_processes"].items() if info["pid"] == secret.pid)
    assert recording["_processes"][name]["argv0"] == os.path.basename(sys.executable)
    assert name == f"{recording['_processes'][name]['comm']}-{secret.pid}"
    rows = [r for d in recording["devices"] for k in ("compute", "graphics") for r in d[k]]
    assert rows and all(isinstance(r["pid"], str) for r in rows)  # names, not pids


@pytest.mark.parametrize(
    ("cmdline", "argv0"),
    [
        (b"/opt/llama/bin/llama-server\0--api-key\0SECRET\0", "llama-server"),
        (b"nginx: master process /usr/sbin/nginx -c /etc/nginx.conf", "nginx:"),
        (b"python3\0-m\0vllm.entrypoints.openai.api_server\0", "python3"),
        (b"", None),
        (b"\0", None),
    ],
)
def test_argv0_basename(cmdline: bytes, argv0: str | None) -> None:
    assert argv0_basename(cmdline) == argv0


def test_no_library_is_nvml_unavailable_with_the_reason() -> None:
    # This machine has no libnvidia-ml.so.1: pynvml's real CDLL load fails.
    with pytest.raises(NvmlUnavailable, match=r"libnvidia-ml\.so\.1 not found") as info:
        record_nvml()
    assert "\n" not in info.value.reason and str(info.value) == info.value.reason


def test_driver_not_loaded_and_no_device_are_nvml_unavailable() -> None:
    nvml_fake.install("no-driver")
    with pytest.raises(NvmlUnavailable, match="kernel driver is not loaded"):
        record_nvml()
    nvml_fake.install({"driver": "570.133.07", "devices": []})
    with pytest.raises(NvmlUnavailable, match="no NVIDIA device"):
        record_nvml()


@pytest.mark.parametrize("name", RECORDED)
def test_committed_recording_replays(name: str, roots: Roots) -> None:
    """A real driver's recording (``vramscope capture`` -> nvml.json, committed here)."""
    recording = nvml_fake.load(name)
    with nvml_fake.replay(recording) as (lib, pids):
        reading = read(lib, roots)
        again = record()
    assert [d.device_id for d in reading.devices] == [
        f"nvml:{d['uuid']}" if isinstance(d["uuid"], str) else f"nvml:index{i}"
        for i, d in enumerate(recording["devices"])
    ]
    names = {pid: name for name, pid in pids.items()}
    expected = {
        (row["pid"], f"nvml:{d['uuid']}")
        for d in recording["devices"]
        for k in ("compute", "graphics")
        for row in d[k]
        if row["pid"] != 0
    }
    got = by_name(reading, names)
    assert {(n, dev) for n, dev, _ in got["memory"] + got["hidden"]} == expected
    back = {pid: name for name, pid in pids.items()}
    second_to_first = {n: back[info["pid"]] for n, info in again["_processes"].items()}
    assert renamed(again, second_to_first) == recording["devices"]


def test_vramscope_capture_writes_the_drivers_answers(
    procs: dict[str, int], tmp_path: Path
) -> None:
    """`capture()` end to end on the fake driver: the collector read it, and nvml.json is a
    recording that replays to the same devices."""
    from monitor.cli.capture import capture

    nvml_fake.install(nvml_fake.load("rtx4060"), procs)
    result = capture(Roots(), tmp_path / "box", enabled=["nvml", "procfs"])
    assert result.collectors["nvml"] == "ok" and result.nvml == "nvml.json"
    recording = json.loads((tmp_path / "box" / "nvml.json").read_text())
    assert recording["_recorded"] is True
    assert [d["uuid"] for d in recording["devices"]] == [
        d["uuid"] for d in nvml_fake.load("rtx4060")["devices"]
    ]
    assert json.loads((tmp_path / "box" / "capture.json").read_text())["nvml"] == "nvml.json"
