"""Events: loads, OOM kills, alerts, process exits. Enter on one opens replay there."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from monitor.device_names import relabel
from tui.format import CellText, cell, clock, safe
from tui.source import EventRow

SEVERITY = {"critical": "‼", "warning": "!", "info": " "}
MESSAGE_MIN = 20
"""The message column's narrowest: a pane narrower than that scrolls sideways."""


class EventsPane(DataTable):
    """Newest first."""

    DEFAULT_CSS = """
    EventsPane { height: 1fr; }
    """

    @dataclass
    class Opened(Message):
        """The user asked to replay the box at this event."""

        event: EventRow

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(cursor_type="row", show_header=False, id=id, classes=classes)
        self._events: list[EventRow] | None = None
        self._drawn: tuple[int, dict[str, str]] | None = None
        """(message width, device names) the rows were drawn with."""
        self.labels: dict[str, str] = {}
        """Device names by id (monitor/device_names.py), set by the screen from its frame."""

    def on_mount(self) -> None:
        self.add_column("time", key="time")
        self.add_column("kind", key="kind")
        self.add_column("message", key="message")

    def _message_width(self, events: list[EventRow]) -> int:
        """The rest of the pane's width after the time and kind columns: messages wrap in
        it (never cut after a few characters, never a sideways scroll)."""
        pad = 2 * self.cell_padding
        kind = max([len(f"{SEVERITY.get(e.severity, ' ')}{e.kind}") for e in events] + [4])
        # room for a vertical scrollbar always: wrapped rows may bring one
        pane = (self.content_region.width or 80) - self.styles.scrollbar_size_vertical
        room = pane - (len("00:00:00") + pad) - (kind + pad) - pad
        return max(room, MESSAGE_MIN)

    def show(self, events: tuple[EventRow, ...] | list[EventRow]) -> None:
        newest = list(reversed(events[-200:]))
        width = self._message_width(newest)
        if newest == self._events and self._drawn == (width, self.labels):
            return
        self._events, self._drawn = newest, (width, dict(self.labels))
        column = self.columns.get(ColumnKey("message"))
        if column is not None:
            column.auto_width, column.width = False, width
        self.clear()
        for i, e in enumerate(newest):
            mark = SEVERITY.get(e.severity, " ")
            message = CellText(safe(relabel(e.message, self.labels)), end="", overflow="fold")
            self.add_row(clock(e.ts_ms), cell(f"{mark}{e.kind}"), message, key=str(i), height=None)
        if not newest:
            self.add_row("", "", "no events", key="none")

    def on_resize(self) -> None:
        """A new width: the messages wrapped again."""
        if self._events is not None:
            self.show(list(reversed(self._events)))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        key = event.row_key.value
        if key is not None and key.isdigit() and self._events and int(key) < len(self._events):
            self.post_message(self.Opened(self._events[int(key)]))
