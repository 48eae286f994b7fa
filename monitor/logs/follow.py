"""Engine logs the daemon can reach: files it tails and journald units it follows.

Configured in ``[logs]``: ``files`` (a llama-server ``--log-file``, llama-swap's log) and
``journal_units`` (``llama-server@x.service``, ``ollama.service``, ``systemd-oomd.service``);
and, when ``[llama_swap] url`` is set, llama-swap's upstream log stream (the output of every
model it runs, which goes nowhere else by default: :class:`SwapLogTail`).
Each round (one per tick, in monitor/logs/reader.py's thread) reads what arrived, at most
``MAX_LINES_PER_TICK`` lines and ``MAX_BYTES_PER_TICK`` bytes a log, without blocking:
lines go through the kernel-log parser in its engine-log mode
(``KernelLogParser(source=...)``), which recognises engine out-of-memory lines
(``cudaMalloc failed: out of memory``, ``failed to allocate ... buffer``, PyTorch's
``CUDA out of memory. Tried to allocate``) as ``engine_oom`` events naming the
log. Anyone can write to an engine's log, so kernel OOM kills, Xids and systemd-oomd kills
are taken from a journal only where journald vouches for the writer (``_TRANSPORT=kernel``,
``_COMM=systemd-oomd``, ``_PID=1``), never from a file or llama-swap's stream.
A rotated or truncated file is reopened from its start.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import logging
import os
import socket
import stat
import subprocess
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from monitor.errors import UsageError
from monitor.logs.kernel import KernelLogParser, parse_journal_json
from monitor.logs.kernel_records import KernelEvent

log = logging.getLogger(__name__)
MAX_BYTES_PER_TICK = 1 << 20
"""Bytes read from one tail per round (one round per tick): a flood costs at most this."""
MAX_LINES_PER_TICK = 5_000
"""Lines parsed from one tail per round; what is past it stays in the file (or the
journal pipe, or llama-swap's queue) for the next rounds. Parsing one line is a few µs, so
a round of every tail stays a few tens of ms (issue 28 item 4: 200,000 lines used to be
parsed and stored on the tick itself)."""
MAX_BACKLOG_BYTES = 8 << 20
"""A followed file more than this ahead of us (a flood faster than the budget) is skipped
to its end: the skipped bytes are counted (``FileTail.skipped_bytes``) and said in one
warning, never parsed. Eight rounds' worth of reading: a burst is still read whole."""
MAX_PARTIAL_LINE_BYTES = 65536  # an unfinished line longer than this keeps its tail only


def take_lines(chunk: bytes, max_lines: int) -> tuple[list[bytes], bytes]:
    """At most ``max_lines`` complete lines of ``chunk``, and what follows them (the next
    lines, or an unfinished line)."""
    parts = chunk.split(b"\n", max_lines)
    rest = parts.pop()
    return parts, rest


@dataclass
class FileTail:
    """A log file followed tick by tick. Anyone may be able to replace the file (a log in
    a user's folder), so every (re)open is ``O_NOFOLLOW|O_NONBLOCK`` and the descriptor
    must be a regular file: a link swapped in for the log (to ``/etc/shadow``, a FIFO)
    is never opened, and the refusal is kept in ``error`` and logged once (issue 28;
    DESIGN.md, security stance). A reopen also checks that the descriptor is the inode
    the path named when the rotation was seen."""

    path: Path
    parser: KernelLogParser = field(init=False)  # set in __post_init__
    error: str | None = None  # why the file is not followed now; None while it is
    skipped_bytes: int = 0  # skipped unread past MAX_BACKLOG_BYTES (a flood)
    _fd: int | None = None
    _ino: int | None = None
    _buf: bytes = b""

    def __post_init__(self) -> None:
        self.parser = KernelLogParser(source=str(self.path))

    def _refuse(self, why: str) -> bool:
        if why != self.error:
            log.warning("not following %s: %s", self.path, why)
        self.error = why
        return False

    def _open(self, at_end: bool, expect_ino: int | None = None) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return self._refuse("it is a symbolic link; not followed")
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (expect_ino is not None and st.st_ino != expect_ino):
            os.close(fd)
            what = "not a regular file" if not stat.S_ISREG(st.st_mode) else "replaced while opened"
            return self._refuse(f"it is {what}; not read")
        self._fd, self._ino, self._buf, self.error = fd, st.st_ino, b"", None
        if at_end:
            os.lseek(fd, 0, os.SEEK_END)
        return True

    def read(self, max_lines: int = MAX_LINES_PER_TICK) -> list[KernelEvent]:
        """The complete lines written since the last call, at most ``max_lines`` and
        ``MAX_BYTES_PER_TICK``; the rest is read by the next calls."""
        if self._fd is None and not self._open(at_end=self._ino is None):
            return []
        assert self._fd is not None
        try:
            st = os.lstat(self.path)  # a link in the log's place is a change, never followed
        except FileNotFoundError:
            return []
        if st.st_ino != self._ino or st.st_size < os.lseek(self._fd, 0, os.SEEK_CUR):
            self.close()  # rotated or truncated: the new file is read from its start
            if not self._open(at_end=False, expect_ino=st.st_ino):
                return []
        assert self._fd is not None
        self._skip_backlog(st.st_size)
        data = os.read(self._fd, MAX_BYTES_PER_TICK)
        if not data:
            return []
        lines, rest = take_lines(self._buf + data, max_lines)
        if len(lines) == max_lines and rest:  # past the budget: read again next time
            os.lseek(self._fd, -len(rest), os.SEEK_CUR)
            rest = b""
        self._buf = rest[-MAX_PARTIAL_LINE_BYTES:]  # an unfinished line waits for the next tick
        events: list[KernelEvent] = []
        for line in lines:
            events += self.parser.feed(line.decode("utf-8", "replace"))
        return events

    def _skip_backlog(self, size_bytes: int) -> None:
        """Jump to the end of a file more than ``MAX_BACKLOG_BYTES`` ahead of us."""
        assert self._fd is not None
        behind = size_bytes - os.lseek(self._fd, 0, os.SEEK_CUR)
        if behind <= MAX_BACKLOG_BYTES:
            return
        os.lseek(self._fd, 0, os.SEEK_END)
        if not self.skipped_bytes:
            log.warning(
                "%s: %d bytes behind (a flood); skipped to its end unread "
                "(later skips are counted, not logged)",
                self.path,
                behind,
            )
        self.skipped_bytes += behind
        self._buf = b""

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class JournalTail:
    """``journalctl -u UNIT -f -o json -n 0``, read without blocking."""

    unit: str
    journalctl: str = "journalctl"
    parser: KernelLogParser = field(init=False)  # set in __post_init__
    _proc: subprocess.Popen[bytes] | None = None
    _buf: bytes = b""
    error: str | None = None

    def __post_init__(self) -> None:
        self.parser = KernelLogParser(source=f"journal:{self.unit}")

    def start(self) -> bool:
        try:
            self._proc = subprocess.Popen(
                [self.journalctl, "-u", self.unit, "-f", "-o", "json", "-n", "0", "--no-pager"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            self.error = f"cannot run {self.journalctl}: {exc.strerror}"
            return False
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        return True

    def read(self, max_lines: int = MAX_LINES_PER_TICK) -> list[KernelEvent]:
        """At most ``max_lines`` records; the rest wait in our buffer (at most
        ``MAX_BYTES_PER_TICK``: past that the pipe, then journalctl, wait for us)."""
        if self._proc is None or self._proc.stdout is None:
            return []
        data = b""
        if len(self._buf) < MAX_BYTES_PER_TICK:
            with contextlib.suppress(BlockingIOError):
                data = os.read(self._proc.stdout.fileno(), MAX_BYTES_PER_TICK - len(self._buf))
        lines, rest = take_lines(self._buf + data, max_lines)
        self._buf = rest if b"\n" in rest else rest[-MAX_PARTIAL_LINE_BYTES:]
        events: list[KernelEvent] = []
        for line in lines:
            found = parse_journal_json(line.decode("utf-8", "replace"), self.parser)
            if isinstance(found, list):
                events += found
            elif found is not None:
                events.append(found)
        return events

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


class SwapLogTail:
    """llama-swap's upstream log stream, ``GET {url}/logs/stream/upstream?no-history``.

    llama-swap keeps its models' stdout/stderr in its upstream ``LogMonitor`` and discards it
    by default (``logToStdout: proxy``), so this stream is often the only place a model's
    ``cudaMalloc failed: out of memory`` can be read (``proxy/proxymanager_loghandlers.go``:
    chunked ``text/plain``, ``no-history`` skips what was logged before we connected).
    A thread holds the connection (loopback only, no proxy, via ``http.client``) and queues
    complete lines, at most ``max_lines`` (the oldest are dropped and counted); ``read()``
    drains them through the parser without blocking. A refused or closed connection is
    retried every ``retry_s``: llama-swap restarts; a model's lines logged meanwhile are
    not seen.
    """

    def __init__(
        self,
        base_url: str,
        *,
        retry_s: float = 10.0,
        max_lines: int = 10_000,
        connect_timeout_s: float = 2.0,
    ) -> None:
        from monitor.integrations.loopback import loopback_url

        parts = loopback_url(base_url, "llama-swap URL")  # UsageError unless loopback
        self.base_url = base_url
        self._host, self._port = parts.host, parts.port
        self._https = parts.scheme == "https"
        self._path = parts.path + "/logs/stream/upstream?no-history"
        self.retry_s, self.connect_timeout_s = retry_s, connect_timeout_s
        self.parser = KernelLogParser(source=base_url)
        self.error: str | None = None
        self.connected = False
        self.dropped = 0
        self._max_lines = max_lines
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name="llama-swap-logs", daemon=True)

    def start(self) -> bool:
        self._thread.start()
        return True

    def _connect(self) -> http.client.HTTPResponse:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.connect_timeout_s)
        self._conn = conn
        conn.request("GET", self._path, headers={"Accept": "text/plain"})
        response = conn.getresponse()
        if response.status != 200:
            raise OSError(f"HTTP {response.status} {response.reason} from {self._path}")
        assert conn.sock is not None
        conn.sock.settimeout(None)  # a quiet stream is normal; close() unblocks the read
        return response

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                response = self._connect()
                if self.error is not None:
                    log.info("llama-swap log stream followed again (%s)", self.base_url)
                self.connected, self.error = True, None
                pending = b""
                while not self._stop.is_set():
                    chunk = response.read1(65536)
                    if not chunk:
                        break  # llama-swap closed the stream (shutdown, restart)
                    lines = (pending + chunk).split(b"\n")
                    pending = lines.pop()[-65536:]
                    with self._lock:
                        room = self._max_lines - len(self._lines)
                        self.dropped += max(0, len(lines) - room)
                        self._lines.extend(x.decode("utf-8", "replace") for x in lines)
                self.error = "the stream ended"
            except (OSError, http.client.HTTPException) as exc:
                if not self._stop.is_set():
                    message = f"{self.base_url}: {exc}"
                    if message != self.error:  # once per change, not every retry
                        log.warning(
                            "llama-swap log stream: %s (retrying every %g s)", message, self.retry_s
                        )
                    self.error = message
            finally:
                self.connected = False
                if self._conn is not None:
                    self._conn.close()
            self._stop.wait(self.retry_s)

    def read(self, max_lines: int = MAX_LINES_PER_TICK) -> list[KernelEvent]:
        with self._lock:
            lines = [self._lines.popleft() for _ in range(min(max_lines, len(self._lines)))]
        events: list[KernelEvent] = []
        for line in lines:
            events += self.parser.feed(line)
        return events

    def close(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked read
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def open_tails(
    files: list[str],
    units: list[str],
    swap_url: str | None = None,
) -> list[FileTail | JournalTail | SwapLogTail]:
    tails: list[FileTail | JournalTail | SwapLogTail] = [FileTail(Path(f)) for f in files]
    for unit in units:
        tail = JournalTail(unit)
        if tail.start():
            tails.append(tail)
        else:
            log.warning("journal unit %s not followed: %s", unit, tail.error)
    if swap_url:
        try:
            swap = SwapLogTail(swap_url)
        except UsageError as exc:
            log.warning("llama-swap log stream not followed: %s", exc)
        else:
            swap.start()
            tails.append(swap)
    return tails
