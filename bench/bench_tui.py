"""The TUI's three figures: start to first frame, main-thread time of one refresh, idle CPU.

Method (results in bench/RESULTS.md):
- **Start to first frame**: a fresh ``python`` subprocess imports ``tui.app``, builds the
  source and runs the app headless; the time is from just before the spawn until the first
  frame has been applied and the screen refreshed after it (``call_after_refresh``). Run
  ``--starts`` times for a live source (the real ``/proc`` and ``/sys``; NVML if present)
  and for a database source (a database written by ``monitor.store.database.Store``).
- **One refresh, 4 devices x 30 models**: 30 llama-servers over 4 GPUs, each with a
  Qwen3-8B-shaped GGUF header (sparse files from ``tests/fakes/gguf_models.py``). Frames
  are built off the event loop, as the app does; then each frame is posted as the poll
  worker posts it and the event-loop thread's CPU time (``time.thread_time`` on that thread)
  is measured until the screen is idle again. Consecutive frames differ: every model's
  measured bytes grow by 32 MiB, which moves the device headers, bars and markers and 7
  of the 270 table cells (sizes are shown to 0.1 GiB). A second figure steps them by
  512 MiB, so the measured and delta cells of every model change too (the table's worst
  case: only changed cells and lines are rendered again).
- **Idle CPU at a 1 s refresh**: a headless app subprocess with ``refresh_s=1.0`` and a
  live source; its process CPU time (user + system, all threads: the sampling worker
  included) over ``--idle-s`` seconds after a 3 s warm-up, as a percentage of one core.
  Headless means the compositor runs but nothing is written to a terminal.

Run: .venv/bin/python bench/bench_tui.py [--starts 5] [--refreshes 30] [--idle-s 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes"), str(ROOT / "tests" / "tui")]

from monitor.units import GIB, MIB  # noqa: E402

CHILD = textwrap.dedent("""
    import sys, time
    t_spawn = float(sys.argv[1]); kind = sys.argv[2]; arg = sys.argv[3]
    from pathlib import Path
    from tui.app import VramscopeApp
    from tui.source import LiveSource, StoreSource
    mode = sys.argv[4]

    class Bench(VramscopeApp):
        first = None
        def on_mount(self):
            super().on_mount()
            if mode == "start":
                self.set_interval(0.002, self.check)
            else:
                self.set_timer(3.0, self.start_idle)
        def check(self):
            if self.first is None and getattr(self.screen, "frame", None) is not None:
                self.first = time.time()
                self.call_after_refresh(self.done)
        def done(self):
            print(f"first_frame_s={time.time() - t_spawn:.4f}", flush=True)
            self.exit()
        def start_idle(self):
            import os
            self.cpu0, self.wall0 = os.times(), time.monotonic()
            self.set_timer(float(arg), self.end_idle)
        def end_idle(self):
            import os
            t = os.times(); wall = time.monotonic() - self.wall0
            cpu = (t.user - self.cpu0.user) + (t.system - self.cpu0.system)
            print(f"idle_cpu_pct={100 * cpu / wall:.3f} wall_s={wall:.1f}", flush=True)
            self.exit()

    source = LiveSource() if kind == "live" else StoreSource(Path(kind))
    Bench(source, refresh_s=1.0 if mode == "idle" else None).run(headless=True)
