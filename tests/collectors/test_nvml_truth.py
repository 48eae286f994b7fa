"""Measured memory that is true on every surface (issue 16, items 2-4), on the fake driver.

Each test samples through the real Sampler and pynvml's real ctypes code with only the C
library replaced (tests/fakes/nvml_fake.py); the pids are real sleeping processes, and a
pid above ``pid_max`` stands for a process in another PID namespace (none can exist here).
What the sample gives is then read back through each surface: the memory picture the TUI
draws, ``status`` text and JSON, ``/metrics``, and the database the TUI reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import nvml_fake
import pytest

from collectors.base import Roots, Snapshot
from monitor.analysis.picture import picture_from_snapshot
from monitor.daemon.sampler import Sampler
from monitor.http.metrics import build_registry, render
from monitor.report.status import render_text, to_json
from monitor.store.database import Store
from tui.source import StoreSource

MIB, GIB = 1024**2, 1024**3
ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())

pytestmark = pytest.mark.usefixtures("fresh_pynvml")


def sample(scenario: str | dict, pids: dict[str, int]) -> Snapshot:
    nvml_fake.install(scenario, pids)
    sampler = Sampler(Roots(), enabled=["nvml", "procfs"], timeout_s=None)
    try:
        return sampler.sample()
    finally:
        sampler.close()


def nvidia(snap: Snapshot, index: int = 0):
    return [d for d in snap.devices if d.collector == "nvml"][index]


# -- item 3: the driver's reserve is counted once ------------------------------------------


def test_others_and_free_count_the_reserve_once(procs: dict[str, int]) -> None:
    """rtx4060: total 8188, v2 used 7021 (reserve excluded), reserved 301, free 866 MiB;
    llama-server 5734 + draft 1187 MiB. Unattributed = 7021 - 6921 = 100 MiB, and the bar
    (models + others + reserved + free) adds up to the total with free = the driver's free."""
    snap = sample("rtx4060", procs)
    dev = nvidia(snap)
    pic = picture_from_snapshot(snap).devices[dev.device_id]
    models = sum(u.bytes for u in pic.processes)
    assert models == (5734 + 1187) * MIB
    assert pic.others_bytes == 100 * MIB
    assert pic.available_bytes == 866 * MIB == dev.free_bytes
    bar_free = pic.capacity_bytes - models - pic.others_bytes - pic.reserved_bytes
    assert bar_free == pic.available_bytes  # the bar's free is the header's room + margin


def test_an_old_driver_v1_used_holds_the_reserve_and_is_not_cut_twice(
    procs: dict[str, int],
) -> None:
    """v1 (driver 470): used 9200 MiB includes the 200 MiB reserve, reserved unknown."""
    snap = sample("old-driver-470", procs)
    dev = nvidia(snap)
    pic = picture_from_snapshot(snap).devices[dev.device_id]
    assert dev.reserved_bytes is None
    assert pic.others_bytes == dev.used_bytes - 8900 * MIB
    assert pic.available_bytes == dev.total_bytes - dev.used_bytes


# -- item 2: memory of processes we cannot see is kept -------------------------------------


def _foreign(pid: int) -> dict:
    """two-gpus with its foreign pid moved above pid_max (no process here can have it)."""
    scenario = nvml_fake.load("two-gpus")
    row = next(r for r in scenario["devices"][0]["compute"] if r["pid"] == 4194000)
    row["pid"] = pid
    return scenario


def test_a_hidden_process_keeps_its_bytes_on_every_surface(
    procs: dict[str, int], tmp_path: Path
) -> None:
    hidden_pid = nvml_fake._pid_max() + 1
    snap = sample(_foreign(hidden_pid), procs)
    gpu0 = nvidia(snap, 0)
    hidden_bytes = 2097152000  # NVML's figure for it (2000 MiB)
    (h,) = [h for h in snap.hidden if h.pid == hidden_pid]
    assert (h.device_id, h.used_bytes) == (gpu0.device_id, hidden_bytes)
    assert "--pid=host" in (h.hint or "")

    # the picture (TUI bar): a row of its own, and counted as attributed, not "others"
    pic = picture_from_snapshot(snap).devices[gpu0.device_id]
    rows = {u.pid: u for u in pic.processes}
    assert rows[hidden_pid].bytes == hidden_bytes and rows[hidden_pid].hidden
    assert pic.others_bytes == gpu0.used_bytes - 39845888000 - hidden_bytes  # 100 MiB
    assert pic.others_bytes == 100 * MIB

    # status --json (and its schema) and the text table
    doc = to_json(snap)
    jsonschema.validate(doc, SCHEMA)
    (row,) = [r for r in doc["hidden"] if r["pid"] == hidden_pid]
    assert row["used_bytes"] == hidden_bytes and row["device_id"] == gpu0.device_id
    text = render_text(snap)
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{hidden_pid} "))
    assert "2.0 GiB" in line and "hidden" in line

    # /metrics
    body = render(build_registry(lambda: snap)).decode()
    assert (
        f'vramscope_hidden_process_memory_bytes{{device="{gpu0.device_id}",'
        f'pid="{hidden_pid}"}} 2.097152e+09'
    ) in body

    # the database, as the TUI's database source reads it back
    frame = frame_via_database(tmp_path / "v.db", snap)
    back = frame.picture.devices[gpu0.device_id]
    assert {u.pid: u.bytes for u in back.processes}[hidden_pid] == hidden_bytes
    assert back.others_bytes == 100 * MIB
    assert [(x.pid, x.used_bytes) for x in frame.snapshot.hidden] == [(hidden_pid, hidden_bytes)]


