"""The input loop of tui/terminal.py's HangupDriver on a real pseudo-terminal: it sleeps
until there is input or the driver stops (no 0.1 s polling), still delivers keys, a lone
escape, and ends at once when ``exit_event`` is set. Counts of ``select`` calls, never
timings; every wait has a generous hang guard."""

from __future__ import annotations

import asyncio
import os
import pty
import selectors
import signal
import threading
import time
import tty

import pytest
from textual import events
from textual.app import App

from tui.terminal import HangupDriver, WakingEvent

HANG_GUARD_S = 20.0


class Counting(selectors.SelectSelector):
    """The selector the loop makes, counting its ``select`` calls and their timeouts."""

    timeouts: list[float | None] = []
    started = threading.Event()

    def select(self, timeout: float | None = None):  # noqa: ANN201
        Counting.timeouts.append(timeout)
        Counting.started.set()
        return super().select(timeout)


@pytest.fixture
def loop_on_pty(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """A HangupDriver whose input loop reads a pty's slave side, in a thread; yields
    (driver, master fd, the messages it delivered, the thread)."""
    Counting.timeouts = []
    Counting.started = threading.Event()
    monkeypatch.setattr(selectors, "SelectSelector", Counting)
    master, slave = pty.openpty()
    tty.setraw(slave)  # as textual sets its terminal: each byte readable at once
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}

    async def make() -> HangupDriver:  # the driver keeps the running loop
        return HangupDriver(App())

    loop = asyncio.new_event_loop()
    driver = loop.run_until_complete(make())
    for sig, handler in handlers.items():  # the driver's own, for a real terminal
        signal.signal(sig, handler)
    driver.fileno = slave
    delivered: list[object] = []
    monkeypatch.setattr(driver, "process_message", delivered.append)
    thread = threading.Thread(target=driver.run_input_thread, daemon=True)
    thread.start()
    assert Counting.started.wait(HANG_GUARD_S)
    yield driver, master, delivered, thread
    driver.exit_event.set()
    thread.join(HANG_GUARD_S)
    os.close(master)
    os.close(slave)
    loop.close()


def until(ok, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + HANG_GUARD_S  # hang guard only
    while not ok():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_an_idle_loop_sleeps_in_one_select_until_told_to_stop(loop_on_pty) -> None:  # noqa: ANN001
    """Noise: no input for half a second: one ``select`` with no timeout (textual's loop
    made one every 0.1 s); setting ``exit_event`` wakes it and the loop ends."""
    driver, _master, delivered, thread = loop_on_pty
    assert isinstance(driver.exit_event, WakingEvent)
    time.sleep(0.5)  # room for a polling loop to show itself; no assertion on time
    assert Counting.timeouts == [None]
    driver.exit_event.set()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    assert delivered == [] and len(Counting.timeouts) == 1


def test_a_key_is_delivered(loop_on_pty) -> None:  # noqa: ANN001
    """Signal: a typed key wakes the loop and reaches the app as a Key event."""
    _driver, master, delivered, _thread = loop_on_pty
    os.write(master, b"r")
    until(lambda: any(isinstance(m, events.Key) for m in delivered), "no key")
    keys = [m for m in delivered if isinstance(m, events.Key)]
    assert [k.key for k in keys] == ["r"]


def test_a_lone_escape_is_delivered_by_the_parser_tick(loop_on_pty) -> None:  # noqa: ANN001
    """A lone escape waits for the rest of a sequence: the loop polls (0.1 s) until the
    parser gives it up as the escape key, then sleeps again."""
    _driver, master, delivered, _thread = loop_on_pty
    os.write(master, b"\x1b")
    until(lambda: any(isinstance(m, events.Key) for m in delivered), "no escape")
    assert [m.key for m in delivered if isinstance(m, events.Key)] == ["escape"]
    assert 0.1 in Counting.timeouts
    until(lambda: Counting.timeouts[-1] is None, "still polling")
