"""Run each HTTP predict in a worker thread under a deadline, holding one of a few slots.

A predict reads model headers (bounded: monitor/gguf/reader.py MAX_HEADER_BYTES and
MAX_HEADER_ITEMS) and estimates; a hostile or unlucky one must not keep a slot, and so the
endpoint, busy for everyone. The request waits at most ``deadline_s`` for its worker, then
answers 504 and gives the slot back; the worker is abandoned (a daemon thread) and ends on
its own: the header walk is bounded and the reader's guard refuses to open another file
once the deadline has passed (monitor/http/access.py). Abandoned workers still running are
counted, and while ``max_abandoned`` of them run new predicts get 503, so a client that
times out on purpose cannot pile up threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from monitor.errors import VramscopeError

T = TypeVar("T")

PREDICT_DEADLINE_S = 10.0
"""The longest an HTTP predict may take (a real model's headers read in well under 1 s;
the 64 MiB/10M-item header budget is a few seconds at worst)."""


class Busy(VramscopeError):
    """No slot free (503)."""

    http_status = 503


class DeadlineExceeded(VramscopeError):
    """The worker did not finish within the deadline (504); it was abandoned."""

    http_status = 504


@dataclass(slots=True)
class _Outcome(Generic[T]):
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    error: BaseException | None = None
    abandoned: bool = False


class DeadlineRunner:
    """At most ``slots`` calls at once, each waited for at most ``deadline_s``."""

    def __init__(self, slots: int, deadline_s: float, max_abandoned: int) -> None:
        self.slots = slots
        self.deadline_s = deadline_s
        self.max_abandoned = max_abandoned
        self._slots = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self.abandoned = 0  # abandoned workers still running

    def run(self, work: Callable[[], T], name: str = "vramscope-predict") -> T:
        """``work()``'s result or exception; :class:`Busy` or :class:`DeadlineExceeded`."""
        with self._lock:
            if self.abandoned >= self.max_abandoned:
                raise Busy(f"{self.abandoned} timed-out predictions are still ending")
        if not self._slots.acquire(blocking=False):
            raise Busy(f"{self.slots} predictions are running")
        outcome: _Outcome[T] = _Outcome()
        try:
            worker = threading.Thread(
                target=self._work, args=(work, outcome), name=name, daemon=True
            )
            worker.start()
            finished = outcome.done.wait(self.deadline_s)
            with self._lock:
                if not finished and not outcome.done.is_set():
                    outcome.abandoned = True
                    self.abandoned += 1
        finally:
            self._slots.release()
        if outcome.abandoned:
            raise DeadlineExceeded(f"the prediction took longer than {self.deadline_s:g} s")
        if outcome.error is not None:
            raise outcome.error
        return outcome.value  # type: ignore[return-value]

    def _work(self, work: Callable[[], Any], outcome: _Outcome[Any]) -> None:
        try:
            outcome.value = work()
        except BaseException as exc:  # handed to the waiting request thread
            outcome.error = exc
        finally:
            with self._lock:
                outcome.done.set()
                if outcome.abandoned:
                    self.abandoned -= 1
