"""Per-refresh work of the TUI on its event loop, in the scenario of bench_tui_vs_nvitop.

A measure for changes to the refresh path, steadier than a whole-process CPU figure on a
shared box (results in bench/RESULTS.md, "TUI beside nvitop"):
- The scenario of ``bench_tui_vs_nvitop.py``: the fake NVML driver (tests/fakes/
  nvml_fake.py) with one H100 holding three fake llama-servers (real processes) and a
  sleeper, in a PID namespace of its own (``unshare -pf --mount-proc``: only the
  scenario's processes are seen), a live source as ``vramscope tui --live`` builds it.
- The app runs headless (``App.run_test``) at ``--size`` with its real 1 s refresh timer
  for ``--seconds`` after ``--warmup-s``. Headless Textual computes every screen update
  but skips turning it into terminal bytes; here each update is turned into its bytes
  too (``render_segments``, what a terminal driver writes), then dropped.
- Figures: the event-loop thread's CPU time (``time.thread_time`` on that thread) per
  refresh; the whole process's (all threads, ``os.times``); and counts per refresh that
  do not depend on the box's load: compositor updates (``render_update``), relayouts
  (``reflow``), lines rendered again (``StylesCache.render_line``: a line whose cache was
  dirty), lines sent to the terminal, messages dispatched.
- ``--profile FILE`` writes a cProfile of the event-loop thread over the window.

Run: .venv/bin/python bench/bench_tui_refresh.py [--seconds 30] [--size 120x40]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes"), str(ROOT / "tests" / "tui")]


def counting(counts: collections.Counter[str]) -> contextlib.ExitStack:
    """Wrap the Textual internals whose calls are counted; undone on close."""
    from textual import message_pump
    from textual._compositor import ChopsUpdate, Compositor, LayoutUpdate
    from textual._styles_cache import StylesCache

    stack = contextlib.ExitStack()

    def wrap(owner: type, name: str, key: str, lines: object = None) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            counts[key] += 1
            result = original(*args, **kwargs)
            if lines is not None and result is not None:
                counts[f"{key} lines"] += lines(result)  # type: ignore[operator]
            return result

        setattr(owner, name, counted)
        stack.callback(setattr, owner, name, original)

    def sent(update: object) -> int:
        if isinstance(update, ChopsUpdate):
            return len({y for y, _, _ in update.spans})
        if isinstance(update, LayoutUpdate):
            return len(update.strips)
        return 0

    wrap(Compositor, "render_update", "compositor updates", sent)
    wrap(Compositor, "reflow", "relayouts")
    wrap(StylesCache, "render_line", "lines rendered")
    render_widget = StylesCache.render_widget

    def by_widget(self, widget, crop):  # noqa: ANN001, ANN202
        dirty = sum(1 for y in crop.line_range if y in self._dirty_lines or y not in self._cache)
        if dirty:
            counts[f"  of {type(widget).__name__}#{widget.id}"] += dirty
        return render_widget(self, widget, crop)

    StylesCache.render_widget = by_widget  # type: ignore[method-assign]
    stack.callback(setattr, StylesCache, "render_widget", render_widget)
    wrap(message_pump.MessagePump, "_dispatch_message", "messages")
    from tui.screens.main import MainScreen
    from tui.widgets.events_pane import EventsPane
    from tui.widgets.models_table import ModelsTable

    for owner, name, key in (
        (Compositor, "render_update", "ms in compositor updates"),
        (MainScreen, "watch_frame", "ms in watch_frame"),
        (MainScreen, "_show_devices", "ms in watch_frame: devices"),
        (ModelsTable, "show", "ms in watch_frame: models"),
        (EventsPane, "show", "ms in watch_frame: events"),
        (MainScreen, "_show_status", "ms in watch_frame: status"),
    ):
        timed(stack, counts, owner, name, key)
    return stack


def timed(stack, counts, owner, name, key) -> None:  # noqa: ANN001
    """Add the event-loop thread's CPU time (ms) in ``owner.name`` to ``counts[key]``."""
    original = getattr(owner, name)

    def clocked(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        t0 = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            counts[key] += (time.thread_time() - t0) * 1000

    setattr(owner, name, clocked)
    stack.callback(setattr, owner, name, original)


def thread_ticks() -> dict[str, int]:
    """CPU ticks (user + system) of each of this process's threads, by Python name."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, int] = collections.Counter()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            raw = (task / "stat").read_bytes()
            rest = raw[raw.rfind(b")") + 2 :].split()
            name = names.get(int(task.name), "other")
            out[name.rstrip("_0123456789")] += int(rest[11]) + int(rest[12])
    return out


async def measure(size: tuple[int, int], warmup_s: float, seconds: float, profile: str | None):
    from textual._compositor import CompositorUpdate

    from tui.app import VramscopeApp, open_source
    from tui.screens.main import MainScreen

    source, _ = open_source(None, None, live=True)
    app = VramscopeApp(source, refresh_s=1.0)
    frames = [0]
    watch = MainScreen.watch_frame

    def watch_frame(self, frame):  # noqa: ANN001, ANN202
        frames[0] += 1
        return watch(self, frame)

    MainScreen.watch_frame = watch_frame  # type: ignore[method-assign]
    display = VramscopeApp._display
    out_bytes = [0]

    def _display(self, screen, renderable):  # noqa: ANN001, ANN202
        if isinstance(renderable, CompositorUpdate):  # what a terminal driver would write
            out_bytes[0] += len(renderable.render_segments(self.console))
        return display(self, screen, renderable)

    VramscopeApp._display = _display  # type: ignore[method-assign]
    counts: collections.Counter[str] = collections.Counter()
    async with app.run_test(size=size) as pilot:
        await pilot.pause(warmup_s)
        stack = counting(counts)
        f0, b0, t0, p0 = frames[0], out_bytes[0], time.thread_time(), os.times()
        k0 = thread_ticks()
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        await asyncio.sleep(seconds)
        if prof is not None:
            prof.disable()
            prof.dump_stats(profile)
        t1, p1 = time.thread_time(), os.times()
        k1 = thread_ticks()
        stack.close()
        n = frames[0] - f0
        assert "79.6" in "".join(s.text for s in app.screen._compositor.render_strips()), (
            "the GPU is not on screen"
        )
    proc = (p1.user - p0.user) + (p1.system - p0.system)
    print(
        f"{size[0]}x{size[1]}: {n} refreshes in {seconds:.0f} s; per refresh: event-loop CPU "
        f"{(t1 - t0) / n * 1000:.2f} ms, whole process {proc / n * 1000:.2f} ms; "
        f"bytes to the terminal {(out_bytes[0] - b0) / n:.0f}"
    )
    print("  per refresh: " + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(counts.items())))
    hz = os.sysconf("SC_CLK_TCK")
    threads = {k: (k1.get(k, 0) - k0.get(k, 0)) / hz / n * 1000 for k in k1}
    print(
        "  CPU ms per refresh by thread (clock ticks: coarse): "
        + ", ".join(f"{k} {v:.1f}" for k, v in sorted(threads.items(), key=lambda kv: -kv[1]))
    )
    return (t1 - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup-s", type=float, default=4.0)
    parser.add_argument("--size", default="120x40,80x24")
    parser.add_argument("--profile", help="write a cProfile of the event loop here")
    args = parser.parse_args()
    if os.environ.get("VRAMSCOPE_BENCH_NS") != "1":
        env = {**os.environ, "VRAMSCOPE_BENCH_NS": "1"}
        cmd = ["unshare", "-pf", "--mount-proc", sys.executable, *sys.argv]
        sys.exit(subprocess.run(cmd, env=env, check=False).returncode)
    import json

    import nvml_fake
    from bench_tui_vs_nvitop import processes, scenario

    with tempfile.TemporaryDirectory() as tmp, processes(Path(tmp)) as pids:
        path = Path(tmp) / "scenario.json"
        path.write_text(json.dumps(scenario(pids)))
        nvml_fake.install(json.loads(path.read_text()))
        for s in args.size.split(","):
            w, h = (int(x) for x in s.split("x"))
            prof = f"{args.profile}.{w}x{h}" if args.profile else None
            asyncio.run(measure((w, h), args.warmup_s, args.seconds, prof))


if __name__ == "__main__":
    main()
