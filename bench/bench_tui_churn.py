"""The live TUI beside nvitop on a box that churns llama-servers, and isolated (issue 32
item 3: "busy box: TUI <= 1x nvitop; isolated: TUI <= 0.5x nvitop").

Method (results in bench/RESULTS.md, "TUI beside nvitop under churn"):
- The UIs are bench_tui_vs_nvitop.py's: ``vramscope tui --live --refresh 1`` and ``nvitop
  --interval 1`` (installed with ``pip install --no-deps --target``, ``--nvitop-dir``),
  each in a detached tmux session of a fixed size (``--size``, a real pty), each with the
  fake NVML driver (tests/fakes/nvml_fake.py) showing one H100 with three long-lived fake
  llama-servers and a sleeper on it. ``--baseline DIR`` adds ``vramscope-base``: the same
  TUI from another source tree (``git archive main | tar -x -C DIR``), so the change and
  the code before it meet the same minutes of the box.
- Two conditions, one after the other, with fresh UIs each: **isolated** (nothing else
  started) and **busy**: bench_churn.py's churn generator (``--rate`` short-lived ``llama-
  server -m tiny.gguf -c 256 --port N`` a second, each living ``--life-s``; not on the GPU)
  runs from before the UIs start until the condition ends. Its own CPU is not measured.
- All UIs of a condition run at the same time, so the box's background load falls on
  each alike. After ``--warmup-s``, ``--pairs`` consecutive windows of ``--seconds``:
  utime + stime (``/proc/PID/stat``, children's included) of each UI's process tree at
  each window's start and end. Each window gives the ratio vramscope/nvitop (and base/
  nvitop); the table gives their medians. The 1-minute load average is printed at each
  condition's start and end.
- ``--pid-namespace``: all of it in a PID namespace of its own (``unshare -pf --mount-
  proc``), so "isolated" is the scenario's processes only and "busy" adds only the churn.

Run: .venv/bin/python bench/bench_tui_churn.py --nvitop-dir DIR [--baseline DIR]
     [--pid-namespace] [--pairs 5] [--seconds 60]
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
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import bench_churn  # noqa: E402
import bench_tui_vs_nvitop as tvn  # noqa: E402


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def measure(
    names: list[str], args: argparse.Namespace, folder: Path, scenario_path: Path, tag: str
) -> tuple[list[dict[str, float]], str]:
    """Start the UIs, warm up, return each window's CPU seconds per UI and the load."""
    size = tuple(int(x) for x in args.size.split("x"))
    sessions = {}
    load = loadavg()
    try:
        for ui in names:
            cmd = [sys.executable, str(folder / "launch.py"), str(tvn.ROOT), ui]
            cmd += [str(scenario_path), str(args.nvitop_dir), str(args.baseline or tvn.ROOT)]
            sessions[ui] = tvn.start(f"{tag}-{ui}", (size[0], size[1]), cmd)
        time.sleep(args.warmup_s)
        windows = []
        for _ in range(args.pairs):
            c0 = {ui: tvn.cpu_ticks(pid) for ui, pid in sessions.items()}
            w0 = time.monotonic()
            time.sleep(args.seconds)
            c1 = {ui: tvn.cpu_ticks(pid) for ui, pid in sessions.items()}
            scale = args.seconds / (time.monotonic() - w0) / tvn.TICK_HZ
            windows.append({ui: (c1[ui] - c0[ui]) * scale for ui in sessions})
            print(tag, {k: round(v, 2) for k, v in windows[-1].items()}, flush=True)
        for ui in sessions:
            screen = tvn.tmux("capture-pane", "-p", "-t", f"{tag}-{ui}")
            if tvn._stat(sessions[ui]) is None or "79.6" not in screen:
                raise RuntimeError(f"{tag} {ui} does not show the GPU:\n{screen}")
        return windows, f"{load} -> {loadavg()}"
    finally:
        for ui in sessions:
            with contextlib.suppress(RuntimeError):
                tvn.tmux("kill-session", "-t", f"{tag}-{ui}")


