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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from monitor.api import BoxRow, active_alerts
from monitor.errors import describe
from tui.format import cell, middle_cut, safe, size
from tui.screens.main import MainScreen
from tui.source import Frame, RemoteSource, SampleSource
from tui.widgets.device_panel import named_devices

if TYPE_CHECKING:
    from textual import getters

    from monitor.api import PrometheusFleet
    from tui.app import VramscopeApp

COLUMNS = ("box", "state", "devices (used/total)", "models", "headroom", "OOM in", "alerts")
WIDTHS = {
    "box": 30,
    "state": 22,
    "devices (used/total)": 44,
    "models": 6,
    "headroom": 22,
    "OOM in": 7,
}
"""Widths (characters) of every column but the alerts on a wide terminal: a long device
list or a box's error never widens a column and never pushes the alerts off-screen
(issue 34); a cell cut to its width ends in "…", and the highlighted box's whole row
(its error, every device, every alert) is on the line above the table."""
NARROWEST = {
    "box": 14,  # "10.0.0.12:9835" whole
    "state": 18,  # "connection refused" whole
    "devices (used/total)": 10,
    "models": 6,
    "headroom": 10,
    "OOM in": 6,
}
"""The least each column gets on a narrow terminal; below their sum (and ALERTS_WIDTH)
the devices column is left out: the line above the table has the highlighted box's."""
ALERTS_WIDTH = 12  # the least room the alerts column keeps on screen
CELL_PADDING = 2  # a DataTable cell's padding, one each side
SCROLLBAR = 2


def widths_for(columns: int) -> dict[str, int]:
    """The width of each column shown on a terminal ``columns`` wide: WIDTHS when they fit
    with the alerts, else each cut towards NARROWEST in proportion, the devices column
    left out where even that does not fit; the alerts column has the rest."""
    names = [n for n in COLUMNS if n in WIDTHS]
    room = columns - SCROLLBAR - CELL_PADDING * (len(names) + 1) - ALERTS_WIDTH
    if sum(NARROWEST.values()) > room:
        names.remove("devices (used/total)")
        room += CELL_PADDING
    most, least = sum(WIDTHS[n] for n in names), sum(NARROWEST[n] for n in names)
    if most <= room:
        out = {n: WIDTHS[n] for n in names}
    else:
        share = max(room - least, 0) / (most - least)
        out = {n: NARROWEST[n] + int(share * (WIDTHS[n] - NARROWEST[n])) for n in names}
    out["alerts"] = ALERTS_WIDTH + room - sum(out.values())  # the rest: no side scrolling
    return out


