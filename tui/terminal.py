"""The TUI's hold on its terminal: it ends when the terminal goes away or it is told to.

Textual's Linux driver reads the terminal in a thread and, on end-of-file, goes on
polling a descriptor that stays readable: a ``vramscope tui`` whose terminal closed (an
ssh session dropped under ``nohup``, ``docker run -it`` detached) spun at most of a core
until killed. And as PID 1 of a container or PID namespace a signal without a handler is
ignored, so ``docker stop`` (SIGTERM) and a hang-up (SIGHUP) did nothing either.

:class:`HangupDriver` is textual's driver with an input loop that ends on end-of-file or
an error (EIO) from the terminal; :func:`install_stop_signals` gives SIGTERM and SIGHUP
handlers on the app's event loop. Both ask the app to exit with a status of its own
(:data:`EXIT_HANGUP`, :data:`EXIT_TERMINATED`), restoring the terminal where it still is.

The input loop also sleeps until there is input (or the driver stops) instead of waking
ten times a second to look: on an idle live TUI textual's 0.1 s poll was ~0.13 % of a
core, a tenth of nvitop's whole cost (bench/RESULTS.md, "Third idle pass"). It still
wakes every 0.1 s while the xterm parser waits out a lone escape.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import threading
from codecs import getincrementaldecoder
from typing import Any

from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

EXIT_HANGUP = 128 + signal.SIGHUP  # 129: the terminal went away (EOF/EIO) or SIGHUP
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: stopped by SIGTERM (docker stop, kill)
_READ_BYTES = 4096  # what textual reads at once
_POLL_S = 0.1  # how often the loop looks at exit_event, as textual's own does


class WakingEvent(threading.Event):
    """The driver's ``exit_event``: setting it also writes a byte to ``wake_fd`` (the
    input loop's pipe, while it runs), so a loop blocked in ``select`` sees it at once."""

    wake_fd: int | None = None

    def set(self) -> None:
        super().set()
        fd = self.wake_fd
        if fd is not None:
            with contextlib.suppress(OSError):  # full (already woken) or closed
                os.write(fd, b"x")


def _wait_s(parser: XTermParser) -> float | None:
    """How long the input loop may sleep: until input, unless the parser waits out an
    escape sequence (textual's ``Parser.tick`` then needs its 0.1 s ticks)."""
    pending = getattr(parser, "_timeout_time", 0.0)  # textual 8.2's Parser; else poll
    return None if pending is None else _POLL_S


class HangupDriver(LinuxDriver):
    """Textual's Linux driver whose input thread ends the app when the terminal is gone.

    The loop is textual 8.2's ``run_input_thread`` (select, read, feed the xterm parser,
    tick it for lone escapes) with two changes: a read that returns nothing or raises
    OSError means no one can type here any more, so the app exits with EXIT_HANGUP
    instead of the loop polling the dead descriptor forever; and ``select`` sleeps until
    input or ``exit_event`` (a pipe wakes it), not 0.1 s, unless an escape is pending.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exit_event = WakingEvent()

    def run_input_thread(self) -> None:
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        selector.register(wake_r, selectors.EVENT_READ)
        exit_event = self.exit_event
        if isinstance(exit_event, WakingEvent):
            exit_event.wake_fd = wake_w
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        try:
            while not exit_event.is_set():
                ready = {key.fd for key, _ in selector.select(_wait_s(parser))}
                if wake_r in ready:
                    with contextlib.suppress(OSError):
                        os.read(wake_r, 64)
                if self.fileno in ready:
                    try:
                        data = os.read(self.fileno, _READ_BYTES)
                    except OSError:  # EIO: the terminal hung up
                        data = b""
                    if not data:
                        self._app.call_later(self._app.exit, None, EXIT_HANGUP)
                        return
                    for event in parser.feed(decode(data)):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            if isinstance(exit_event, WakingEvent):
                exit_event.wake_fd = None
            selector.close()
            os.close(wake_r)
            os.close(wake_w)


def install_stop_signals(app: Any) -> None:
    """SIGTERM and SIGHUP exit ``app`` (a textual App) through its own shutdown, so the
    terminal is restored and the source closed; as PID 1 they would otherwise be ignored.
    Call on the app's event loop (on_mount); the loop removes them when it closes."""
    loop = asyncio.get_running_loop()
    for signum, status in ((signal.SIGTERM, EXIT_TERMINATED), (signal.SIGHUP, EXIT_HANGUP)):
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            # not the main thread (tests drive the app from another), or no signals here
            loop.add_signal_handler(signum, app.exit, None, status)
