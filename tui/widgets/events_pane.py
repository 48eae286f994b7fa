"""Events: loads, OOM kills, alerts, process exits. Enter on one opens replay there."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message
from textual.widgets import DataTable

from tui.format import cell, clock
from tui.source import EventRow

SEVERITY = {"critical": "‼", "warning": "!", "info": " "}


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

    def on_mount(self) -> None:
        self.add_column("time", key="time")
        self.add_column("kind", key="kind")
        self.add_column("message", key="message")

    def show(self, events: tuple[EventRow, ...] | list[EventRow]) -> None:
        newest = list(reversed(events[-200:]))
        if newest == self._events:
            return
        self._events = newest
        self.clear()
        for i, e in enumerate(newest):
            mark = SEVERITY.get(e.severity, " ")
            self.add_row(clock(e.ts_ms), cell(f"{mark}{e.kind}"), cell(e.message), key=str(i))
        if not newest:
            self.add_row("", "", "no events", key="none")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        key = event.row_key.value
        if key is not None and key.isdigit() and self._events and int(key) < len(self._events):
            self.post_message(self.Opened(self._events[int(key)]))
