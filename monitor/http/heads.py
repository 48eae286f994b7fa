"""The request heads of the daemon's HTTP connections, all read on one thread (issue 28
item 12).

A connection holds no request thread until its request line and headers have arrived:
one selector thread reads every pending head (at most ``MAX_HEAD_BYTES`` each, kept) and
cuts a connection whose head is not complete ``HEAD_TIMEOUT_S`` after it connected,
however slowly it trickles. At most ``MAX_PENDING_HEADS`` heads are pending at once; a
newer connection past that pushes the oldest out (answered 503), so stalled connections
cannot keep a new client from being read. A complete head is handed to ``dispatch``
(monitor/http/server.py picks a thread pool for it from what the head asks).
"""

from __future__ import annotations

import collections
import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HEAD_TIMEOUT_S = 5.0  # the request line and headers, in all (slowloris)
MAX_HEAD_BYTES = 8192  # request line + headers
MAX_PENDING_HEADS = 128
"""Connections whose head is still arriving (a socket and at most 12 KiB each, no
thread): a flood past this pushes the oldest out rather than keeping new ones out."""
_READ_BYTES = 4096
_WAKE_S = 1.0  # the longest the selector sleeps when nothing is pending

_BUSY_BODY = b'{"error":"busy: too many connections at once; try again"}\n'
BUSY_ANSWER = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
    + str(len(_BUSY_BODY)).encode()
    + b"\r\n\r\n"
    + _BUSY_BODY
)


@dataclass(frozen=True, slots=True)
class Head:
    """A connection's request head and the bytes that came after it (the body's start);
    ``too_large``: more than ``MAX_HEAD_BYTES`` arrived without a blank line (431)."""

    head: bytes
    extra: bytes = b""
    too_large: bool = False

    def lines(self) -> list[bytes]:
        """The request line and header lines, without line ends or the blank line."""
        lines = [line.rstrip(b"\r") for line in self.head.split(b"\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines


@dataclass(eq=False)
class _Pending:
    sock: socket.socket
    address: Any
    deadline_s: float  # time.monotonic() when it is cut
    buf: bytearray = field(default_factory=bytearray)


Dispatch = Callable[[socket.socket, Any, Head], None]
Note = Callable[[str, str], None]


def turn_away(sock: socket.socket) -> None:
    """Answer 503 and close: what the client sent already is read first, so that closing
    sends a FIN, not a reset that could cost the client the 503."""
    with contextlib.suppress(OSError):
        sock.settimeout(0.5)
        sock.sendall(BUSY_ANSWER)
        sock.setblocking(False)  # (with a timeout, recv would wait for data)
        for _ in range(4):
            if not sock.recv(65536):
                break
    _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    sock.close()


def _head_end(buf: bytearray) -> int | None:
    """The index just past the blank line that ends a request head, if it arrived."""
    ends = [at + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (at := buf.find(mark)) >= 0]
    return min(ends) if ends else None


class HeadReader:
    """Reads the heads of new connections (``add``) on one thread; ``dispatch`` gets each
    complete head (called on that thread: it must not block)."""

    def __init__(self, dispatch: Dispatch, note: Note) -> None:
        self._dispatch = dispatch
        self._note = note
        self._selector = selectors.DefaultSelector()
        self._pending: collections.OrderedDict[int, _Pending] = collections.OrderedDict()
        self._new: collections.deque[tuple[socket.socket, Any]] = collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="vramscope-http-heads", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop reading and close every pending connection; safe to call twice."""
        self._stopping = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def add(self, sock: socket.socket, address: Any) -> None:
        """A new connection (from the accepting thread)."""
        self._new.append((sock, address))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
            self._wake_w.send(b"x")

    def _run(self) -> None:
        try:
            while not self._stopping:
                for key, _ in self._selector.select(self._sleep_s()):
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        self._readable(key.data)
                self._take_new()
                self._expire(time.monotonic())
        finally:
            for pending in list(self._pending.values()):
                self._forget(pending)
                _close(pending.sock)
            while self._new:
                _close(self._new.popleft()[0])

    def _sleep_s(self) -> float:
        if not self._pending:
            return _WAKE_S
        oldest = next(iter(self._pending.values()))
        return min(_WAKE_S, max(0.0, oldest.deadline_s - time.monotonic()))

    def _take_new(self) -> None:
        while self._new:
            sock, address = self._new.popleft()
            if len(self._pending) >= MAX_PENDING_HEADS:
                oldest = next(iter(self._pending.values()))
                self._forget(oldest)
                self._note(
                    "busy",
                    f"more than {MAX_PENDING_HEADS} HTTP requests arriving at once; "
                    "the oldest is answered 503",
                )
                turn_away(oldest.sock)
            try:
                sock.setblocking(False)
                pending = _Pending(sock, address, time.monotonic() + HEAD_TIMEOUT_S)
                self._selector.register(sock, selectors.EVENT_READ, pending)
            except (OSError, ValueError):
                _close(sock)
                continue
            self._pending[sock.fileno()] = pending

    def _forget(self, pending: _Pending) -> None:
        self._pending.pop(pending.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(pending.sock)

    def _readable(self, pending: _Pending) -> None:
        try:
            chunk = pending.sock.recv(_READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client closed (or reset) before its head was complete
            self._forget(pending)
            _close(pending.sock)
            return
        pending.buf += chunk
        end = _head_end(pending.buf)
        if end is None and len(pending.buf) <= MAX_HEAD_BYTES:
            return
        self._forget(pending)
        if end is None or end > MAX_HEAD_BYTES:
            head = Head(bytes(pending.buf[:MAX_HEAD_BYTES]), too_large=True)
        else:
            head = Head(bytes(pending.buf[:end]), bytes(pending.buf[end:]))
        try:
            pending.sock.setblocking(True)
            self._dispatch(pending.sock, pending.address, head)
        except Exception as exc:  # never the reader thread's end
            self._note("error", f"an HTTP request could not be dispatched ({exc!r})")
            _close(pending.sock)

    def _expire(self, now_s: float) -> None:
        """Cut the connections whose head is late (the oldest first: same timeout)."""
        for pending in list(self._pending.values()):
            if pending.deadline_s > now_s:
                return
            self._forget(pending)
            self._note(
                "slow",
                f"an HTTP client did not finish its request within {HEAD_TIMEOUT_S:.0f} s; dropped",
            )
            _close(pending.sock)
