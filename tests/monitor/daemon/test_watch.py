"""The load watch, including llama-swap's `starting` state read from /running on loopback."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gguf_models as g

from collectors.base import DeviceSample, ExitedProcess, ProcessInfo, ProcessMemory, Snapshot
from monitor.daemon.watch import LoadWatch

GIB = 1024**3


class _Running(BaseHTTPRequestHandler):
    states: dict[str, str] = {}
    paths: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).paths.append(self.path)
        body = json.dumps(
            {
                "running": [
                    {"model": m, "state": s, "cmd": "", "proxy": ""}
                    for m, s in type(self).states.items()
                ]
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_swap_starting_model_is_judged_before_it_allocates(tmp_path: Path) -> None:
    md, tensors = g.qwen3_8b()
    big = g.write_model(tmp_path / "big.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    small_md, small_t = g.qwen3_8b(n_layer=2)
    small_md["qwen3.block_count"] = 2
    small = g.write_model(tmp_path / "small.gguf", "qwen3", small_md, small_t, vocab_size=151936)[0]
    config = tmp_path / "swap.yaml"
    config.write_text(f"""
models:
  big: {{cmd: "llama-server --port ${{PORT}} -m {big} -c 4096 -lm none"}}
  small: {{cmd: "llama-server --port ${{PORT}} -m {small} -c 4096 -lm none"}}
