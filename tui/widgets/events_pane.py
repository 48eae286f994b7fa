"""Events: loads, OOM kills, alerts, process exits. Enter on one opens replay there."""

from __future__ import annotations

from collections.abc import Sequence
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
        self._groups: list[tuple[EventRow, list[EventRow]]] = []
        """Newest first: each event shown, with the evidence joined to it (a crash)."""
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
        self._groups = crashes_whole(events[-200:])
        column = self.columns.get(ColumnKey("message"))
        if column is not None:
            column.auto_width, column.width = False, width
        self.clear()
        for i, (e, evidence) in enumerate(self._groups):
            mark = SEVERITY.get(e.severity, " ")
            text = safe(relabel(e.message, self.labels))
            for x in evidence:  # a crash's evidence beneath it, as `vramscope events` shows it
                text += (
                    f"\n└ {clock(x.ts_ms)} {safe(x.kind)} {safe(relabel(x.message, self.labels))}"
                )
            message = CellText(text, end="", overflow="fold")
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
        if key is not None and key.isdigit() and int(key) < len(self._groups):
            self.post_message(self.Opened(self._groups[int(key)][0]))


def crashes_whole(events: Sequence[EventRow]) -> list[tuple[EventRow, list[EventRow]]]:
    """``events`` (oldest first) as ``vramscope events`` groups them, newest first: a
    crash one row, the ``process_exit``, kill record and engine line the daemon joined to
    it beneath (monitor/report/events.py ``grouped``, by its join rules only)."""
    from monitor.api import grouped_events

    rows = [
        {"ts_ms": e.ts_ms, "kind": e.kind, "severity": e.severity, "data": data(e), "row": e}
        for e in events
    ]
    return [
        (head["row"], [x["row"] for x in evidence])
        for head, evidence in reversed(grouped_events(rows))
    ]


def data(e: EventRow) -> dict[str, object] | None:
    """The event's stored data where it is an object (a remote daemon's answer is not
    trusted to be one)."""
    return e.data if isinstance(e.data, dict) else None