""")


def child(kind: str, mode: str, arg: str = "0") -> dict[str, float]:
    t = time.time()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, repr(t), kind, arg, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    values = {}
    for token in out.stdout.split():
        if "=" in token:
            key, value = token.split("=", 1)
            values[key] = float(value)
    if not values:
        raise RuntimeError(f"child failed: {out.stderr[-2000:]}")
    return values


def write_db(folder: Path, models: dict[str, str]) -> Path:
    from fake_source import discrete_three

    from monitor.store.database import Store

    path = folder / "vramscope.db"
    store = Store.open(path)
    for snap in discrete_three(models, ticks=60):
        store.write(snap)
    store.close()
    return path


def big_snapshots(
    models: dict[str, str],
    n_gpus: int = 4,
    n_models: int = 30,
    ticks: int = 2,
    step: int = 32 * MIB,
):
    from fake_source import host, server, snap

    from collectors.base import DeviceSample, ProcessMemory

    paths = list(models.values())[:2]
    procs = [
        server(
            10_000 + i,
            [
                "llama-server",
                "-m",
                paths[i % 2],
                "-c",
                str(4096 * (1 + i % 4)),
                "-np",
                str(1 + i % 3),
                "--port",
                str(9000 + i),
            ],
        )
        for i in range(n_models)
    ]
    out = []
    for t in range(ticks):
        mem, used = [], {g: 0 for g in range(n_gpus)}
        for i, p in enumerate(procs):
            g = i % n_gpus
            b = int((2.5 + (i % 5) * 0.3) * GIB) + t * step
            used[g] += b
            mem.append(ProcessMemory(p.pid, f"nvml:GPU-{g}", vram_bytes=b))
        devices = [
            DeviceSample(
                f"nvml:GPU-{g}",
                "nvml",
                "nvidia",
                "NVIDIA H100 80GB HBM3",
                "dedicated",
                80 * GIB,
                used[g] + GIB,
                80 * GIB - used[g] - GIB,
                300 * MIB,
            )
            for g in range(n_gpus)
        ]
        devices.append(host(512 * GIB, 400 * GIB))
        out.append(snap(1_767_225_600_000 + t * 1000, devices, procs, mem))
    return out


async def refresh_cost(
    models: dict[str, str], refreshes: int, step: int = 32 * MIB
) -> tuple[list[float], list[float]]:
    import threading

    from tui.app import VramscopeApp
    from tui.messages import FrameReady
    from tui.source import FrameBuilder

    snaps = big_snapshots(models, step=step)
    builder = FrameBuilder()
    frames = [builder.build(s) for s in snaps]  # off the loop in the app; not measured here
    assert len(frames[0].models) == 30 and len(frames[0].picture.devices) == 5

    class Source:
        live = True

        def latest(self):  # noqa: ANN202
            return frames[0]

        def close(self) -> None:
            pass

    app = VramscopeApp(Source(), refresh_s=None)  # type: ignore[arg-type]
    cpu, wall = [], []
    async with app.run_test(size=(160, 48)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert threading.current_thread() is threading.main_thread()
        for i in range(refreshes + 3):
            frame = frames[(i + 1) % 2]
            c0, w0 = time.thread_time(), time.perf_counter()
            screen.post_message(FrameReady(frame))
            await pilot.pause()  # the message handled, layout and repaint done
            c1, w1 = time.thread_time(), time.perf_counter()
            if i >= 3:  # warm-up: first mounts of the panels
                cpu.append((c1 - c0) * 1000)
                wall.append((w1 - w0) * 1000)
    return cpu, wall


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--refreshes", type=int, default=30)
    parser.add_argument("--idle-s", type=float, default=30.0)
    args = parser.parse_args()
    from fake_source import write_models

    with tempfile.TemporaryDirectory() as tmp:
        models = write_models(Path(tmp) / "models")
        db = write_db(Path(tmp), models)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
        for kind, label in (("live", "live (real /proc, /sys)"), (str(db), "database")):
            starts = [child(kind, "start")["first_frame_s"] for _ in range(args.starts)]
            print(
                f"start to first frame, {label}: median {statistics.median(starts):.3f} s, "
                f"max {max(starts):.3f} s over {len(starts)} starts"
            )
        for step, label in ((32 * MIB, ""), (512 * MIB, ", every model's sizes changing")):
            cpu, wall = asyncio.run(refresh_cost(models, args.refreshes, step))
            print(
                f"one refresh, 4 GPUs x 30 models{label}, event-loop thread CPU: median "
                f"{statistics.median(cpu):.1f} ms, p90 {pct(cpu, 0.9):.1f} ms, "
                f"max {max(cpu):.1f} ms (wall incl. pause: median "
                f"{statistics.median(wall):.1f} ms) over {len(cpu)}"
            )
        idle = child("live", "idle", str(args.idle_s))
        print(
            f"idle CPU at a 1 s refresh, live source, whole process: "
            f"{idle['idle_cpu_pct']:.2f} % of a core over {idle['wall_s']:.0f} s"
        )
        idle_db = child(str(db), "idle", str(args.idle_s))
        print(
            f"idle CPU at a 1 s refresh, database source, whole process: "
            f"{idle_db['idle_cpu_pct']:.2f} % of a core over {idle_db['wall_s']:.0f} s"
        )


if __name__ == "__main__":
    main()
