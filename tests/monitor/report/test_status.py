"""``vramscope status`` at 80 and 200 columns (issue 34, Terminal): the device rows fit,
the process table drops the host RSS parts, the reasons and the engine before it lets
the GPU amount or the command go, nothing is cut mid-word without an ellipsis, a pipe
gets every line whole, and every device has one name (``GPU0 H100 80GB HBM3``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nvml_fake
import pytest

from collectors.base import (
    DeviceSample,
    HiddenProcess,
    ProcessInfo,
    ProcessMemory,
    Roots,
    Snapshot,
)
from monitor.daemon.sampler import Sampler
from monitor.device_names import device_labels
from monitor.report.status import output_width, render_text
from monitor.units import GIB, MIB

ROOT = Path(__file__).resolve().parents[3]
GPU_A, GPU_B = "nvml:GPU-h100dddd-0000-2222-3333-444455556666", "nvml:GPU-h100eeee-1111"
LONG = "qwen3-coder-30b-a3b-instruct-ud-q4_k_xl-with-a-very-long-name-{}.gguf"


def gpu(device_id: str, used: int) -> DeviceSample:
    return DeviceSample(
        device_id, "nvml", "nvidia", "NVIDIA H100 80GB HBM3", "dedicated", 80 * GIB, used,
        free_bytes=80 * GIB - used, reserved_bytes=500 * MIB, util_pct=50.0, temp_c=41.0,
        power_w=250.0, mem_clock_mhz=2619.0,
    )  # fmt: skip


def host() -> DeviceSample:
    return DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 128 * GIB, 100 * GIB,
        available_bytes=28 * GIB, swap_total_bytes=8 * GIB, swap_free_bytes=7 * GIB,
    )  # fmt: skip


def server(pid: int, i: int) -> ProcessInfo:
    argv = ("/opt/llama.cpp/build/bin/llama-server", "-m", f"/srv/models/{LONG.format(i)}",
            "-c", "32768", "-np", "4", "--port", str(8000 + i))  # fmt: skip
    return ProcessInfo(pid, 1, None, 1, 1000, "llama-server", argv, "llama.cpp", ("inference",))


def two_gpu_box(models: int = 12) -> Snapshot:
    """2 H100s and host RAM, ``models`` llama-servers with long model names, each split
    over both GPUs, and a hidden process NVML still counts."""
    procs = [server(1000 + i, i) for i in range(models)]
    mem = []
    for p in procs:
        mem.append(ProcessMemory(p.pid, GPU_A, vram_bytes=3 * GIB + p.pid * MIB))
        mem.append(ProcessMemory(p.pid, GPU_B, vram_bytes=2 * GIB))
        mem.append(ProcessMemory(p.pid, "host", rss_anon_bytes=GIB, rss_file_bytes=5 * GIB))
    hidden = HiddenProcess(4194000, "outside this PID namespace", GPU_A, used_bytes=2 * GIB)
    devices = (gpu(GPU_B, 40 * GIB), host(), gpu(GPU_A, 42 * GIB))  # not in display order
    return Snapshot(1_800_000_000_000, devices, tuple(procs), tuple(mem), (hidden,), (), ())


def host_only_box() -> Snapshot:
    argv = ("/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
            "/srv/models/Meta-Llama-3.1-8B-Instruct", "--max-model-len", "8192")  # fmt: skip
    p = ProcessInfo(2000, 1, None, 1, 1000, "python3", argv, None, ("top",))
    mem = (ProcessMemory(2000, "host", rss_anon_bytes=3 * GIB, rss_file_bytes=GIB),)
    return Snapshot(1_800_000_000_000, (host(),), (p,), mem, (), (), ())


def words(text: str) -> set[str]:
    return set(text.split())


def assert_whole_or_ellipsis(narrow: str, whole: str, width: int) -> None:
    """Every line fits; every word is a word of the unlimited text or ends in "…"."""
    known = words(whole)
    for line in narrow.splitlines():
        assert len(line) <= width, line
        for word in line.split():
            assert word in known or word.endswith("…"), (word, line)


def process_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if re.match(r"\d+ ", ln)]


@pytest.mark.parametrize("width", [80, 200])
def test_two_gpus_and_long_names_fit_the_width(width: int) -> None:
    snap = two_gpu_box()
    whole = render_text(snap)
    narrow = render_text(snap, width)
    assert_whole_or_ellipsis(narrow, whole, width)
    rows = process_lines(narrow)
    assert len(rows) == 13  # 12 servers and the hidden one: none dropped
    for row in rows[:12]:  # the GPU amounts and the start of the command show
        assert re.search(r"GPU0 4\.0 GiB, GPU1 2\.0 GiB", row), row
        assert "qwen3-coder" in row, row
    assert "GPU0 2.0 GiB" in rows[12] and "[not visible" in rows[12]


def test_at_80_columns_the_host_parts_go_first_and_the_device_detail_moves_down() -> None:
    narrow = render_text(two_gpu_box(), 80).splitlines()
    header = next(ln for ln in narrow if ln.startswith("PID"))
    assert header.split() == ["PID", "MEASURED", "GPU", "COMMAND"]
    gpu0 = narrow.index(next(ln for ln in narrow if ln.startswith("GPU0 H100 80GB HBM3")))
    assert narrow[gpu0 + 1].startswith("    ") and "busy 50%" in narrow[gpu0 + 1]
    assert narrow[gpu0 + 2].startswith("    ") or narrow[gpu0 + 2].startswith("GPU1")
    wide = render_text(two_gpu_box(), 200).splitlines()
    header = next(ln for ln in wide if ln.startswith("PID"))
    assert header.split() == ["PID", "ENGINE", "MEASURED", "ANON", "FILE", "PSS", "GPU", "WHY",
                              "COMMAND"]  # fmt: skip
    row = next(ln for ln in wide if ln.startswith("GPU0 "))
    assert "DETAIL" in wide[0] and "busy 50%" in row  # one line each at 200


def test_devices_listed_by_one_name_in_display_order() -> None:
    text = render_text(two_gpu_box(), 200)
    names = [ln.split("  ")[0] for ln in text.splitlines()[1:4]]
    assert names == ["GPU0 H100 80GB HBM3", "GPU1 H100 80GB HBM3", "host RAM"]
    assert "nvml:" not in text and "GPU-h100" not in text  # the long id stays in the JSON
    assert device_labels([(GPU_B, "NVIDIA H100 80GB HBM3"), ("host", None)]) == {
        GPU_B: "GPU0 H100 80GB HBM3",
        "host": "host RAM",
    }


def test_without_a_gpu_the_command_keeps_its_room() -> None:
    snap = host_only_box()
    narrow = render_text(snap, 80)
    assert_whole_or_ellipsis(narrow, render_text(snap), 80)
    header = next(ln for ln in narrow.splitlines() if ln.startswith("PID"))
    assert "GPU" not in header.split()
    (row,) = process_lines(narrow)
    command = row[header.index("COMMAND") :]
    assert command.startswith("python3 -m vllm.entrypoints.openai.api_")
    assert len(command) >= 40 and command.endswith("…")


def test_a_pipe_gets_every_line_whole_unless_columns_is_set() -> None:
    assert output_width(False, 80, {}) is None
    assert output_width(False, 80, {"COLUMNS": "100"}) == 100
    assert output_width(False, 80, {"COLUMNS": "wide"}) is None
    assert output_width(True, 132, {}) == 132
    whole = render_text(two_gpu_box())
    assert max(map(len, whole.splitlines())) > 170  # nothing cut, nothing wrapped
    assert LONG.format(11) in whole


def test_the_command_fits_columns_80_on_this_box() -> None:
    """The real command, piped, with COLUMNS=80: whatever runs here, every line fits."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    result = subprocess.run(
        [sys.executable, "-m", "monitor", "status"],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("DEVICE")
    assert all(len(ln) <= 80 for ln in result.stdout.splitlines()), result.stdout


