"""Memory over time per device and per model: 5 min / 1 h / 24 h / 7 d / 30 d (all the
rollups the default retention keeps), from the source (the database's raw samples for short
windows, its per-minute rollups and the samples not rolled up yet for long ones).

Two plots (textual-plotext) with a time axis (before now, in the window's unit) and a
memory axis in GiB: the devices, then the models (each server's measured total). A cursor
(← →, Home/End) reads every series at one moment; each series also has a line with its
value now and its peak in the window (a bucket keeps its peak, so no peak is lost).
"""

from __future__ import annotations

import textwrap
from bisect import bisect_right
from collections.abc import Mapping
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Label, Static
from textual.worker import get_current_worker
from textual_plotext import PlotextPlot

from monitor.errors import failure_line
from monitor.units import GIB
from tui.format import clock, middle_cut, plain, safe, size
from tui.messages import HistoryReady, SourceFailed
from tui.series import Series
from tui.source import Frame
from tui.widgets.device_panel import named_devices

if TYPE_CHECKING:
    from textual import getters

    from tui.app import VramscopeApp


WINDOWS = {
    "5m": 300_000,
    "1h": 3600_000,
    "24h": 86400_000,
    "7d": 7 * 86400_000,
    "30d": 30 * 86400_000,
}
# the time axis of each window: (ms per unit, unit name)
AXIS_UNIT = {
    "5m": (60_000, "minutes"),
    "1h": (60_000, "minutes"),
    "24h": (3600_000, "hours"),
    "7d": (86400_000, "days"),
    "30d": (86400_000, "days"),
}
# the time axis's ticks of each window, in its unit before now: whole numbers, not the
# plot's own fifths of the window (-3.8, -1.2 minutes)
AXIS_TICKS = {
    "5m": (-5, -4, -3, -2, -1, 0),
    "1h": (-60, -45, -30, -15, 0),
    "24h": (-24, -18, -12, -6, 0),
    "7d": (-7, -6, -5, -4, -3, -2, -1, 0),
    "30d": (-30, -20, -10, 0),
}
LABEL_CHARS = 40  # a series' name in the legend and the readout


def series_name(label: str, device_names: Mapping[str, str] | None = None) -> str:
    """``device:nvml:GPU-0`` -> ``GPU0 RTX 4090`` (the main screen's short name, where the
    frame knows the device) or ``nvml:GPU-0``; ``model:NAME (pid N)`` -> its NAME cut in
    the middle (the models table's way), its pid whole; escaped, bounded (it comes from
    processes)."""
    key = label.split(":", 1)[1] if ":" in label else label
    if label.startswith("device:") and device_names and key in device_names:
        key = device_names[key]
    name = safe(key)
    if len(name) <= LABEL_CHARS:
        return name
    if label.startswith("model:"):  # its file's name cut in the middle, as the models
        stem, pid, tail = name.rpartition(" (pid ")  # table does: quant and pid stay
        if pid and stem:
            return middle_cut(stem, LABEL_CHARS - len(pid + tail)) + pid + tail
        return middle_cut(name, LABEL_CHARS)
    return name[: LABEL_CHARS - 1] + "…"


def value_at(points: list[tuple[int, int]], ts_ms: int) -> int | None:
    """The series' value at ``ts_ms``: its last point at or before it (None before its
    first point or after it ended: a server gone is not holding its last figure)."""
    i = bisect_right([t for t, _ in points], ts_ms)
    if i == 0:
        return None
    return points[i - 1][1]


def readout(
    series: Series,
    ts_ms: int,
    newest_ms: int | None,
    device_names: Mapping[str, str] | None = None,
    width: int | None = None,
) -> str:
    """Every series at one moment, for the cursor line; ``width``: its lines' width, the
    series past its two lines counted as "+N more" (each series' value is in the list
    beneath), never one cut in the middle of a word."""
    parts = []
    for label in sorted(series, key=lambda k: (not k.startswith("device:"), k)):
        points = series[label]
        ended = points and points[-1][0] != newest_ms and ts_ms > points[-1][0]
        value = None if ended else value_at(points, ts_ms)
        name = series_name(label, device_names)
        parts.append(f"{name} {size(value) if value is not None else '-'}")
    text = f"{clock(ts_ms, with_date=True)}  " + " · ".join(parts)
    if width is None or fits(text, width):
        return text
    for shown in range(len(parts) - 1, -1, -1):
        more = f" · +{len(parts) - shown} more"
        text = f"{clock(ts_ms, with_date=True)}  " + " · ".join(parts[:shown]) + more
        if fits(text, width):
            return text
    return text


def fits(text: str, width: int, lines: int = 2) -> bool:
    """Whether ``text`` wrapped at spaces to ``width`` takes at most ``lines`` lines."""
    return len(textwrap.wrap(text, max(width, 1), break_long_words=False)) <= lines


