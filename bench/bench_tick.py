"""CPU cost of one sampling tick (/proc + DRM collectors) over N real processes.

Method (results in bench/RESULTS.md):
- Spawn N real sleeping processes (``sleep``) so the machine has about ``--procs`` in all.
- Run the Sampler with the default collectors on the real ``/proc`` and ``/sys`` for
  ``--ticks`` ticks with a simulated 1 s clock (so the 10 s rescan falls on every 10th tick,
  as in the daemon), measuring each tick's thread CPU time (``time.process_time``: every thread,
  as collectors run in worker threads).
- The DRM collector finds no GPU on a machine without one; its process path is measured
  separately on a generated tree: N processes with 4 fds each, 20 of them DRM clients.
- Floor for comparison: ``psutil.process_iter(['memory_info', 'cmdline'])`` over the same
  processes, which is what a Python monitor that looks at every process each tick pays.
- The daemon's whole ``tick`` (sample, load watch, write) with ``--servers`` fake
  llama-servers, without and with the assessor (issue 15: each server estimated once per
  launch), in steady state.

Run: .venv/bin/python bench/bench_tick.py [--procs 300] [--ticks 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from collectors.base import CollectorOptions, Roots, Tick  # noqa: E402
from collectors.drm import DrmCollector  # noqa: E402
from monitor.daemon.sampler import Sampler  # noqa: E402

FDINFO = """pos:\t0
flags:\t02100002
mnt_id:\t26
ino:\t1101
drm-driver:\tamdgpu
drm-client-id:\t{client}
drm-pdev:\t0000:03:00.0
pasid:\t{client}
drm-total-vram:\t{vram} KiB
drm-shared-vram:\t0
drm-resident-vram:\t{vram} KiB
drm-total-gtt:\t2048 KiB
drm-resident-gtt:\t2048 KiB
drm-memory-vram:\t{vram} KiB
drm-memory-gtt: \t2048 KiB
drm-memory-cpu: \t0 KiB
drm-engine-gfx:\t123456 ns
"""


def stats(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    return {
        "median_ms": statistics.median(ms),
        "p90_ms": ms[int(0.9 * (len(ms) - 1))],
        "max_ms": ms[-1],
    }


def spawn_sleepers(target: int) -> list[subprocess.Popen[bytes]]:
    have = len(psutil.pids())
    return [subprocess.Popen(["sleep", "3600"]) for _ in range(max(0, target - have))]


def bench_sampler(ticks: int) -> tuple[list[float], list[float], float]:
    sampler = Sampler(Roots(), CollectorOptions())
    t0 = 1_800_000_000_000
    cpu0 = time.process_time()
    sampler.sample(t0)
    first = time.process_time() - cpu0
    steady, rescans = [], []
    for i in range(1, ticks + 1):
        cpu0 = time.process_time()
        sampler.sample(t0 + i * 1000)
        spent = time.process_time() - cpu0
        (rescans if i % 10 == 0 else steady).append(spent)
    sampler.close()
    return steady, rescans, first


def bench_psutil(rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        cpu0 = time.process_time()
        for p in psutil.process_iter(["memory_info", "cmdline"]):
            _ = p.info
        out.append(time.process_time() - cpu0)
    return out


def make_drm_tree(root: Path, procs: int, clients: int) -> None:
    card = root / "sys/class/drm/card0/device"
    card.mkdir(parents=True)
    (root / "sys/class/drm/card0/device/drm/renderD128").mkdir(parents=True)
    (card / "uevent").write_text("DRIVER=amdgpu\nPCI_ID=1002:744C\nPCI_SLOT_NAME=0000:03:00.0\n")
    for name, value in (
        ("vram_total", 24 << 30),
        ("vram_used", 8 << 30),
        ("vis_vram_total", 24 << 30),
        ("vis_vram_used", 1 << 30),
        ("gtt_total", 64 << 30),
        ("gtt_used", 1 << 30),
    ):
        (card / f"mem_info_{name}").write_text(f"{value}\n")
    for pid in range(1000, 1000 + procs):
        d = root / "proc" / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "fdinfo").mkdir()
        (d / "comm").write_text("worker\n")
        (d / "cmdline").write_bytes(b"/usr/bin/worker\0--flag\0")
        for fd, target in enumerate(("/dev/null", "socket:[1]", "pipe:[2]", "/var/log/x")):
            os.symlink(target, d / "fd" / str(fd))
            (d / "fdinfo" / str(fd)).write_text("pos:\t0\nflags:\t02\n")
        if pid - 1000 < clients:
            os.symlink("/dev/dri/renderD128", d / "fd" / "4")
            (d / "fdinfo" / "4").write_text(FDINFO.format(client=pid, vram=(pid % 7 + 1) << 20))


def bench_drm(procs: int, ticks: int) -> tuple[list[float], list[float], float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_drm_tree(root, procs, clients=20)
        roots = Roots(proc=root / "proc", sys=root / "sys")
        collector = DrmCollector(roots, CollectorOptions())
        t0 = 1_800_000_000_000

        def one(ts: int) -> float:
            tick = Tick(roots, ts)
            cpu0 = time.process_time()
            tick.pids()
            reading = collector.collect(tick)
            assert len(reading.memory) == 20, len(reading.memory)
            return time.process_time() - cpu0

        first = one(t0)
        steady, rescans = [], []
        for i in range(1, ticks + 1):
            (rescans if i % 10 == 0 else steady).append(one(t0 + i * 1000))
        return steady, rescans, first


def bench_daemon_tick(ticks: int, servers: int) -> dict[str, list[float]]:
    """The daemon's ``tick`` (sample + load watch + write + assessments) with ``servers``
    real processes that read as ``llama-server -m x.gguf`` (tests/fakes/fake_server.py, a
    real small GGUF): CPU per tick without the assessor and with it, after its first
    assessments are done (steady state: nothing new to assess)."""
    import contextlib

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fakes"))
    import fake_server
    import tiny_models

    from monitor.config import Config
    from monitor.daemon.assessor import Assessor
    from monitor.daemon.loop import DaemonContext, tick
    from monitor.daemon.watch import LoadWatch
    from monitor.store.database import Store

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        model = tiny_models.write_llama(root / "x.gguf").path
        for i in range(servers):
            stack.enter_context(
                fake_server.running(
                    ["llama-server", "-m", str(model), "-c", str(512 * (i + 1))], cwd=root
                )
            )
        contexts = {}
        for label in ("without", "with"):
            config = Config(db_path=root / f"{label}.db")
            store = Store.open(config.db_path)
            store.add_event("daemon_started", "info", "daemon", "bench")  # as run() does
            ctx = DaemonContext(config, store, Sampler(Roots(), CollectorOptions()))
            ctx.watch = LoadWatch(Path("/proc"))
            if label == "with":
                ctx.assessor = Assessor(Path("/proc"))
            for _ in range(5):  # warm-up: first sight, assessments done on their thread
                tick(ctx)
            contexts[label] = ctx
        assessor = contexts["with"].assessor
        deadline = time.monotonic() + 30
        while len(assessor.current()) < servers and time.monotonic() < deadline:
            time.sleep(0.05)
            tick(contexts["with"])
        assert len(assessor.current()) >= servers, "assessments missing"
        out: dict[str, list[float]] = {"without": [], "with": [], "on_tick": []}
        for _ in range(ticks):  # interleaved: the machine's drift falls on both alike
            for label, ctx in contexts.items():
                cpu0 = time.process_time()
                tick(ctx)
                out[label].append(time.process_time() - cpu0)
            ctx = contexts["with"]
            cpu0 = time.process_time()
            ctx.assessor.on_tick(ctx.last_snapshot, ctx.store)
            out["on_tick"].append(time.process_time() - cpu0)
        print(
            f"assessments computed: {assessor.assessed} for {len(assessor.current())} "
            f"servers seen (other servers on this box count too)",
            file=sys.stderr,
        )
        for ctx in contexts.values():
            if ctx.assessor is not None:
                ctx.assessor.close()
            ctx.sampler.close()
            ctx.store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=300)
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument(
        "--servers",
        type=int,
        default=4,
        help="fake llama-servers for the daemon tick with and without "
        "assessments (0: skip that part)",
    )
    args = parser.parse_args()
    sleepers = spawn_sleepers(args.procs)
    try:
        time.sleep(0.5)
        n = len(psutil.pids())
        steady, rescans, first = bench_sampler(args.ticks)
        floor = bench_psutil(max(20, args.ticks // 5))
        daemon = bench_daemon_tick(args.ticks, args.servers) if args.servers else {}
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()
    d_steady, d_rescans, d_first = bench_drm(args.procs, args.ticks)
    every = steady + rescans
    mean_tick = statistics.fmean(every)
    print(
        f"# tick benchmark: {n} processes, {args.ticks} ticks, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}, kernel {os.uname().release}"
    )
    print("| what | median ms | p90 ms | max ms |")
    print("|---|---|---|---|")
    for label, data in (
        ("sampler tick (all default collectors), steady", steady),
        ("sampler tick, every 10th (rescan)", rescans),
        ("sampler tick, all ticks", every),
        (f"drm collector on {args.procs}-process tree, steady", d_steady),
        ("drm collector on that tree, rescan tick", d_rescans),
        ("psutil.process_iter(['memory_info','cmdline'])", floor),
        *(
            (f"daemon tick, {args.servers} servers, {label} assessments", daemon[label])
            for label in ("without", "with")
            if label in daemon
        ),
        *(
            (("the assessor's part of a tick (Assessor.on_tick, nothing new)", daemon["on_tick"]),)
            if daemon
            else ()
        ),
    ):
        s = stats(data)
        print(f"| {label} | {s['median_ms']:.2f} | {s['p90_ms']:.2f} | {s['max_ms']:.2f} |")
    print(
        f"\nfirst sampler tick (cold caches): {first * 1000:.1f} ms; "
        f"first drm tick on the tree: {d_first * 1000:.1f} ms"
    )
    print(
        f"mean CPU per tick over all ticks: {mean_tick * 1000:.2f} ms "
        f"= {mean_tick * 100:.2f}% of a core at a 1 s interval"
    )
    print(
        f"ratio psutil floor / sampler (median): "
        f"{statistics.median(floor) / statistics.median(steady):.1f}x; "
        f"psutil / sampler (mean of all ticks): "
        f"{statistics.fmean(floor) / mean_tick:.1f}x"
    )


if __name__ == "__main__":
    main()