@pytest.fixture
def long_sleepers() -> Iterator[dict[str, int]]:
    children = {n: subprocess.Popen(["sleep", "600"]) for n in ("llama", "worker")}
    yield {n: p.pid for n, p in children.items()}
    for p in children.values():
        p.kill()
        p.wait()


@pytest.mark.usefixtures("fresh_pynvml")
def test_the_fake_two_gpu_driver_fits_80_columns(long_sleepers: dict[str, int]) -> None:
    """The real Sampler and pynvml on the fake driver (tests/fakes/nvml_fake.py): two
    H100s, a server split over both and a process from another PID namespace."""
    nvml_fake.install("two-gpus", long_sleepers)
    sampler = Sampler(Roots(), enabled=["nvml", "procfs"], timeout_s=None)
    try:
        snap = sampler.sample()
    finally:
        sampler.close()
    narrow = render_text(snap, 80)
    assert_whole_or_ellipsis(narrow, render_text(snap), 80)
    row = next(ln for ln in narrow.splitlines() if ln.startswith(f"{long_sleepers['llama']} "))
    assert "GPU0 37.1 GiB, GPU1 35.2 GiB" in row and "sleep 600" in row
    assert [ln[:19] for ln in narrow.splitlines() if ln.startswith("GPU")] == [
        "GPU0 H100 80GB HBM3",
        "GPU1 H100 80GB HBM3",
    ]


def test_events_text_names_devices_as_status_does(tmp_path: Path) -> None:
    """An event recorded with a long device id reads with the device's short name in
    ``events`` (the real command on a real database); ``--json`` keeps the id."""
    from monitor.store.database import Store

    db = tmp_path / "v.db"
    store = Store.open(db)
    try:
        store.write(two_gpu_box(models=1))
        store.add_event(
            "surprise", "warning", "llama-server[1000]",
            f"memory surprise: llama-server uses 4.0 GiB on {GPU_A}, estimate 2.0 GiB",
        )  # fmt: skip
    finally:
        store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "monitor", "events", "--db", str(db), "--since", "1w"]
    text = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert text.returncode == 0, text.stderr
    assert "uses 4.0 GiB on GPU0 H100 80GB HBM3, estimate 2.0 GiB" in text.stdout
    assert "nvml:" not in text.stdout
    doc = subprocess.run(
        [*base, "--json"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert doc.returncode == 0, doc.stderr
    assert f"on {GPU_A}," in doc.stdout
