"""Messages between the poll workers and the screens. Stale frames are replaced, not
queued (toolong's ``can_replace``): only the newest sample matters."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from tui.series import Series
from tui.source import EventRow, Frame


@dataclass
class FrameReady(Message, bubble=False):
    """A new frame was built off the event loop."""

    frame: Frame
    replay: bool = False

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FrameReady) and message.replay == self.replay


@dataclass
class SourceFailed(Message, bubble=False):
    """The source could not be read: shown as a message, never a traceback."""

    error: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SourceFailed)


@dataclass
class HistoryReady(Message, bubble=False):
    window: str
    series: Series


@dataclass
class TicksReady(Message, bubble=False):
    ticks: list[int]


@dataclass
class ReplayRequested(Message):
    """Open replay at this moment (from an event row or ``--at``)."""

    ts_ms: int


@dataclass
class EventsReady(Message, bubble=False):
    events: list[EventRow]
