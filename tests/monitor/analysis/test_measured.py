"""One definition of "measured" (monitor/analysis/measured.py) and one judgement
(monitor/analysis/judge.py):
unknown is never judged as 0, "as expected" is relative and absolute, paged-out weights are
named (issue 16, items 1, 7 and 8)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gguf_models as g
import nvml_fake
import pytest

from collectors.base import CollectorOptions, DeviceEvent, ProcessMemory, Roots
from monitor.alerts.rules import AlertSettings, AlertState, evaluate
from monitor.analysis.diagnose import diagnose
from monitor.analysis.judge import Tolerance, is_over
from monitor.analysis.measured import measure
from monitor.cli.diagnose import render, run_diagnose
from monitor.config import Config
from monitor.daemon.sampler import Sampler
from monitor.estimate.model import Component, MemoryEstimate
from monitor.servers.spec import LaunchSpec

MIB, GIB = 1024**2, 1024**3
NOT_AVAILABLE = 2**64 - 1


@pytest.fixture
def server(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process that looks like llama-server, serving a real (sparse) small GGUF."""
    md, tensors = g.qwen3_8b(n_layer=2, n_vocab=4096)
    model = g.write_model(tmp_path / "small.gguf", "qwen3", md, tensors, vocab_size=4096)[0]
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    child = subprocess.Popen(
        [str(exe), "-c", "import time; time.sleep(120)", "-m", str(model), "-c", "4096", "-np", "1"]
    )
    deadline = time.monotonic() + 30
    while (
        b"-np" not in Path(f"/proc/{child.pid}/cmdline").read_bytes()
        and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    yield child
    child.kill()
    child.wait()


def test_gpu_memory_the_driver_does_not_report_is_unknown_not_zero(
    tmp_path: Path, server: subprocess.Popen[bytes], fresh_pynvml: None
) -> None:
    """NVML lists the server on the GPU with NVML_VALUE_NOT_AVAILABLE (WSL2/WDDM): diagnose
    says it cannot judge and why, instead of "holds 0.0 GiB, as expected"."""
    scenario = nvml_fake.load("rtx4060")
    device = scenario["devices"][0]
    device["compute"] = [{"pid": "llama", "used": NOT_AVAILABLE}]
    device["graphics"] = []
    nvml_fake.install(scenario, {"llama": server.pid})
    cfg = Config(db_path=tmp_path / "none.db", collectors=("nvml", "procfs"))
    snap = Sampler(Roots(), CollectorOptions(), cfg.collectors).sample()
    rows = [m for m in snap.memory if m.pid == server.pid]
    assert any(m.device_id.startswith("nvml:") and m.vram_bytes is None for m in rows), rows
    held = measure(server.pid, snap.memory)
    assert held.device_bytes is None and held.total_bytes is None
    assert held.host_anon_bytes is not None  # the host part is still known
    (d,) = run_diagnose(cfg, None, None, server.pid)
    assert d.verdict == "unknown" and d.measured_bytes is None and d.excess_bytes is None
    assert "cannot judge" in d.summary and "not available" in d.summary
    assert "as expected" not in render([d], False)
    assert '"measured_bytes": null' in render([d], True)


def test_unknown_gpu_memory_prints_dash_in_status_text_and_tui(
    tmp_path: Path, server: subprocess.Popen[bytes], fresh_pynvml: None
) -> None:
    """Issue 16 item 1: NVML 'not available' for the server is '-' in `status` text (its GPU
    column and MEASURED), null in the JSON's measured object, and '-' in the TUI's models
    table (measured and difference) and in its GPU bar legend: never 0 B or a difference."""
    from monitor.report.status import render_text, to_json
    from tui.source import FrameBuilder
    from tui.widgets.device_panel import DevicePanel, panels_from_frame
    from tui.widgets.models_table import ModelsTable

    scenario = nvml_fake.load("rtx4060")
    device = scenario["devices"][0]
    device["compute"] = [{"pid": "llama", "used": NOT_AVAILABLE}]
    device["graphics"] = []
    nvml_fake.install(scenario, {"llama": server.pid})
    snap = Sampler(Roots(), CollectorOptions(), ("nvml", "procfs")).sample()
    gpu = next(m.device_id for m in snap.memory if m.pid == server.pid and m.device_id != "host")
    line = next(x for x in render_text(snap).splitlines() if x.startswith(f"{server.pid} "))
    assert "0 B" not in line, line
    assert "GPU0 -" in line  # the GPU column (its short name: monitor/device_names.py)
    assert line.split()[2] == "-"  # MEASURED
    (doc,) = [p for p in to_json(snap)["processes"] if p["pid"] == server.pid]
    assert doc["measured"]["total_bytes"] is None and doc["measured"]["device_bytes"] is None
    assert doc["measured"]["host_anon_bytes"] and doc["measured"]["unknown_device_ids"] == [gpu]
    frame = FrameBuilder().build(snap)
    (row,) = [r for r in frame.models if r.pid == server.pid]
    from tui.widgets.models_table import COLUMNS

    cells = dict(zip(COLUMNS, ModelsTable.cells(row), strict=True))
    cells["delta"] = cells["Δ"]
    assert (cells["measured"], cells["delta"]) == ("-", "-"), cells
    assert cells["estimate"] not in ("-", "?")  # the estimate itself is known
    (panel,) = [d for d in panels_from_frame(frame) if d.picture.device_id == gpu]
    legend = DevicePanel(panel)._lines(panel, 200)[3].plain
    assert f"{row.model} GPU - (measured -)" in legend, legend


def test_known_gpu_memory_is_judged(
    tmp_path: Path, server: subprocess.Popen[bytes], fresh_pynvml: None
) -> None:
    """The same server with its 6 GiB reported: judged, and far over a tiny model's estimate."""
    scenario = nvml_fake.load("rtx4060")
    scenario["devices"][0]["compute"] = [{"pid": "llama", "used": 6 * GIB}]
    scenario["devices"][0]["graphics"] = []
    nvml_fake.install(scenario, {"llama": server.pid})
    cfg = Config(db_path=tmp_path / "none.db", collectors=("nvml", "procfs"))
    (d,) = run_diagnose(cfg, None, None, server.pid)
    assert d.verdict == "over" and d.measured_bytes is not None
    assert d.measured_bytes >= 6 * GIB


def _rows(pid: int, device: int | None, anon: int, file: int) -> list[ProcessMemory]:
    rows = [ProcessMemory(pid, "host", rss_anon_bytes=anon, rss_file_bytes=file)]
    if device is not None:
        rows.append(ProcessMemory(pid, "nvml:GPU-x", vram_bytes=device))
    return rows


def _estimate(device: int, file: int = 0) -> MemoryEstimate:
    parts = [Component("kv", "nvml:GPU-x", device, "test")]
    if file:
        parts.append(Component("weights", "host", file, "test", residency="file"))
    return MemoryEstimate("llama.cpp", "m.gguf", tuple(parts))


SPEC = LaunchSpec("llama.cpp", model_path="m.gguf", ctx_size=4096, n_parallel=1)


@pytest.mark.parametrize(
    ("expected", "measured", "verdict"),
    [
        (256 * MIB, 500 * MIB, "over"),  # +95 % on a small embedding server: a finding
        (20 * MIB, 36 * MIB, "as_expected"),  # 16 MiB over a 20 MiB helper: noise
        (40 * GIB, 40 * GIB + 300 * MIB, "as_expected"),  # +0.7 % on a big model: within error
        (8 * GIB, 10 * GIB, "over"),
    ],
)
def test_as_expected_is_relative_and_absolute(expected: int, measured: int, verdict: str) -> None:
    est = _estimate(expected)
    d = diagnose(1, "m.gguf", SPEC, est, measure(1, _rows(1, measured, 0, 0)), lambda s: est)
    assert d.verdict == verdict, d.summary
    assert ("as expected" in d.summary) == (verdict == "as_expected")


def test_tolerance_is_configurable() -> None:
    assert is_over(500 * MIB, 256 * MIB)
    assert not is_over(500 * MIB, 256 * MIB, Tolerance(over_pct=100.0))
    assert not is_over(500 * MIB, 256 * MIB, Tolerance(over_min_bytes=512 * MIB))
    tol = Tolerance.from_settings({"surprise_pct": 50, "surprise_min_mib": 1024})
    assert (tol.over_pct, tol.over_min_bytes) == (50.0, GIB)


def test_no_surprise_alert_on_noise_of_small_servers() -> None:
    """Two 20 MiB servers 77 % over their estimate: no alert; a 0.25 GiB one 95 % over: one."""
    from collectors.base import Snapshot

    def finished(pid: int, measured: int, estimate: int, ts: int) -> Snapshot:
        ev = DeviceEvent(
            ts,
            "nvml:GPU-x",
            "load_finished",
            "info",
            "loaded",
            {"pid": pid, "measured_nvml:GPU-x": measured, "estimate_nvml:GPU-x": estimate},
        )
        return Snapshot(ts, (), (), (), (), (), (), (ev,))

    state = AlertState()
    fired = []
    for i, (measured, estimate) in enumerate(
        [(int(35.4 * MIB), 20 * MIB), (int(35.4 * MIB), 20 * MIB), (500 * MIB, 256 * MIB)]
    ):
        state, changes = evaluate(
            AlertSettings(), finished(100 + i, measured, estimate, 1000 + i), state, 1000 + i
        )
        fired += [c for c in changes if c.kind == "fired" and c.alert.rule == "surprise"]
    assert [c.alert.data["pid"] for c in fired] == [102]


def test_weights_paged_out_are_named_not_called_as_expected() -> None:
    """mmap'd weights fell from 1.4 GiB to 69 MiB resident under memory pressure."""
    est = _estimate(512 * MIB, file=int(1.4 * GIB))
    d = diagnose(
        1, "m.gguf", SPEC, est, measure(1, _rows(1, 512 * MIB, 50 * MIB, 69 * MIB)), lambda s: est
    )
    assert d.verdict == "under"
    assert "evicted from the page cache" in d.summary and "--mlock" in d.summary
    paged = next(f for f in d.findings if f.component == "weights_paged_out")
    assert paged.bytes == int(1.4 * GIB) - 69 * MIB
    # the same weights resident: as expected; and --mlock / --no-mmap are never "paged out"
    ok = diagnose(
        1,
        "m.gguf",
        SPEC,
        est,
        measure(1, _rows(1, 512 * MIB, 50 * MIB, int(1.4 * GIB))),
        lambda s: est,
    )
    assert ok.verdict == "as_expected"
    from dataclasses import replace

    locked = diagnose(
        1,
        "m.gguf",
        replace(SPEC, load_mode="mmap+mlock"),
        est,
        measure(1, _rows(1, 512 * MIB, 50 * MIB, 69 * MIB)),
        lambda s: est,
    )
    assert not any(f.component == "weights_paged_out" for f in locked.findings)


def test_metrics_measured_is_absent_when_unknown_and_counts_helpers() -> None:
    """/metrics: vramscope_process_measured_bytes is measure()'s total (a forked helper's
    GPU memory added to its server) and absent, never 0, when a GPU lists it without size."""
    from collectors.base import ProcessInfo, Snapshot
    from monitor.http.metrics import build_registry, render

    argv = ("llama-server", "-m", "/m/x.gguf")
    server = ProcessInfo(10, 1, None, 1, 0, "llama-server", argv, "llama.cpp", ("inference",))
    helper = ProcessInfo(11, 2, None, 10, 0, "llama-server", argv, "llama.cpp", ("gpu",))
    blind = ProcessInfo(
        12,
        3,
        None,
        1,
        0,
        "llama-server",
        ("llama-server", "-m", "/m/y.gguf"),
        "llama.cpp",
        ("inference",),
    )
    rows = (
        *_rows(10, 2 * GIB, 300 * MIB, 700 * MIB),
        ProcessMemory(11, "nvml:GPU-x", vram_bytes=GIB),
        ProcessMemory(12, "host", rss_anon_bytes=MIB, rss_file_bytes=MIB),
        ProcessMemory(12, "nvml:GPU-x"),
    )
    snap = Snapshot(1000, (), (server, helper, blind), rows, (), (), ())
    text = render(build_registry(lambda: snap)).decode()
    lines = [x for x in text.splitlines() if x.startswith("vramscope_process_measured_bytes{")]
    assert any(
        'pid="10"' in x
        and 'model="x.gguf"' in x
        and float(x.rsplit(" ", 1)[1]) == 3 * GIB + 1000 * MIB
        for x in lines
    ), lines
    assert not any('pid="12"' in x or 'pid="11"' in x for x in lines)  # unknown; a helper


def test_a_server_in_a_small_cgroup_gets_the_cgroup_named_and_no_mlock() -> None:
    """The same paged-out server inside a 1 GiB memory cgroup beside a 0.65 GiB embedding
    server: the diagnosis names the cgroup (limit, room with its reclaimable page cache,
    the other member) and does not suggest --mlock, which would pass the limit (a locked
    page is never reclaimed: an OOM kill instead of slowness); in a roomy cgroup it may."""
    from collectors.base import CgroupMemory
    from monitor.analysis.diagnose import in_cgroup

    est = _estimate(512 * MIB, file=int(1.4 * GIB))
    d = diagnose(
        1, "m.gguf", SPEC, est, measure(1, _rows(1, 512 * MIB, 50 * MIB, 69 * MIB)), lambda s: est
    )
    small = CgroupMemory("/system.slice/llm.service", GIB, None, 900 * MIB, 100 * MIB)
    members = [(7, "llama-server", int(0.65 * GIB)), (1, "llama-server", 631 * MIB)]
    named = in_cgroup(d, small, members, 512 * MIB, int(1.4 * GIB), 1)
    assert named.cgroup is not None and "/system.slice/llm.service" in named.cgroup
    assert "reclaimable page cache 0.10 GiB" in named.cgroup and "pid 7" in named.cgroup
    assert "pid 1)" not in named.cgroup  # itself is not "also in it"
    paged = next(f for f in named.findings if f.component == "weights_paged_out")
    assert paged.fix is not None and "--mlock" not in paged.fix.split(" (")[0]
    assert "memory.limit_in_bytes to at least 2.5 GiB" in paged.fix  # cgroup v1's name
    assert "--mlock (or" not in named.summary and "memory.limit_in_bytes" in named.summary
    roomy = CgroupMemory("/system.slice/llm.service", 16 * GIB, None, 900 * MIB, 100 * MIB)
    kept = in_cgroup(d, roomy, members, 512 * MIB, int(1.4 * GIB), 2)
    assert "--mlock" in next(f for f in kept.findings if f.component == "weights_paged_out").fix
