"""A SampleSource over synthetic snapshots, and the box scenarios the TUI tests draw."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from collectors.base import DeviceSample, ProcessInfo, ProcessMemory, Snapshot
from monitor.analysis.picture import picture_from_snapshot
from tui.source import EventRow, Frame, FrameBuilder, Series

GIB = 1024**3
MIB = 1024**2
T0 = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC


class FakeSource:
    """Serves ``snapshots`` in order: each ``latest()`` moves one tick on (and stays on the
    last). ``at``/``ticks``/``history`` see all of them, as a database would."""

    def __init__(
        self,
        snapshots: Sequence[Snapshot],
        events: Sequence[EventRow] = (),
        live: bool = True,
        builder: FrameBuilder | None = None,
    ) -> None:
        self.snapshots = sorted(snapshots, key=lambda s: s.ts_ms)
        self._events = list(events)
        self.live = live
        self.builder = builder or FrameBuilder()
        self.index = 0
        self.calls: list[str] = []  # the thread each call ran on
        self.windows: list[int] = []  # the width of each history request, ms
        self.closed = False

    def _seen(self, what: str) -> None:
        self.calls.append(f"{what}:{threading.current_thread().name}")

    def _frame(self, snap: Snapshot) -> Frame:
        events = [e for e in self._events if e.ts_ms <= snap.ts_ms]
        return self.builder.build(snap, events, live=self.live)

    def latest(self) -> Frame:
        self._seen("latest")
        snap = self.snapshots[min(self.index, len(self.snapshots) - 1)]
        self.index += 1
        return self._frame(snap)

    def at(self, ts_ms: int) -> Frame:
        self._seen("at")
        before = [s for s in self.snapshots if s.ts_ms <= ts_ms] or self.snapshots[:1]
        return self._frame(before[-1])

    def ticks(self, since_ms: int, until_ms: int) -> list[int]:
        return [s.ts_ms for s in self.snapshots if since_ms <= s.ts_ms <= until_ms]

    def events(self, since_ms: int) -> list[EventRow]:
        return [e for e in self._events if e.ts_ms >= since_ms]

    def history(self, device_id: str | None, since_ms: int, until_ms: int) -> Series:
        self._seen("history")
        self.windows.append(until_ms - since_ms)
        out: Series = {}
        for snap in self.snapshots:
            if not since_ms <= snap.ts_ms <= until_ms:
                continue
            pic = picture_from_snapshot(snap)
            for d in pic.devices.values():
                if (device_id is None or d.device_id == device_id) and d.used_bytes is not None:
                    out.setdefault(f"device:{d.device_id}", []).append((snap.ts_ms, d.used_bytes))
                for use in d.processes:
                    if use.engine and d.device_id != "host":
                        out.setdefault(f"model:{use.name} (pid {use.pid})", []).append(
                            (snap.ts_ms, use.bytes)
                        )
        return out

    def close(self) -> None:
        self.closed = True


# --------------------------------------------------------------------------- scenarios


def write_models(folder: Path) -> dict[str, str]:
    """Qwen3-8B shaped GGUF headers (sparse files): Q8_0, Q4_K, and a small draft."""
    import gguf_models as g

    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, kwargs in (
        ("qwen3-8b-q8_0.gguf", {}),
        ("qwen3-8b-q4_k.gguf", {"ggml_type": g.Q4_K}),
        ("qwen3-draft-q8_0.gguf", {"n_layer": 4}),
    ):
        path = folder / name
        if not path.exists():
            md, tensors = g.qwen3_8b(**kwargs)
            g.write_model(path, "qwen3", md, tensors, vocab_size=151936)
        out[name] = str(path)
    return out


def host(total: int, available: int, ts_used: int | None = None) -> DeviceSample:
    return DeviceSample(
        "host",
        "procfs",
        "linux",
        "host RAM",
        "host",
        total,
        ts_used if ts_used is not None else total - available,
        available_bytes=available,
        free_bytes=available,
    )


def server(pid: int, argv: list[str], engine: str = "llama.cpp") -> ProcessInfo:
    return ProcessInfo(
        pid, 1000 + pid, T0 - 3600_000, 1, 1000, "llama-server", tuple(argv), engine, ("inference",)
    )


def snap(
    ts: int, devices: list[DeviceSample], procs: list[ProcessInfo], memory: list[ProcessMemory]
) -> Snapshot:
    return Snapshot(ts, tuple(devices), tuple(procs), tuple(memory), (), (), ())


def discrete_three(models: dict[str, str], ticks: int = 3) -> list[Snapshot]:
    """An RTX 4090 (24 GiB) with three llama-servers: one at -c 32768 -np 4, one with an
    f16 draft, one without -c."""
    q8, q4, draft = (
        models["qwen3-8b-q8_0.gguf"],
        models["qwen3-8b-q4_k.gguf"],
        models["qwen3-draft-q8_0.gguf"],
    )
    procs = [
        server(4101, ["llama-server", "-m", q4, "-c", "32768", "-np", "4", "--port", "8081"]),
        server(4102, ["llama-server", "-m", q4, "-md", draft, "-c", "8192", "--port", "8082"]),
        server(4103, ["llama-server", "-m", q8, "-ngl", "10", "--port", "8083"]),
    ]
    out = []
    for i in range(ticks):
        grow = i * 64 * MIB
        mem = [
            ProcessMemory(4101, "nvml:GPU-0", vram_bytes=int(9.6 * GIB) + grow),
            ProcessMemory(4102, "nvml:GPU-0", vram_bytes=int(6.1 * GIB)),
            ProcessMemory(4103, "nvml:GPU-0", vram_bytes=int(3.4 * GIB)),
            ProcessMemory(4103, "host", rss_anon_bytes=2 * GIB, rss_file_bytes=5 * GIB),
        ]
        used = int(9.6 * GIB) + grow + int(6.1 * GIB) + int(3.4 * GIB) + int(1.1 * GIB)
        gpu = DeviceSample(
            "nvml:GPU-0",
            "nvml",
            "nvidia",
            "NVIDIA GeForce RTX 4090",
            "dedicated",
            24 * GIB,
            used,
            24 * GIB - used - 300 * MIB,
            300 * MIB,
            util_pct=40.0,
            temp_c=61.0,
            mem_clock_mhz=10501.0,  # GDDR6X 21 Gbps as NVML counts it (NVIDIA/nvbench PR 207)
        )
        out.append(snap(T0 + i * 1000, [gpu, host(64 * GIB, 30 * GIB)], procs, mem))
    return out


def strix_halo(models: dict[str, str]) -> list[Snapshot]:
    """A Ryzen AI Max+ 395: 512 MiB carve-out, GTT up to 96 GiB, 128 GiB of RAM."""
    q8 = models["qwen3-8b-q8_0.gguf"]
    procs = [server(5101, ["llama-server", "-m", q8, "-c", "65536", "-np", "2", "-fa", "on"])]
    gtt_used = int(17.5 * GIB)
    apu = DeviceSample(
        "drm:0000:c5:00.0",
        "drm",
        "amd",
        "AMD Radeon 8060S",
        "unified",
        512 * MIB + 96 * GIB,
        400 * MIB + gtt_used,
        None,
        None,
        vram_total_bytes=512 * MIB,
        vram_used_bytes=400 * MIB,
        gtt_total_bytes=96 * GIB,
        gtt_used_bytes=gtt_used,
        gtt_ceiling_bytes=96 * GIB,
    )
    mem = [
        ProcessMemory(5101, "drm:0000:c5:00.0", vram_bytes=300 * MIB, gtt_bytes=16 * GIB),
        ProcessMemory(5101, "host", rss_anon_bytes=1 * GIB, rss_file_bytes=512 * MIB),
    ]
    return [snap(T0, [apu, host(128 * GIB, 90 * GIB)], procs, mem)]


def gb10(models: dict[str, str]) -> list[Snapshot]:
    """A DGX Spark (GB10): NVML reports no memory, the pool is host RAM (unified)."""
    q8 = models["qwen3-8b-q8_0.gguf"]
    procs = [server(6101, ["llama-server", "-m", q8, "-c", "131072", "-np", "1"])]
    gpu = DeviceSample(
        "nvml:GPU-gb10", "nvml", "nvidia", "NVIDIA GB10", "unified", 119 * GIB, 40 * GIB, None
    )
    mem = [
        ProcessMemory(6101, "nvml:GPU-gb10", vram_bytes=int(27.2 * GIB)),
        ProcessMemory(6101, "host", rss_anon_bytes=int(1.2 * GIB)),
    ]
    return [snap(T0, [gpu, host(119 * GIB, 79 * GIB)], procs, mem)]


def no_gpu() -> list[Snapshot]:
    procs = [ProcessInfo(7101, 9000, T0, 1, 1000, "python3", ("python3", "app.py"), None, ("top",))]
    mem = [ProcessMemory(7101, "host", rss_anon_bytes=3 * GIB)]
    return [snap(T0, [host(32 * GIB, 20 * GIB)], procs, mem)]


def full_gpu(models: dict[str, str]) -> list[Snapshot]:
    """A 16 GiB GPU already 13 GiB full: a new Q8_0 8B at -c 32768 cannot fit."""
    q4 = models["qwen3-8b-q4_k.gguf"]
    procs = [server(8101, ["llama-server", "-m", q4, "-c", "16384", "-np", "2"])]
    gpu = DeviceSample(
        "nvml:GPU-0",
        "nvml",
        "nvidia",
        "NVIDIA RTX 4080",
        "dedicated",
        16 * GIB,
        13 * GIB,
        3 * GIB - 200 * MIB,
        200 * MIB,
    )
    mem = [ProcessMemory(8101, "nvml:GPU-0", vram_bytes=int(7.5 * GIB))]
    return [snap(T0, [gpu, host(64 * GIB, 40 * GIB)], procs, mem)]


EVENTS = [
    EventRow(
        T0 - 600_000,
        "load",
        "info",
        "llama-server[4101]",
        "qwen3-8b-q4_k.gguf loaded in 4.2 s (9.6 GiB)",
    ),
    EventRow(
        T0 - 300_000,
        "crash",
        "critical",
        "llama-server[4099]",
        "llama-server (pid 4099) killed by the kernel OOM killer",
    ),
    EventRow(T0 - 60_000, "alert", "warning", "nvml:GPU-0", "GPU-0 memory above 85% for 60 s"),
]


LONG_NAME = "qwen3-coder-30b-a3b-instruct-ud-q4_k_xl-{:02d}.gguf"
GPU_A, GPU_B = "nvml:GPU-3f2c9a1e-0000-1111-2222-333344445555", "nvml:GPU-7d41b0c2-6666"


def long_named(models: dict[str, str], folder: Path, count: int = 12) -> dict[str, str]:
    """``count`` model files with long names (links to the Q4_K header)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for i in range(count):
        path = folder / LONG_NAME.format(i)
        if not path.exists():
            path.symlink_to(models["qwen3-8b-q4_k.gguf"])
        out[path.name] = str(path)
    return out