def clip(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, "…" where it was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def box_name(url: str, width: int) -> str:
    """A box's URL in the box column: whole when it fits, else without its ``http://`` and
    cut in the middle (its host's start and its port stay)."""
    return url if len(url) <= width else middle_cut(url.removeprefix("http://"), width)


def headroom(row: BoxRow, width: int) -> str:
    """The room left on the box's tightest device: ``18.3G on GPU1 RTX 4090``, or where
    that is wider than ``width``, its device by its tag alone (``18.3G on GPU1``,
    ``18.3G GPU1``); ``-``: unknown."""
    if row.headroom_bytes is None:
        return "-"
    room, device = size(row.headroom_bytes), row.headroom_device or ""
    tag = device.split()[0] if device.split() else ""
    for text in (f"{room} on {device}", f"{room} on {tag}", f"{room} {tag}"):
        if len(text) <= width:
            return text
    return room


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
        self.widths: dict[str, int] = dict(WIDTHS)  # the columns shown (lay_out)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(cell(self.first_title()), id="fleet-title")
        yield DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def first_title(self) -> str:
        return f"{len(self.sources)} boxes · Enter opens one · Esc there comes back"

    def on_mount(self) -> None:
        self.lay_out(self.app.size.width)
        self.fetch()
        if self.refresh_s:
            self.set_interval(self.refresh_s, self.fetch, name="fleet-poll")

    def lay_out(self, columns: int) -> None:
        """The table's columns for a terminal ``columns`` wide, and every row again."""
        self.widths = widths_for(columns)
        table = self.query_one("#fleet", DataTable)
        cursor = table.cursor_row
        table.clear(columns=True)
        for name in self.shown():
            table.add_column(name, key=name, width=self.widths.get(name))
        self.fill(table)
        if table.row_count:
            table.move_cursor(row=min(max(cursor, 0), table.row_count - 1))

    def shown(self) -> list[str]:
        return [n for n in COLUMNS if n in self.widths]

    def fill(self, table: DataTable) -> None:
        for i, source in enumerate(self.sources):
            row = self.rows[i] if i < len(self.rows) else None
            if row is None:
                first = (cell(box_name(source.url, self.widths["box"])), "connecting…")
                table.add_row(*first, *["-"] * (len(self.shown()) - 2), key=str(i))
            else:
                table.add_row(*self.cells(row), key=str(i))

    def on_resize(self, event: events.Resize) -> None:
        if widths_for(event.size.width) != self.widths:
            self.lay_out(event.size.width)

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
        for name, value in zip(self.shown(), self.cells(message.row), strict=True):
            table.update_cell(str(message.index), name, value)
        if table.cursor_row == message.index:
            self.show_whole(message.index)

    def cells(self, row: BoxRow) -> tuple[object, ...]:
        """The row's cells in the columns shown, each cut to its width."""
        widths = self.widths
        url = cell(box_name(row.url, widths["box"]))
        if row.error is not None:
            reason = cell(clip(row.reason or "", widths["state"]))
            return (url, reason, *["-"] * (len(self.shown()) - 2))
        room = headroom(row, widths["headroom"])
        alerts = f"{len(row.active_alerts)}: {row.active_alerts[-1]}" if row.active_alerts else "-"
        devices = widths.get("devices (used/total)")
        return (
            url,
            "ok",
            *([cell(clip(row.devices, devices))] if devices else []),
            str(row.models),
            cell(clip(room, widths["headroom"])),
            duration(row.time_to_oom_s),
            cell(clip(alerts, widths["alerts"])),
        )

    def whole(self, index: int) -> str:
        """The line above the table for the highlighted box: its whole error, or its
        URL, every device and its newest alert."""
        row = self.rows[index] if 0 <= index < len(self.rows) else None
        if row is None:
            return f"{len(self.sources)} boxes · Enter opens one · Esc there comes back"
        if row.error is not None:
            return f"{row.url}: {row.error}"
        alerts = f" · alerts: {'; '.join(row.active_alerts)}" if row.active_alerts else ""
        return f"{row.url}: {row.devices or 'no devices'}{alerts}"

    def show_whole(self, index: int) -> None:
        self.query_one("#fleet-title", Static).update(cell(self.whole(index)))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.show_whole(event.cursor_row)

    def action_open(self) -> None:
        table = self.query_one("#fleet", DataTable)
        if not self.sources or table.cursor_row < 0:
            return
        source = self.sources[min(table.cursor_row, len(self.sources) - 1)]
        self.app.push_screen(BoxScreen(self, source))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()


def duration(seconds: float | None) -> str:
    """A time to OOM in one unit: ``45s``, ``12m``, ``3.5h``, ``2.0d``; ``-``: none."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


@dataclass
class FleetRows(Message, bubble=False):
    """Prometheus answered (``rows``) or could not be read (``error``)."""

    rows: list[BoxRow]
    error: str | None = None


class PrometheusFleetScreen(FleetScreen):
    """``vramscope tui --prometheus URL``: the same overview, its boxes the scrape targets
    Prometheus knows (monitor/http/prometheus.py: every metric name and query is there),
    all read in one round of queries on a daemon thread. Enter opens a box's daemon
    directly (its API at its scrape URL, its token from ``[fleet]``); a box whose target
    is down is not opened."""

    def __init__(
        self,
        fleet: PrometheusFleet,
        token_of: Callable[[str], str | None],
        refresh_s: float | None,
    ) -> None:
        super().__init__([], refresh_s)
        self.prometheus = fleet
        self.token_of = token_of
        self._boxes: dict[str, RemoteSource] = {}  # by URL: a box keeps its frames
        self._asking = False
        self._token_errors: dict[str, str] = {}  # box URL -> why its token is not read

    def first_title(self) -> str:
        return f"asking Prometheus {self.prometheus.url} for its vramscope targets…"

    def fetch(self) -> None:
        if self._asking:
            return
        self._asking = True
        threading.Thread(target=self._ask, name="vramscope-prometheus", daemon=True).start()

    def _ask(self) -> None:
        try:
            message = FleetRows(self.prometheus.rows())
        except Exception as exc:  # Prometheus down: say so above the table
            message = FleetRows([], error=describe(exc))
        self.post_message(message)

    def on_fleet_rows(self, message: FleetRows) -> None:
        self._asking = False
        title = self.query_one("#fleet-title", Static)
        if message.error is not None:
            title.update(cell(f"Prometheus {self.prometheus.url}: {message.error}"))
            return
        self.rows = list(message.rows)
        self.sources = [self._box(row.url) for row in message.rows]
        table = self.query_one("#fleet", DataTable)
        cursor = table.cursor_row
        table.clear()
        self.fill(table)
        if message.rows:
            table.move_cursor(row=min(max(cursor, 0), len(message.rows) - 1))
            self.show_whole(table.cursor_row)
        else:
            title.update(cell(f"Prometheus {self.prometheus.url} knows no vramscope target"))

    def _box(self, url: str) -> RemoteSource:
        if url not in self._boxes:
            try:
                token = self.token_of(url)
            except Exception as exc:  # its [fleet] token file: said when Enter opens it
                self._token_errors[url] = describe(exc)
                token = None
            self._boxes[url] = RemoteSource(url, token)
        return self._boxes[url]

    def action_open(self) -> None:
        table = self.query_one("#fleet", DataTable)
        index = table.cursor_row
        if not 0 <= index < len(self.sources):
            return
        row = self.rows[index]
        if row is not None and row.error is not None:
            self.notify(safe(f"{row.url}: {row.reason}"), severity="warning", markup=False)
            return
        source = self.sources[index]
        if source.url in self._token_errors:
            self.notify(safe(self._token_errors[source.url]), severity="error", markup=False)
            return
        self.app.push_screen(BoxScreen(self, source))


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
