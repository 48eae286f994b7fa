"""vramscope's TUI beside nvitop: CPU time and memory of each at a 1 s refresh.

Method (results in bench/RESULTS.md, "TUI beside nvitop"):
- nvitop (PyPI, ``--nvitop-version``) is installed with ``pip install --no-deps --target``
  into a temporary folder, never into the project: it runs on this venv's python, so both
  UIs use the same pynvml (nvidia-ml-py) and the same fake driver.
- The fake driver (tests/fakes/nvml_fake.py) is installed in each UI's process by a small
  launcher before the UI starts: one H100 80GB with three real fake llama-servers
  (tests/fakes/fake_server.py: real processes whose /proc reads like ``llama-server -m
  X.gguf -c 8192 -np 2``, Qwen3-8B-shaped sparse GGUF files) and one plain sleeping
  process on it. Everything else is real: /proc, /sys, the terminal.
- Each UI runs in its own tmux session of a fixed size (``--sizes``, default 120x40 and
  80x24): ``vramscope tui --live --refresh 1`` and ``nvitop --interval 1``. All of one
  round's sessions run **at the same time**, so the busy machine's background load (other
  jobs on a 2-core box) falls on every UI alike; CPU *time* is measured, not wall time,
  so sharing the cores changes little.
- After ``--warmup-s`` (start-up excluded), each UI's process tree (the UI process and
  any descendants) is read from /proc: user + system CPU ticks (``/proc/PID/stat`` fields
  14-17, children's included) at the start and end of ``--seconds``; RSS at the end
  (``VmRSS``) and its peak (``VmHWM``) from ``/proc/PID/status``.
- ``--rounds`` rounds (default 3); the table gives each figure's median.
- ``--pid-namespace`` runs it all in a PID namespace of its own, so both UIs see only the
  scenario's processes (like for like: vramscope also attributes host RAM to, and lists
  servers among, every process on the box; nvitop lists only the GPU's);
  ``--textual-floor`` adds a minimal Textual app (header, a clock each second, footer);
  ``--baseline DIR`` adds ``vramscope-base``: the same command run from another source
  tree (e.g. ``git archive`` of an older commit unpacked into DIR), so a change and the
  code before it meet the same minute of the box in the same run.

The fake driver's own Python time is inside each UI's CPU figure: nvitop calls more NVML
functions per refresh than vramscope does (clocks, fans, ...; a call the fake lacks fails
at once, as a missing symbol does), and a real driver's ioctls would add kernel time.

Run: .venv/bin/python bench/bench_tui_vs_nvitop.py [--rounds 3] [--seconds 60]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes"), str(ROOT / "tests" / "tui")]

from monitor.units import GIB, MIB  # noqa: E402

TICK_HZ = os.sysconf("SC_CLK_TCK")

LAUNCHER = textwrap.dedent("""
    import json, sys
    root, ui, scenario, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    if ui == "vramscope-base":
        root = sys.argv[5]  # the tree the change is compared with
    sys.path[:0] = [root + "/tests/fakes", root]
    import nvml_fake
    nvml_fake.install(json.loads(open(scenario).read()))
    if ui == "nvitop":
        # its one-time log lines for NVML calls the fake lacks would land on the screen
        # (curses draws on stdout; Textual on stderr, so vramscope's is left alone)
        import os
        os.dup2(os.open(scenario + ".nvitop.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND), 2)
        sys.path.insert(0, extra)
        from nvitop.cli import main
        sys.argv = ["nvitop", "--interval", "1"]
        sys.exit(main())
    if ui == "textual-min":
        import time
        from textual.app import App
        from textual.widgets import Footer, Header, Static

        class Minimal(App):
            BINDINGS = [("q", "quit", "Quit")]
            def compose(self):
                yield Header()
                yield Static(id="clock")
                yield Footer()
            def on_mount(self):
                self.set_interval(1.0, self.tick)
            def tick(self):
                self.query_one("#clock", Static).update(time.strftime("%H:%M:%S"))

        Minimal().run()
        sys.exit()
    from tui.entry import main
    sys.argv = ["vramscope", "tui", "--live", "--refresh", "1"]
    main()
""")


def install_nvitop(folder: Path, version: str) -> Path:
    target = folder / "nvitop"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
        + [f"nvitop=={version}"],
        check=True,
    )
    return target


def scenario(pids: list[int]) -> dict:
    """One H100 with the given processes on it (the first three: llama-servers)."""
    sizes = [9 * GIB, 6 * GIB, 4 * GIB, 512 * MIB]
    used = sum(sizes[: len(pids)]) + 600 * MIB
    total = 81559 * MIB
    return {
        "driver": "550.54.15",
        "devices": [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": "GPU-bench-0000-1111-2222-333344445555",
                "bus_id": "00000000:18:00.0",
                "memory": {"total": total, "used": used, "free": total - used, "reserved": 0},
                "util": {"gpu": 35, "memory": 12},
                "temp_c": 41,
                "power_mw": 180000,
                "mig": [0, 0],
                "event_types": 0,
                "compute": [{"pid": p, "used": s} for p, s in zip(pids, sizes, strict=False)],
                "graphics": [],
            }
        ],
    }


@contextlib.contextmanager
def processes(folder: Path) -> Iterator[list[int]]:
    """Three fake llama-servers and a sleeper, all real processes."""
    from fake_server import running
    from fake_source import write_models

    models = list(write_models(folder / "models").values())
    with contextlib.ExitStack() as stack:
        pids = []
        for i in range(3):
            argv = ["llama-server", "-m", models[i % len(models)], "-c", "8192", "-np", "2"]
            argv += ["--port", str(18_000 + i)]
            pids.append(stack.enter_context(running(argv)).pid)
        sleeper = subprocess.Popen(["sleep", "3600"])
        stack.callback(sleeper.wait)
        stack.callback(sleeper.kill)
        yield [*pids, sleeper.pid]


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, user+system CPU ticks incl. waited-for children) of ``pid``."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2 :].split()
    return int(rest[1]), sum(int(x) for x in rest[11:15])


def tree(root: int) -> list[int]:
    """``root`` and its living descendants."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                parents[int(entry)] = st[0]
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += [p for p, pp in parents.items() if pp == pid]
    return out


def cpu_ticks(root: int) -> int:
    return sum(st[1] for p in tree(root) if (st := _stat(p)) is not None)


def memory_kib(root: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) summed over the tree, KiB."""
    rss = hwm = 0
    for pid in tree(root):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1])
    return rss, hwm


SOCKET = Path("/nonexistent")  # set by main
"""A tmux server of our own (``-S``, a fresh folder: pids repeat across PID namespaces):
other tmux users on the box are left alone."""


def tmux(*args: str) -> str:
    out = subprocess.run(["tmux", "-S", str(SOCKET), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args[:2])}: {out.stderr.strip()}")
    return out.stdout


def start(name: str, size: tuple[int, int], command: list[str]) -> int:
    """A detached tmux session running ``command``; the command's pid."""
    line = "exec " + " ".join(_quote(a) for a in command)
    tmux("new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]), line)
    return int(tmux("list-panes", "-t", name, "-F", "#{pane_pid}").split()[0])


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def one_round(
    uis: list[tuple[str, tuple[int, int]]],
    launcher: Path,
    scenario_path: Path,
    nvitop_dir: Path,
    warmup_s: float,
    seconds: float,
    tag: str,
    baseline: Path | None = None,
) -> dict[tuple[str, tuple[int, int]], dict[str, float]]:
    env_python = sys.executable
    sessions = {}
    try:
        for ui, size in uis:
            name = f"r{tag}-{ui}-{size[0]}x{size[1]}"
            cmd = [env_python, str(launcher), str(ROOT), ui, str(scenario_path), str(nvitop_dir)]
            cmd.append(str(baseline or ROOT))
            sessions[(ui, size)] = (name, start(name, size, cmd))
        time.sleep(warmup_s)
        screens = {
            key: tmux("capture-pane", "-p", "-t", name) for key, (name, _) in sessions.items()
        }
        c0 = {key: cpu_ticks(pid) for key, (_, pid) in sessions.items()}
        w0 = time.monotonic()
        time.sleep(seconds)
        c1 = {key: cpu_ticks(pid) for key, (_, pid) in sessions.items()}
        wall = time.monotonic() - w0
        out = {}
        for key, (_name, pid) in sessions.items():
            if _stat(pid) is None:
                raise RuntimeError(f"{key} exited early; its screen was:\n{screens[key]}")
            rss, hwm = memory_kib(pid)
            out[key] = {
                "cpu_s": (c1[key] - c0[key]) / TICK_HZ * seconds / wall,
                "rss_mib": rss / 1024,
                "hwm_mib": hwm / 1024,
            }
        for key in sessions:
            if key[0] != "textual-min" and "79.6" not in screens[key]:  # the GPU total
                raise RuntimeError(f"{key} does not show the GPU:\n{screens[key]}")
        return out
    finally:
        for name, _pid in sessions.values():
            with contextlib.suppress(RuntimeError):
                tmux("kill-session", "-t", name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup-s", type=float, default=8.0)
    parser.add_argument("--sizes", default="120x40,80x24")
    parser.add_argument("--nvitop-version", default="1.7.2")
    parser.add_argument("--nvitop-dir", type=Path, help="nvitop installed here already")
    parser.add_argument("--only", choices=("vramscope", "nvitop"), help="run one UI")
    parser.add_argument(
        "--textual-floor",
        action="store_true",
        help="also run a minimal Textual app (header, a clock updated every second, footer): "
        "what any Textual UI costs at a 1 s refresh",
    )
    parser.add_argument(
        "--pid-namespace",
        action="store_true",
        help="run everything in a PID namespace of its own (unshare -pf --mount-proc): the "
        "UIs see only the scenario's processes, not the rest of the box",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also run vramscope from this source tree (vramscope-base), e.g. an older "
        "commit's `git archive` unpacked here",
    )
    args = parser.parse_args()
    if args.pid_namespace and os.environ.get("VRAMSCOPE_BENCH_NS") != "1":
        env = {**os.environ, "VRAMSCOPE_BENCH_NS": "1"}
        cmd = ["unshare", "-pf", "--mount-proc", sys.executable, *sys.argv]
        sys.exit(subprocess.run(cmd, env=env, check=False).returncode)
    if shutil.which("tmux") is None:
        sys.exit("bench_tui_vs_nvitop: needs tmux")
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    names = [args.only] if args.only else ["vramscope", "nvitop"]
    if args.baseline:
        names.insert(1, "vramscope-base")
    if args.textual_floor:
        names.append("textual-min")
    uis = [(ui, (w, h)) for w, h in sizes for ui in names]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        nvitop_dir = args.nvitop_dir or install_nvitop(folder, args.nvitop_version)
        launcher = folder / "launch.py"
        launcher.write_text(LAUNCHER)
        global SOCKET
        SOCKET = folder / "tmux" / "socket"
        SOCKET.parent.mkdir()
        # a session that lives through all rounds, so the server never exits between them
        tmux("new-session", "-d", "-s", "keeper", "-x", "80", "-y", "24", "sleep 100000")
        stack = contextlib.ExitStack()
        stack.callback(
            lambda: subprocess.run(["tmux", "-S", str(SOCKET), "kill-server"], check=False)
        )
        with stack, processes(folder) as pids:
            scenario_path = folder / "scenario.json"
            scenario_path.write_text(json.dumps(scenario(pids)))
            results = []
            for r in range(args.rounds):
                found = one_round(
                    uis,
                    launcher,
                    scenario_path,
                    nvitop_dir,
                    args.warmup_s,
                    args.seconds,
                    str(r),
                    args.baseline.resolve() if args.baseline else None,
                )
                results.append(found)
                for (ui, (w, h)), v in found.items():
                    print(
                        f"round {r + 1}: {ui} {w}x{h}: {v['cpu_s']:.2f} CPU-s, "
                        f"RSS {v['rss_mib']:.0f} MiB (peak {v['hwm_mib']:.0f})",
                        flush=True,
                    )
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, nvitop {args.nvitop_version}, "
        f"{args.rounds} rounds of {args.seconds:.0f} s at a 1 s refresh, all UIs at once"
        + (", own PID namespace" if args.pid_namespace else ", the box's /proc as it is")
    )
    print("| UI | terminal | CPU-s (median; each round) | RSS end MiB | RSS peak MiB |")
    print("|---|---|---|---|---|")
    for key in uis:
        cpu = [r[key]["cpu_s"] for r in results]
        rss = statistics.median(r[key]["rss_mib"] for r in results)
        hwm = statistics.median(r[key]["hwm_mib"] for r in results)
        each = ", ".join(f"{c:.2f}" for c in cpu)
        print(
            f"| {key[0]} | {key[1][0]}x{key[1][1]} | {statistics.median(cpu):.2f} ({each}) "
            f"| {rss:.0f} | {hwm:.0f} |"
        )


if __name__ == "__main__":
    main()
