"""Engine logs the daemon can reach: files it tails and journald units it follows.

Configured in ``[logs]``: ``files`` (a llama-server ``--log-file``, llama-swap's log) and
``journal_units`` (``llama-server@x.service``, ``ollama.service``, ``systemd-oomd.service``).
Each tick drains what arrived, without blocking: lines go through the kernel-log parser,
which recognises engine out-of-memory lines (``cudaMalloc failed: out of memory``,
``failed to allocate ... buffer``, PyTorch's ``CUDA out of memory. Tried to allocate``) and
systemd-oomd kills. A rotated or truncated file is reopened from its start.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from monitor.kernlog import KernelEvent, KernelLogParser, parse_journal_json

log = logging.getLogger(__name__)
MAX_BYTES_PER_TICK = 1 << 20


@dataclass
class FileTail:
    path: Path
    parser: KernelLogParser = field(default_factory=KernelLogParser)
    _fd: int | None = None
    _ino: int | None = None
    _buf: bytes = b""

    def _open(self, at_end: bool) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        self._fd, self._ino, self._buf = fd, os.fstat(fd).st_ino, b""
        if at_end:
            os.lseek(fd, 0, os.SEEK_END)
        return True

    def read(self) -> list[KernelEvent]:
        if self._fd is None and not self._open(at_end=self._ino is None):
            return []
        assert self._fd is not None
        try:
            st = os.stat(self.path)
            if st.st_ino != self._ino or st.st_size < os.lseek(self._fd, 0, os.SEEK_CUR):
                self.close()  # rotated or truncated: the new file is read from its start
                if not self._open(at_end=False):
                    return []
        except FileNotFoundError:
            return []
        assert self._fd is not None
        data = os.read(self._fd, MAX_BYTES_PER_TICK)
        if not data:
            return []
        lines = (self._buf + data).split(b"\n")
        self._buf = lines.pop()[-65536:]  # an unfinished line waits for the next tick
        events: list[KernelEvent] = []
        for line in lines:
            events += self.parser.feed(line.decode("utf-8", "replace"))
        return events

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class JournalTail:
    """``journalctl -u UNIT -f -o json -n 0``, read without blocking."""

    unit: str
    journalctl: str = "journalctl"
    parser: KernelLogParser = field(default_factory=KernelLogParser)
    _proc: subprocess.Popen[bytes] | None = None
    _buf: bytes = b""
    error: str | None = None

    def start(self) -> bool:
        try:
            self._proc = subprocess.Popen(
                [self.journalctl, "-u", self.unit, "-f", "-o", "json", "-n", "0",
                 "--no-pager"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.error = f"cannot run {self.journalctl}: {exc.strerror}"
            return False
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        return True

    def read(self) -> list[KernelEvent]:
        if self._proc is None or self._proc.stdout is None:
            return []
        try:
            data = os.read(self._proc.stdout.fileno(), MAX_BYTES_PER_TICK)
        except BlockingIOError:
            return []
        lines = (self._buf + data).split(b"\n")
        self._buf = lines.pop()[-65536:]
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


def open_tails(files: list[str], units: list[str]) -> list[FileTail | JournalTail]:
    tails: list[FileTail | JournalTail] = [FileTail(Path(f)) for f in files]
    for unit in units:
        tail = JournalTail(unit)
        if tail.start():
            tails.append(tail)
        else:
            log.warning("journal unit %s not followed: %s", unit, tail.error)
    return tails
