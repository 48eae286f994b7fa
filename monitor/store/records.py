"""What the writer is handed to write about an exit, and the judge that decides it.

The store stores and decides nothing (docs/architecture.md): which exits become events,
which alert, and the words of their messages are the exit judge's
(monitor/analysis/exits_judged.py), which the daemon hands the :class:`Store` it opens.
The writer asks it about each exit with the process row it found (the row's existence
and first sighting are only known inside the tick's transaction: an earlier tick may be
waiting in memory for the database) and writes the records it gets back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from collectors.base import ExitedProcess


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """The ``processes`` row of a process that exited, as the writer found it in this
    tick's transaction (the newest row of its pid and start tick not yet marked exited)."""

    id: int
    comm: str
    engine: str | None
    argv_json: str | None  # the stored argv, a JSON list
    first_seen_ms: int | None  # the tick the daemon first sampled it (epoch ms)


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One ``events`` row, stored under its content key (the same record written twice, a
    backlog replayed again, is kept once)."""

    ts_ms: int
    kind: str
    severity: str  # "info" | "warning" | "critical"
    subject: str | None
    message: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ExitRecord:
    """What to write about one exit: the row's ``exit_cause`` (monitor/exits.py causes;
    unused when there is no row) and its events, in order (none: the exit is not told)."""

    cause: str
    events: tuple[EventRecord, ...]


class ExitJudge(Protocol):
    """Decides what the writer records about each exit (monitor/analysis/exits_judged.py)."""

    def keeps_record(self, gone: ExitedProcess) -> bool:
        """Whether the exited process gets its ``processes`` row at once, however short
        it lived (an exit that alerts keeps its record)."""
        ...

    def judge(self, gone: ExitedProcess, row: ProcessRow | None, ts_ms: int) -> ExitRecord:
        """The records of one exit seen at ``ts_ms``, given its row (None: none written)."""
        ...