class HistoryScreen(Screen):
    """Plots of used memory with axes, a cursor that reads values, a line per series."""

    if TYPE_CHECKING:  # Textual's typed ``app`` (textual.getters.app), for the checker only
        app = getters.app(VramscopeApp)

    BINDINGS = [
        Binding("1", "window('5m')", "5 min"),
        Binding("2", "window('1h')", "1 h"),
        Binding("3", "window('24h')", "24 h"),
        Binding("4", "window('7d')", "7 d"),
        Binding("5", "window('30d')", "30 d"),
        Binding("left", "move(-1)", "◀", show=False),
        Binding("right", "move(1)", "▶", show=False),
        Binding("shift+left", "move(-10)", "◀ 10", show=False),
        Binding("shift+right", "move(10)", "10 ▶", show=False),
        Binding("home", "move(-100000)", "oldest", show=False),
        Binding("end", "move(100000)", "newest", show=False),
        Binding("escape,h", "app.pop_screen", "Back"),
        Binding("q", "app.quit", "Quit"),
    ]

    window: reactive[str] = reactive("5m", init=False)
    """The time window shown."""

    def __init__(self, frame: Frame | None) -> None:
        super().__init__()
        self.frame = frame
        # the devices as the main screen names them (GPU0 RTX 4090, host RAM)
        self.device_names = (
            {pic.device_id: name for pic, name in named_devices(frame.picture)} if frame else {}
        )
        self.series: Series = {}
        self.times: list[int] = []  # every point's time, for the cursor
        self.cursor: int = -1  # index into ``times``; -1: the newest
        self.now_ms: int = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="history-title")
        with Vertical(id="plots"):
            yield PlotextPlot(id="devices-plot", classes="series-line")
            yield PlotextPlot(id="models-plot", classes="series-line")
        yield Static("", id="readout")
        yield VerticalScroll(id="series")
        yield Footer()

    def on_mount(self) -> None:
        self.load(self.window)

    def watch_window(self, window: str) -> None:
        self.load(window)

    def action_window(self, window: str) -> None:
        self.window = window

    def action_move(self, steps: int) -> None:
        """Move the cursor along the points' times."""
        if not self.times:
            return
        at = self.cursor if self.cursor >= 0 else len(self.times) - 1
        self.cursor = max(0, min(len(self.times) - 1, at + steps))
        self._draw()

    def _now(self) -> int:
        if self.frame is not None:
            return self.frame.ts_ms
        return self.app.now_ms()

    def load(self, window: str) -> None:
        self.query_one("#history-title", Static).update(
            f"[b]memory used, last {window}[/b] [$text-muted](loading…)[/]"
        )
        self.now_ms = self._now()
        self.fetch(window, self.now_ms)

    @work(thread=True, exclusive=True, group="history")
    def fetch(self, window: str, now: int) -> None:
        worker = get_current_worker()
        try:
            series = self.app.source.history(None, now - WINDOWS[window], now)
        except Exception as exc:
            self.post_message(SourceFailed(failure_line(exc)))
            return
        if not worker.is_cancelled:
            self.post_message(HistoryReady(window, series))

    def on_source_failed(self, message: SourceFailed) -> None:
        self.query_one("#history-title", Static).update(plain(f"⚠ {message.error}", "bold $error"))

    def on_history_ready(self, message: HistoryReady) -> None:
        if message.window != self.window:
            return
        self.query_one("#history-title", Static).update(
            f"[b]memory used, last {message.window}[/b] "
            "[$text-muted]1-5 window · ← → cursor · ? help[/]"
        )
        self.show(message.series)

    def show(self, series: Series) -> None:
        self.series = series
        self.times = sorted({t for points in series.values() for t, _ in points})
        self.cursor = -1
        box = self.query_one("#series", VerticalScroll)
        box.remove_children()
        if not series:
            box.mount(Label("no samples in this window"))
            self._draw()
            return
        widgets: list[Widget] = []
        newest = self._newest()
        for label in sorted(series, key=lambda k: (not k.startswith("device:"), k)):
            points = series[label]
            values = [v for _, v in points]
            peak = max(values) if values else 0
            # the source ends each series alive at the newest tick with that tick's value
            if points and points[-1][0] == newest:
                latest = f"now {size(values[-1])}"
            else:
                latest = "ended, last " + (size(values[-1]) if values else "unknown")
            widgets.append(
                Label(
                    plain(f"{series_name(label, self.device_names)}  {latest}  peak {size(peak)}"),
                    classes="series-label",
                )
            )
        box.mount_all(widgets)
        self._draw()

    def _newest(self) -> int | None:
        return max((p[-1][0] for p in self.series.values() if p), default=None)

    def _draw(self) -> None:
        unit_ms, unit = AXIS_UNIT[self.window]
        at = self.times[self.cursor] if self.times else None
        for plot_id, prefix, title in (
            ("#devices-plot", "device:", "devices"),
            ("#models-plot", "model:", "models (measured total)"),
        ):
            plot = self.query_one(plot_id, PlotextPlot)
            plt = plot.plt
            plt.clear_figure()
            plt.title(title)
            plt.xlabel(f"{unit} before now")
            plt.ylabel("GiB")
            drawn = False
            for label in sorted(k for k in self.series if k.startswith(prefix)):
                points = self.series[label]
                if not points:
                    continue
                xs = [(t - self.now_ms) / unit_ms for t, _ in points]
                ys = [v / GIB for _, v in points]
                plt.plot(xs, ys, label=series_name(label, self.device_names), marker="braille")
                drawn = True
            if at is not None and drawn:
                plt.vline((at - self.now_ms) / unit_ms, "white")
            plt.xlim(-WINDOWS[self.window] / unit_ms, 0)
            ticks = AXIS_TICKS[self.window]
            plt.xticks(list(ticks), [str(t) if t else "now" for t in ticks])
            plt.ylim(0)
            plot.display = drawn  # no empty frame for a box without models (or devices)
            plot.refresh()
        # two lines of the readout's width, less a word's worth lost to wrapping each
        room = 2 * (self.size.width - 2) - 2 * LABEL_CHARS if self.size.width else None
        text = (
            "" if at is None else readout(self.series, at, self._newest(), self.device_names, room)
        )
        self.query_one("#readout", Static).update(plain(text))
