"""The fleet overview (``vramscope tui --remote A --remote B ...``): one row per box with
its devices, models, the headroom left on its tightest device and its active alerts; an
unreachable box says so. Enter opens that box's main screen (Esc comes back).

Each box is a :class:`tui.source.RemoteSource` (the daemon's HTTP API, answers checked as
untrusted) read on a daemon thread of its own, with its own deadline (monitor/http/
client.py): each row is drawn as its box answers, so one slow or dead box shows its own
"timed out" row while the others show their data, and a box still being read is not
read again (issue 28 item 10). Quitting never waits for a read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from monitor.api import BoxRow, active_alerts
from monitor.errors import describe
from tui.format import cell, safe, size
from tui.screens.main import MainScreen
from tui.source import Frame, RemoteSource, SampleSource
from tui.widgets.device_panel import named_devices

if TYPE_CHECKING:
    from textual import getters

    from tui.app import VramscopeApp

COLUMNS = ("box", "devices (used/total)", "models", "headroom", "alerts")


def box_row(url: str, frame: Frame) -> BoxRow:
    """A box's row from its latest frame (pure)."""
    parts = []
    tightest: tuple[int, str] | None = None
    for p, name in named_devices(frame.picture):
        parts.append(f"{name} {size(p.used_bytes)}/{size(p.capacity_bytes)}")
        room = p.headroom_bytes
        if room is not None and (tightest is None or room < tightest[0]):
            tightest = (room, name)
    return BoxRow(
        url,
        ", ".join(parts),
        len(frame.models),
        tightest[0] if tightest else None,
        tightest[1] if tightest else None,
        active_alerts(list(frame.events)),
    )


@dataclass
class BoxReady(Message, bubble=False):
    """One box answered (or failed): its row, at its index in the fleet."""

    index: int
    row: BoxRow


class FleetScreen(Screen):
    """Every box at a glance; Enter drills into one."""

    if TYPE_CHECKING:
        app = getters.app(VramscopeApp)

    AUTO_FOCUS = "#fleet"
    BINDINGS = [
        Binding("enter", "open", "Open box"),
        Binding("r", "refresh", "Refresh"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, sources: list[RemoteSource], refresh_s: float | None) -> None:
        super().__init__()
        self.sources = sources
        self.refresh_s = refresh_s
        self.rows: list[BoxRow | None] = [None] * len(sources)
        """Each box's latest row, in fleet order; None until it first answers."""
        self._reading: set[int] = set()  # boxes whose read is still running

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(
            f"{len(self.sources)} boxes · Enter opens one · Esc there comes back", id="fleet-title"
        )
        yield DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#fleet", DataTable)
        for name in COLUMNS:
            table.add_column(name, key=name)
        for i, source in enumerate(self.sources):
            table.add_row(cell(source.url), cell("connecting…"), "-", "-", "-", key=str(i))
        self.fetch()
        if self.refresh_s:
            self.set_interval(self.refresh_s, self.fetch, name="fleet-poll")

    def action_refresh(self) -> None:
        self.fetch()

    def fetch(self) -> None:
        """Read every box not being read already, each on its own daemon thread."""
        for i, source in enumerate(self.sources):
            if i in self._reading:
                continue
            self._reading.add(i)
            threading.Thread(
                target=self._read, args=(i, source), name="vramscope-fleet", daemon=True
            ).start()

    def _read(self, index: int, source: RemoteSource) -> None:
        try:
            row = box_row(source.url, source.latest())
        except Exception as exc:  # one box down is a row that says so
            row = BoxRow(source.url, error=describe(exc))
        self.post_message(BoxReady(index, row))

    def on_box_ready(self, message: BoxReady) -> None:
        self._reading.discard(message.index)
        self.rows[message.index] = message.row
        table = self.query_one("#fleet", DataTable)
        for name, value in zip(COLUMNS, self.cells(message.row), strict=True):
            table.update_cell(str(message.index), name, value, update_width=True)

    @staticmethod
    def cells(row: BoxRow) -> tuple[object, ...]:
        if row.error is not None:
            reason = row.error if len(row.error) <= 80 else row.error[:79] + "…"
            return (cell(row.url), cell(f"unreachable: {reason}"), "-", "-", "-")
        room = "-"
        if row.headroom_bytes is not None:
            room = f"{size(row.headroom_bytes)} on {row.headroom_device}"
        alerts = f"{len(row.active_alerts)}: {row.active_alerts[-1]}" if row.active_alerts else "-"
        return (cell(row.url), cell(row.devices), str(row.models), cell(room), cell(alerts))

    def action_open(self) -> None:
        table = self.query_one("#fleet", DataTable)
        if not self.sources or table.cursor_row < 0:
            return
        source = self.sources[min(table.cursor_row, len(self.sources) - 1)]
        self.app.push_screen(BoxScreen(self, source))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()


class BoxScreen(MainScreen):
    """One box of the fleet: the main screen over that box's source; Esc: the fleet."""

    BINDINGS = [Binding("escape", "back", "Fleet")]

    def __init__(self, fleet: FleetScreen, source: RemoteSource) -> None:
        self.fleet = fleet
        self.previous: SampleSource = fleet.app.source
        fleet.app.source = source
        fleet.app.sub_title = safe(source.describe())
        super().__init__()

    def action_back(self) -> None:
        self.app.source = self.previous
        self.app.sub_title = f"fleet of {len(self.fleet.sources)} boxes"
        self.app.pop_screen()
