"""Nothing silently dropped (issue 29 point 6): 8 GPUs x 16 processes on a box with
``max_tracked = 64`` are all tracked (the cap bounds the top-N host-memory list only), and
what the cap leaves out of that list is counted, in processes and bytes, by ``status``
(text and ``--json``) and ``/metrics``. The driver is tests/fakes/nvml_fake.py (only the C
library is fake), the ``/proc`` a fixture tree the collectors read as they read the real
one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import jsonschema
import nvml_fake
import pytest

from collectors.base import CollectorOptions, Roots, Snapshot, Untracked
from monitor.daemon.sampler import Sampler
from monitor.http.metrics import build_registry, render
from monitor.report.status import render_text, to_json

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())
MIB = 1024 * 1024
PAGE = 4096
GPUS, PER_GPU = 8, 16
GPU_PIDS = [1000 + i for i in range(GPUS * PER_GPU)]
BIG_PIDS = [5000 + i for i in range(8)]  # no GPU memory, the biggest by resident memory
BIG_PAGES = 262_144  # 1 GiB resident each


def _process(proc: Path, pid: int, comm: str, argv: list[str], pages: int) -> None:
    d = proc / str(pid)
    d.mkdir()
    rest = ["S", "1"] + ["0"] * 17 + [str(100 + pid)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
    (d / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    kib = pages * PAGE // 1024
    (d / "status").write_text(
        f"Name:\t{comm}\nState:\tS (sleeping)\nUid:\t1000\t1000\t1000\t1000\n"
        f"RssAnon:\t{kib} kB\nRssFile:\t0 kB\nRssShmem:\t0 kB\nVmSwap:\t0 kB\n"
    )
    (d / "statm").write_text(f"{pages} {pages} 0 0 0 0 0\n")


@pytest.fixture
def roots(tmp_path: Path) -> Roots:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text(
        "MemTotal: 67108864 kB\nMemFree: 20000000 kB\nMemAvailable: 30000000 kB\n"
    )
    (proc / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    for pid in GPU_PIDS:
        _process(proc, pid, "gpu-worker", ["gpu-worker", "--rank", str(pid)], 256)
    for pid in BIG_PIDS:
        _process(proc, pid, "java", ["java", "-jar", "big.jar"], BIG_PAGES)
    return Roots(proc=proc, sys=tmp_path / "sys")


def _scenario() -> dict[str, object]:
    template = nvml_fake.load("two-gpus")["devices"][0]
    devices = []
    for g in range(GPUS):
        dev = json.loads(json.dumps(template))
        dev["uuid"] = f"GPU-00000000-0000-0000-0000-0000000000{g:02d}"
        dev["bus_id"] = f"00000000:{0x18 + g:02x}:00.0"
        dev["mig"] = [0, 0]
        dev.pop("events", None)
        pids = GPU_PIDS[g * PER_GPU : (g + 1) * PER_GPU]
        dev["compute"] = [{"pid": pid, "used": 2 * 1024 * MIB} for pid in pids]
        dev["graphics"] = []
        devices.append(dev)
    return {
        "_source": "8 x H100, 16 processes each (invented)",
        "driver": "550.54.15",
        "devices": devices,
    }


@pytest.fixture
def sample(roots: Roots) -> Iterator[Callable[[int], Snapshot]]:
    nvml_fake.install(_scenario())
    samplers: list[Sampler] = []

    def take(max_tracked: int) -> Snapshot:
        options = CollectorOptions(top_n=5, max_tracked=max_tracked, pss_per_tick=0)
        sampler = Sampler(roots, options, enabled=["nvml", "procfs"])
        samplers.append(sampler)
        return sampler.sample(1_700_000_100_000)

    yield take
    for sampler in samplers:
        sampler.close()


def _metric(body: str, name: str) -> float:
    (line,) = [ln for ln in body.splitlines() if ln.startswith(name + " ")]
    return float(line.split()[1])


def test_every_gpu_process_is_tracked_past_max_tracked_and_the_rest_is_counted(
    sample: Callable[[int], Snapshot],
) -> None:
    snap = sample(64)
    gpu_rows = {m.pid for m in snap.memory if m.device_id.startswith("nvml:")}
    assert gpu_rows == set(GPU_PIDS)  # the driver's view: 128 processes on 8 GPUs
    tracked = {p.pid: p for p in snap.processes}
    assert set(GPU_PIDS) <= set(tracked)  # all 128, whatever max_tracked = 64 says
    assert all(tracked[pid].reasons == ("gpu",) for pid in GPU_PIDS)
    assert not set(BIG_PIDS) & set(tracked)  # the top-N list found the cap full
    assert snap.untracked == Untracked(5, 5 * BIG_PAGES * PAGE)
    assert not snap.hidden

    body = render(build_registry(lambda: snap)).decode()
    assert _metric(body, "vramscope_untracked_processes") == 5
    assert _metric(body, "vramscope_untracked_bytes") == 5 * BIG_PAGES * PAGE
    measured = [ln for ln in body.splitlines() if ln.startswith("vramscope_process_measured")]
    assert len(measured) == len(GPU_PIDS)

    text = render_text(snap)
    assert "Untracked: 5 processes of the top-memory list hold 5.0 GiB" in text
    doc = to_json(snap)
    jsonschema.validate(doc, SCHEMA)
    assert doc["untracked"] == {"processes": 5, "bytes": 5 * BIG_PAGES * PAGE}


def test_room_under_max_tracked_leaves_nothing_out(sample: Callable[[int], Snapshot]) -> None:
    snap = sample(1000)
    tracked = {p.pid for p in snap.processes}
    assert set(GPU_PIDS) <= tracked
    assert len(set(BIG_PIDS) & tracked) == 5  # the top 5 by resident memory
    assert snap.untracked == Untracked(0, 0)
    body = render(build_registry(lambda: snap)).decode()
    assert _metric(body, "vramscope_untracked_processes") == 0
    assert _metric(body, "vramscope_untracked_bytes") == 0
    assert "Untracked" not in render_text(snap)
    assert to_json(snap)["untracked"] == {"processes": 0, "bytes": 0}


def test_a_top_list_partly_over_the_cap_counts_only_what_it_left_out(
    sample: Callable[[int], Snapshot],
) -> None:
    snap = sample(GPUS * PER_GPU + 2)  # room for two of the top five
    tracked = {p.pid for p in snap.processes}
    assert len(set(BIG_PIDS) & tracked) == 2
    assert snap.untracked == Untracked(3, 3 * BIG_PAGES * PAGE)