def condition(
    busy: bool, names: list[str], args: argparse.Namespace, folder: Path, scenario_path: Path
) -> tuple[list[dict[str, float]], str, int]:
    """One condition: the churn (if ``busy``) around a measurement; servers started."""
    stop = threading.Event()
    started: list[int] = []
    gen = threading.Thread(
        target=lambda: started.append(bench_churn.churn(folder, args.rate, args.life_s, stop))
    )
    if busy:
        gen.start()
    try:
        windows, load = measure(names, args, folder, scenario_path, "busy" if busy else "iso")
    finally:
        stop.set()
        if busy:
            gen.join()
    return windows, load, started[0] if started else 0


def report(label: str, windows: list[dict[str, float]], load: str, started: int, s: float) -> None:
    print(f"\n{label}: load {load}" + (f", churn {started} servers started" if started else ""))
    print("| UI | CPU % of a core (median; each window) |")
    print("|---|---|")
    for ui in windows[0]:
        each = ", ".join(f"{100 * w[ui] / s:.2f}" for w in windows)
        print(f"| {ui} | {100 * statistics.median(w[ui] for w in windows) / s:.2f} ({each}) |")
    for ui in windows[0]:
        if ui != "nvitop":
            ratio = statistics.median(w[ui] / w["nvitop"] for w in windows if w["nvitop"] > 0)
            print(f"- {ui}/nvitop: {ratio:.2f}x (median of {len(windows)} windows)")
    if "vramscope-base" in windows[0]:
        ratio = statistics.median(
            w["vramscope"] / w["vramscope-base"] for w in windows if w["vramscope-base"] > 0
        )
        print(f"- vramscope/vramscope-base: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvitop-dir", type=Path, required=True)
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup-s", type=float, default=10.0)
    parser.add_argument("--size", default="120x40")
    parser.add_argument("--rate", type=float, default=6.0)
    parser.add_argument("--life-s", type=float, default=0.4)
    parser.add_argument("--conditions", default="isolated,busy")
    parser.add_argument("--pid-namespace", action="store_true")
    args = parser.parse_args()
    if args.pid_namespace and os.environ.get("VRAMSCOPE_BENCH_NS") != "1":
        env = {**os.environ, "VRAMSCOPE_BENCH_NS": "1"}
        cmd = ["unshare", "-pf", "--mount-proc", sys.executable, *sys.argv]
        sys.exit(subprocess.run(cmd, env=env, check=False).returncode)
    if shutil.which("tmux") is None:
        sys.exit("bench_tui_churn: needs tmux")
    args.nvitop_dir = args.nvitop_dir.resolve()
    args.baseline = args.baseline.resolve() if args.baseline else None
    names = ["vramscope"] + (["vramscope-base"] if args.baseline else []) + ["nvitop"]
    import tiny_models

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tiny_models.write_llama(folder / "tiny.gguf")
        (folder / "launch.py").write_text(tvn.LAUNCHER)
        tvn.SOCKET = folder / "tmux" / "socket"
        tvn.SOCKET.parent.mkdir()
        tvn.tmux("new-session", "-d", "-s", "keeper", "-x", "80", "-y", "24", "sleep 100000")
        stack = contextlib.ExitStack()
        stack.callback(
            lambda: subprocess.run(["tmux", "-S", str(tvn.SOCKET), "kill-server"], check=False)
        )
        with stack, tvn.processes(folder) as pids:
            scenario_path = folder / "scenario.json"
            scenario_path.write_text(json.dumps(tvn.scenario(pids)))
            results = []
            for label in args.conditions.split(","):
                found = condition(label == "busy", names, args, folder, scenario_path)
                results.append((label, *found))
    print(
        f"\npython {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.pairs} windows of "
        f"{args.seconds:.0f} s at a 1 s refresh, {args.size}, all UIs at once"
        + (", own PID namespace" if args.pid_namespace else ", the box's /proc as it is")
    )
    for label, windows, load, started in results:
        report(label, windows, load, started, args.seconds)


if __name__ == "__main__":
    main()