def two_gpus_twelve(files: dict[str, str], ticks: int = 2, count: int = 12) -> list[Snapshot]:
    """Two RTX 4090s (24 GiB each) and ``count`` llama-servers with long model names,
    alternating between them; each tick the second one grows, so the rows re-sort."""
    names = sorted(files)[:count]
    procs = [
        server(6100 + i, ["llama-server", "-m", files[n], "-c", "8192", "-np", "2",
                          "--port", str(9000 + i)])
        for i, n in enumerate(names)
    ]  # fmt: skip
    out = []
    for t in range(ticks):
        mem, used = [], {GPU_A: 0, GPU_B: 0}
        for i, p in enumerate(procs):
            dev = (GPU_A, GPU_B)[i % 2]
            held = (300 + 60 * i) * MIB + (t * 2 * GIB if i == 1 else 0)
            used[dev] += held
            mem.append(ProcessMemory(p.pid, dev, vram_bytes=held))
            mem.append(ProcessMemory(p.pid, "host", rss_anon_bytes=200 * MIB))
        gpus = [
            DeviceSample(d, "nvml", "nvidia", "NVIDIA GeForce RTX 4090", "dedicated", 24 * GIB,
                         used[d] + GIB, 23 * GIB - used[d] - 300 * MIB, 300 * MIB,
                         util_pct=30.0, temp_c=55.0)
            for d in (GPU_A, GPU_B)
        ]  # fmt: skip
        out.append(snap(T0 + t * 1000, [*gpus, host(128 * GIB, 90 * GIB)], procs, mem))
    return out


LONG_EVENTS = [
    *EVENTS,
    EventRow(
        T0 - 30_000,
        "surprise",
        "warning",
        "llama-server[6101]",
        f"memory surprise: llama-server uses 2.9 GiB on {GPU_B}, 1.2 GiB more than "
        "the estimate of 1.7 GiB (context 8192 x 2 slots, KV f16)",
    ),
]
