"""Followed engine logs read off the sampling tick, each tail on its own, floods merged.

Anyone who can write an engine's log can write 200,000 out-of-memory lines into it (issue
28 item 4: that gave 190,650 ``engine_oom`` events in 20 s, stalled 15 of 20 ticks and
evicted every kernel OOM kill from the events table). So:

- :class:`LogReader` reads every tail in a thread of its own, one round per tick (the tick
  wakes it and takes what the previous round found, never waiting): each tail gives at most
  ``follow.MAX_LINES_PER_TICK`` lines and ``follow.MAX_BYTES_PER_TICK`` bytes a round.
- :func:`read_tail` isolates each tail (issue 28 item 5): whatever one raises (a FIFO, a
  folder swapped for a file, an I/O error) is logged once per change of its error and
  never stops the other tails or the kernel log.
- :class:`LogMerger`: at most one log-derived event per (log, kind) per ``MERGE_WINDOW_S``
  past the first. The first line of a quiet log is passed on at once (a real OOM is never
  delayed); the lines after it within the window are counted and become one event when the
  window ends, its message saying how many (``data["lines"]``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from monitor.logs.follow import MAX_LINES_PER_TICK
from monitor.logs.kernel_records import KernelEvent
from monitor.store.retention import is_log_derived

log = logging.getLogger(__name__)
MERGE_WINDOW_S = 60.0
"""One merged event per (log, kind) per minute at most: an alert rule or a post-mortem
needs to know an engine ran out of memory and how often, not each line."""
MAX_QUEUED_EVENTS = 10_000
"""Events found but not taken by a tick yet (the database refuses writes, ticks stall):
the oldest go past this. Merged log events are a handful a minute; the rest are a
journal's kernel records, at most ``MAX_LINES_PER_TICK`` a round each."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_tail(tail: Any, max_lines: int = MAX_LINES_PER_TICK) -> list[KernelEvent]:
    """``tail.read()``, its failure kept in ``tail.read_error`` and logged once per change
    (the same error every tick is one line), never raised."""
    try:
        events: list[KernelEvent] = tail.read(max_lines)
    except Exception as exc:  # noqa: BLE001 - one log must never blind the others
        why = f"{type(exc).__name__}: {exc}"
        if why != getattr(tail, "read_error", None):
            log.warning("log %s not read: %s (retried every tick)", _name(tail), why)
        tail.read_error = why  # a file stays open where it was: read on once it can be
        return []
    if getattr(tail, "read_error", None) is not None:
        log.info("log %s read again", _name(tail))
        tail.read_error = None
    return events


def _name(tail: Any) -> str:
    return str(getattr(tail, "path", None) or getattr(tail, "unit", None) or tail)


@dataclass
class _Window:
    start_ms: int
    lines: int  # merged into this window, not passed on yet
    last: KernelEvent | None


@dataclass
class LogMerger:
    """Merges log-derived events (``retention.is_log_derived``) per (source, kind)."""

    window_s: float = MERGE_WINDOW_S
    _windows: dict[tuple[str, str], _Window] = dataclasses.field(default_factory=dict)

    def admit(self, events: Iterable[KernelEvent], now_ms: int) -> list[KernelEvent]:
        """The events to record now: every kernel record, and the first of a log's burst."""
        out = self.due(now_ms)
        for ev in events:
            if not is_log_derived(ev.kind):
                out.append(ev)
                continue
            key = (str(ev.data.get("source")), ev.kind)
            window = self._windows.get(key)
            if window is None:
                self._windows[key] = _Window(now_ms, 0, None)
                out.append(ev)
            else:
                window.lines += 1
                window.last = ev
        return out

    def due(self, now_ms: int) -> list[KernelEvent]:
        """One event per window that ended with lines merged into it; a window that ended
        quiet is closed, so the next line is passed on at once."""
        out: list[KernelEvent] = []
        window_ms = int(self.window_s * 1000)
        for key, window in list(self._windows.items()):
            if now_ms - window.start_ms < window_ms:
                continue
            if window.last is None:
                del self._windows[key]
                continue
            out.append(self._merged(window, now_ms))
            self._windows[key] = _Window(now_ms, 0, None)
        return out

    def flush(self, now_ms: int) -> list[KernelEvent]:
        """Every window's merged lines now (the daemon stops): no count is lost."""
        out = [self._merged(w, now_ms) for w in self._windows.values() if w.last is not None]
        self._windows.clear()
        return out

    def _merged(self, window: _Window, now_ms: int) -> KernelEvent:
        assert window.last is not None
        seconds = (now_ms - window.start_ms) / 1000
        data = {
            **window.last.data,
            "lines": window.lines,
            "window_start_ms": window.start_ms,
            "window_s": round(seconds, 1),
        }
        message = (
            f"{window.last.message} (and {window.lines:,} more such lines in {seconds:.0f} s,"
            " merged into this event)"
        )
        return dataclasses.replace(window.last, message=message, data=data)