""")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Running)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        host = DeviceSample(
            "host",
            "procfs",
            "host",
            "Host RAM",
            "host",
            16 * GIB,
            10 * GIB,
            available_bytes=6 * GIB,
        )
        small_proc = ProcessInfo(
            9,
            9,
            None,
            1,
            0,
            "llama-server",
            ("llama-server", "-m", str(small)),
            "llama.cpp",
            ("inference",),
        )
        snap = Snapshot(
            1000,
            (host,),
            (small_proc,),
            (ProcessMemory(9, "host", rss_anon_bytes=GIB),),
            (),
            (),
            (),
        )
        watch = LoadWatch(Path("/proc"), swap_url=url, swap_config=config)
        _Running.states = {"small": "ready"}
        assert watch.observe(snap) == []  # first tick primes
        _Running.states = {"small": "ready", "big": "starting"}
        events = watch.observe(replace(snap, ts_ms=3000))
        kinds = [e.kind for e in events]
        assert kinds == ["oom_predicted", "load_started"]
        oom = events[0]
        # 8.3 GiB of anonymous weights (-lm none) > 6 GiB available + 1 GiB from small
        assert "llama-swap is starting big" in oom.message
        assert "after unloading small" in oom.message
        assert oom.data["room_bytes"] == 7 * GIB
        again = watch.observe(replace(snap, ts_ms=5000))
        assert again == []  # still starting: reported once
        assert set(_Running.paths) == {"/running"}  # never /upstream/...: that would load it
    finally:
        server.shutdown()


def test_load_started_then_finished_with_measured_vs_estimated(tmp_path: Path) -> None:
    md, tensors = g.qwen3_8b(n_layer=2)
    md["qwen3.block_count"] = 2
    model = g.write_model(tmp_path / "m.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 10 * GIB, available_bytes=54 * GIB
    )
    proc = ProcessInfo(
        4_000_000,
        77,
        None,
        1,
        0,
        "llama-server",
        ("llama-server", "-m", str(model), "-c", "4096"),
        "llama.cpp",
        ("inference",),
    )
    watch = LoadWatch(Path("/proc"), steady_ticks=3)
    assert watch.observe(Snapshot(0, (host,), (), (), (), (), ())) == []

    def tick(ts: int, anon: int) -> list:
        return watch.observe(
            Snapshot(
                ts,
                (host,),
                (proc,),
                (ProcessMemory(proc.pid, "host", rss_anon_bytes=anon, rss_file_bytes=0),),
                (),
                (),
                (),
            )
        )

    assert tick(1000, 100 * 2**20) == []  # its load_started waits for a second tick
    started = tick(2000, GIB)
    assert [(e.kind, e.ts_ms) for e in started] == [("load_started", 1000)]  # the first tick's
    assert "estimate host" in started[0].message
    # growing, then steady for 3 ticks after reaching 2 GiB
    grown = [
        tick(t, m)
        for t, m in (
            (3000, 2 * GIB),
            (4000, 2 * GIB),
            (5000, 2 * GIB),
            (6000, 2 * GIB),
        )
    ]
    assert grown[:3] == [[], [], []]
    (done,) = grown[3]
    assert done.kind == "load_finished" and done.data["load_time_ms"] == 5000
    assert done.data["measured_host"] == 2 * GIB and done.data["estimate_host"] > 0
    assert tick(7000, 2 * GIB) == []  # reported once


def test_a_truncated_model_is_flagged_not_fatal(tmp_path: Path) -> None:
    """A server started on a half-downloaded GGUF: the watch says there is no estimate and
    why, and goes on."""
    md, tensors = g.qwen3_8b(n_layer=2)
    model = g.write_model(tmp_path / "m.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    os.truncate(model, model.stat().st_size // 2)
    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 10 * GIB, available_bytes=54 * GIB
    )
    proc = ProcessInfo(
        4_000_001,
        78,
        None,
        1,
        0,
        "llama-server",
        ("llama-server", "-m", str(model), "-c", "4096"),
        "llama.cpp",
        ("inference",),
    )
    watch = LoadWatch(Path("/proc"), steady_ticks=3)
    assert watch.observe(Snapshot(0, (host,), (), (), (), (), ())) == []
    assert watch.observe(Snapshot(1000, (host,), (proc,), (), (), (), ())) == []
    (started,) = watch.observe(Snapshot(2000, (host,), (proc,), (), (), (), ()))
    assert started.kind == "load_started" and started.ts_ms == 1000
    assert "no estimate:" in started.message and "truncated: the file is" in started.message
    assert watch.observe(Snapshot(3000, (host,), (proc,), (), (), (), ())) == []


def test_load_finished_never_counts_unknown_gpu_memory_as_0(tmp_path: Path) -> None:
    """A GPU that lists the server without its memory (NVML 'not available'): the
    load_finished event has no measured figure for that GPU and says the total is unknown
    (analysis/measured.py), instead of "measured_<gpu>: 0" and the host part as the total."""
    md, tensors = g.qwen3_8b(n_layer=2)
    md["qwen3.block_count"] = 2
    model = g.write_model(tmp_path / "m.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 10 * GIB, available_bytes=54 * GIB
    )
    gpu = DeviceSample("nvml:GPU-x", "nvml", "nvidia", "RTX", "dedicated", 24 * GIB, 8 * GIB)
    proc = ProcessInfo(
        4_000_001,
        78,
        None,
        1,
        0,
        "llama-server",
        ("llama-server", "-m", str(model), "-c", "4096"),
        "llama.cpp",
        ("inference",),
    )
    watch = LoadWatch(Path("/proc"), steady_ticks=2)
    assert watch.observe(Snapshot(0, (host, gpu), (), (), (), (), ())) == []
    events = []
    for ts in range(1000, 6000, 1000):
        events += watch.observe(
            Snapshot(
                ts,
                (host, gpu),
                (proc,),
                (
                    ProcessMemory(proc.pid, "host", rss_anon_bytes=GIB, rss_file_bytes=0),
                    ProcessMemory(proc.pid, "nvml:GPU-x", vram_bytes=None, gtt_bytes=None),
                ),
                (),
                (),
                (),
            )
        )
    (done,) = [e for e in events if e.kind == "load_finished"]
    assert "measured_nvml:GPU-x" not in done.data
    assert done.data["measured_host"] == GIB
    assert "measured unknown" in done.message, done.message


def test_a_server_whose_cgroup_nears_its_limit_is_warned_once() -> None:
    from collectors.base import CgroupMemory, ProcessCgroup

    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 10 * GIB, available_bytes=54 * GIB
    )
    proc = ProcessInfo(
        4_000_001,
        78,
        None,
        1,
        0,
        "llama-server",
        ("llama-server", "-m", "/nonexistent.gguf"),
        "llama.cpp",
        ("inference",),
    )
    watch = LoadWatch(Path("/proc"))

    def tick(ts: int, current: int) -> list:
        limit = CgroupMemory("/system.slice/llama.service", 4 * GIB, None, current)
        return watch.observe(
            Snapshot(
                ts, (host,), (proc,), (), (), (), (), cgroups=(ProcessCgroup(proc.pid, limit),)
            )
        )

    assert tick(0, 2 * GIB) == []  # primes
    assert tick(1000, int(3.5 * GIB)) == []  # 87.5%: not yet
    (near,) = tick(2000, int(3.8 * GIB))  # 95%
    assert near.kind == "cgroup_near_limit" and near.severity == "warning"
    assert "/system.slice/llama.service" in near.message and "95%" in near.message
    assert tick(3000, int(3.9 * GIB)) == []  # once
    assert tick(4000, 3 * GIB) == []
    assert [e.kind for e in tick(5000, int(3.9 * GIB))] == ["cgroup_near_limit"]  # again


def test_a_server_holding_gpu_memory_on_its_first_tick_gets_load_started_at_once(
    tmp_path: Path,
) -> None:
    """The deferral's exception (issue 32 item 2): a new server already in a GPU's process
    list is recorded on the tick that saw it, and once; one with host memory only waits
    for its second tick, and one gone by then writes nothing."""
    md, tensors = g.qwen3_8b(n_layer=2)
    md["qwen3.block_count"] = 2
    model = g.write_model(tmp_path / "m.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 10 * GIB, available_bytes=54 * GIB
    )

    def server(pid: int) -> ProcessInfo:
        argv = ("llama-server", "-m", str(model), "-c", "4096")
        return ProcessInfo(pid, 90 + pid % 10, None, 1, 0, "llama-server", argv, "llama.cpp", ())

    gpu, cpu, brief, killed = (server(4_000_010 + i) for i in range(4))
    held = ProcessMemory(gpu.pid, "gpu0", vram_bytes=512 * 2**20)
    watch = LoadWatch(Path("/proc"))
    assert watch.observe(Snapshot(0, (host,), (), (), (), (), ())) == []
    new = (gpu, cpu, brief, killed)
    first = watch.observe(Snapshot(1000, (host,), new, (held,), (), (), ()))
    assert [(e.kind, e.data["pid"]) for e in first] == [("load_started", gpu.pid)]
    exits = (
        ExitedProcess(brief.pid, brief.start_ticks, 1000, exit_code=0),  # clean: no event
        ExitedProcess(killed.pid, killed.start_ticks, 1000, exit_signal=9, cause="oom_killed"),
    )
    second = watch.observe(Snapshot(2000, (host,), (gpu, cpu), (held,), (), exits, ()))
    assert sorted((e.kind, e.data["pid"], e.ts_ms) for e in second) == [
        ("load_started", cpu.pid, 1000),
        ("load_started", killed.pid, 1000),  # the post-mortem's evidence of what was loading
    ]
    assert watch.dropped_one_tick == 1
    assert watch.observe(Snapshot(3000, (host,), (gpu, cpu), (held,), (), (), ())) == []