# -- item 4: NVIDIA unified memory --------------------------------------------------------


def _meminfo_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def test_gb10_holds_its_gpu_total_beside_the_shared_host_pool(procs: dict[str, int]) -> None:
    scenario = nvml_fake.load("gb10")
    held = _meminfo_total() // 4 // GIB * GIB or GIB  # the fixture's 61 GiB, scaled to this box
    scenario["devices"][0]["compute"][0]["used"] = held
    snap = sample(scenario, procs)
    dev = nvidia(snap)
    host = next(d for d in snap.devices if d.device_id == "host")
    assert dev.memory_kind == "unified"
    assert dev.total_bytes == host.total_bytes  # the same pool ...
    assert dev.shares_pool_with == "host"  # ... and said so
    assert dev.processes_used_bytes == held  # what NVML says the GPU's processes hold
    doc = to_json(snap)
    jsonschema.validate(doc, SCHEMA)
    gb10 = next(d for d in doc["devices"] if d["device_id"] == dev.device_id)
    assert gb10["shares_pool_with"] == "host" and gb10["processes_used_bytes"] == held
    line = next(ln for ln in render_text(snap).splitlines() if ln.startswith("GPU0 "))
    assert "shares the host pool" in line and f"GPU processes {held // GIB}.0 GiB" in line
    assert "more than the pool" not in line
    assert not [e for e in snap.events if e.kind == "unified_pool_exceeded"]


def test_gb10_warns_once_when_the_gpu_holds_more_than_the_pool(procs: dict[str, int]) -> None:
    scenario = nvml_fake.load("gb10")
    over = _meminfo_total() + GIB
    scenario["devices"][0]["compute"][0]["used"] = over
    lib = nvml_fake.install(scenario, procs)
    sampler = Sampler(Roots(), enabled=["nvml", "procfs"], timeout_s=None)
    try:
        first, second = sampler.sample(), sampler.sample()
    finally:
        sampler.close()
    assert lib.calls  # the fake driver answered
    (event,) = [e for e in first.events if e.kind == "unified_pool_exceeded"]
    assert event.severity == "warning" and event.data["processes_used_bytes"] == over
    assert not [e for e in second.events if e.kind == "unified_pool_exceeded"]  # once
    line = next(ln for ln in render_text(second).splitlines() if ln.startswith("GPU0 "))
    assert "more than the pool" in line


# -- issue 20: the memory clock, collected and shown ---------------------------------------


def test_the_memory_clock_on_every_surface(procs: dict[str, int], tmp_path: Path) -> None:
    """rtx4060 answers nvmlDeviceGetClockInfo(NVML_CLOCK_MEM) = 8500 MHz: status text and
    JSON (what /api/v1/snapshot serves, and what a remote view rebuilds), /metrics in hertz,
    and the database the TUI's database source and ``--at`` read."""
    from monitor.analysis.picture import snapshot_from_status_json

    snap = sample("rtx4060", procs)
    dev = nvidia(snap)
    assert dev.mem_clock_mhz == 8500.0

    line = next(ln for ln in render_text(snap).splitlines() if ln.startswith("GPU0 "))
    assert "mem 8500 MHz" in line, line

    doc = to_json(snap)
    jsonschema.validate(doc, SCHEMA)
    row = next(d for d in doc["devices"] if d["device_id"] == dev.device_id)
    assert row["mem_clock_mhz"] == 8500.0
    remote = snapshot_from_status_json(json.loads(json.dumps(doc)))
    assert nvidia(remote).mem_clock_mhz == 8500.0

    body = render(build_registry(lambda: snap)).decode()
    uuid = dev.device_id.removeprefix("nvml:")  # NVML's UUID, as dcgm-exporter labels it
    assert uuid.startswith("GPU-")
    assert (
        f'vramscope_device_memory_clock_hertz{{UUID="{uuid}",device="{dev.device_id}",'
        'device_type="dedicated",gpu="0",modelName="NVIDIA GeForce RTX 4060",'
        'name="NVIDIA GeForce RTX 4060"} 8.5e+09'
    ) in body

    frame = frame_via_database(tmp_path / "v.db", snap)
    assert nvidia(frame.snapshot).mem_clock_mhz == 8500.0

    # a driver without the figure: every surface leaves it out, never shows 0
    scenario = nvml_fake.load("rtx4060")
    scenario["devices"][0]["clock_mem_mhz"] = "not_supported"
    snap = sample(scenario, procs)
    line = next(ln for ln in render_text(snap).splitlines() if ln.startswith("GPU0 "))
    assert "MHz" not in line, line
    assert (
        "vramscope_device_memory_clock_hertz{" not in render(build_registry(lambda: snap)).decode()
    )


def frame_via_database(db: Path, snap):  # noqa: ANN001, ANN201
    """Write one snapshot to a fresh database and read it back as the TUI's database
    source does."""
    store = Store.open(db)
    store.write(snap)
    store.close()
    source = StoreSource(db)
    try:
        return source.latest()
    finally:
        source.close()