def read_round(tails: Iterable[Any], merger: LogMerger, now_ms: int) -> list[KernelEvent]:
    """Every tail read once within its budget, each on its own, through ``merger``."""
    raw: list[KernelEvent] = []
    for tail in tails:
        raw += read_tail(tail)
    return merger.admit(raw, now_ms)


class LogReader:
    """The tails read in a thread: :meth:`kick` starts a round, :meth:`take` returns what
    the rounds found so far, waiting for the round just kicked at most ``wait_s``. A round
    within budget takes a few ms; one that takes longer (a flood) goes on while the tick
    goes on, and what it finds is taken by the next tick."""

    def __init__(self, tails: list[Any], clock: Callable[[], int] = _now_ms) -> None:
        self.tails = tails
        self.merger = LogMerger()
        self.dropped = 0  # events lost past MAX_QUEUED_EVENTS
        self._clock = clock
        self._found: deque[KernelEvent] = deque()
        self._lock = threading.Lock()  # the tails and what they found
        self._rounds = threading.Condition()
        self._asked = self._done = 0  # rounds kicked, rounds finished
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-logs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        with self._rounds:
            self._asked += 1
            self._rounds.notify_all()

    def idle(self) -> bool:
        """No tail to read, no merge window open and nothing found waiting: a round would
        find nothing, so the tick need not wake the thread for one (issue 32 item 3: the
        default config follows no log, and each tick paid two thread hand-offs for it)."""
        with self._lock:
            return not self.tails and not self.merger._windows and not self._found

    def take(self, wait_s: float = 0.0) -> list[KernelEvent]:
        with self._rounds:
            self._rounds.wait_for(lambda: self._done >= self._asked, timeout=wait_s)
        with self._lock:
            found = list(self._found)
            self._found.clear()
        return found

    def replace(self, tails: list[Any]) -> None:
        """New tails (a reload); the old ones are closed once no round reads them."""
        with self._lock:
            old, self.tails = self.tails, tails
        for tail in old:
            tail.close()

    def round(self) -> None:
        """Read every tail once, within its budget, and queue what it found."""
        with self._lock:
            found = read_round(self.tails, self.merger, self._clock())
            room = MAX_QUEUED_EVENTS - len(self._found)
            self.dropped += max(0, len(found) - room)
            self._found.extend(found[: max(0, room)])

    def _run(self) -> None:
        while True:
            with self._rounds:
                self._rounds.wait_for(lambda: self._asked > self._done or self._stop.is_set())
                if self._stop.is_set():
                    return
                asked = self._asked
            try:
                self.round()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any log
                log.error("reading the engine logs failed: %r", exc)
            with self._rounds:
                self._done = asked
                self._rounds.notify_all()

    def close(self) -> None:
        """Stop the thread, close the tails; the lines merged so far are queued as their
        events, for :meth:`take`."""
        self._stop.set()
        with self._rounds:
            self._rounds.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with self._lock:
            for tail in self.tails:
                tail.close()
            self._found.extend(self.merger.flush(self._clock()))
