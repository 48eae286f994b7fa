"""Memory over time per device and per model: 5 min / 1 h / 24 h / 7 d / 30 d (all the
rollups the default retention keeps), from the source (the database's raw samples for short
windows, its per-minute rollups for long ones)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Label, Sparkline, Static
from textual.worker import get_current_worker

from monitor.errors import describe
from tui.format import plain, size
from tui.messages import HistoryReady, SourceFailed
from tui.source import Frame, Series

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


class HistoryScreen(Screen):
    """Sparklines of used memory, one per device and one per model."""

    if TYPE_CHECKING:  # Textual's typed ``app`` (textual.getters.app), for the checker only
        app = getters.app(VramscopeApp)

    BINDINGS = [
        Binding("1", "window('5m')", "5 min"),
        Binding("2", "window('1h')", "1 h"),
        Binding("3", "window('24h')", "24 h"),
        Binding("4", "window('7d')", "7 d"),
        Binding("5", "window('30d')", "30 d"),
        Binding("escape,h", "app.pop_screen", "Back"),
        Binding("q", "app.quit", "Quit"),
    ]

    window: reactive[str] = reactive("5m", init=False)
    """The time window shown."""

    def __init__(self, frame: Frame | None) -> None:
        super().__init__()
        self.frame = frame

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="history-title")
        yield VerticalScroll(id="series")
        yield Footer()

    def on_mount(self) -> None:
        self.load(self.window)

    def watch_window(self, window: str) -> None:
        self.load(window)

    def action_window(self, window: str) -> None:
        self.window = window

    def _now(self) -> int:
        if self.frame is not None:
            return self.frame.ts_ms
        return self.app.now_ms()

    def load(self, window: str) -> None:
        self.query_one("#history-title", Static).update(
            f"[b]memory used, last {window}[/b] [$text-muted](loading…)[/]"
        )
        self.fetch(window, self._now())

    @work(thread=True, exclusive=True, group="history")
    def fetch(self, window: str, now: int) -> None:
        worker = get_current_worker()
        try:
            series = self.app.source.history(None, now - WINDOWS[window], now)
        except Exception as exc:
            self.post_message(SourceFailed(describe(exc)))
            return
        if not worker.is_cancelled:
            self.post_message(HistoryReady(window, series))

    def on_source_failed(self, message: SourceFailed) -> None:
        self.query_one("#history-title", Static).update(plain(f"⚠ {message.error}", "bold $error"))

    def on_history_ready(self, message: HistoryReady) -> None:
        if message.window != self.window:
            return
        self.query_one("#history-title", Static).update(
            f"[b]memory used, last {message.window}[/b] [$text-muted]1-5 to change the window[/]"
        )
        self.show(message.series)

    def show(self, series: Series) -> None:
        box = self.query_one("#series", VerticalScroll)
        box.remove_children()
        if not series:
            box.mount(Label("no samples in this window"))
            return
        widgets: list[Widget] = []
        newest = max((points[-1][0] for points in series.values() if points), default=None)
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
                    plain(f"{label.split(':', 1)[1]}  {latest}  peak {size(peak)}"),
                    classes="series-label",
                )
            )
            widgets.append(Sparkline([float(v) for v in values] or [0.0], classes="series-line"))
        box.mount_all(widgets)
