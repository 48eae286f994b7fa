"""Follow the kernel log (``/dev/kmsg``) from the daemon's start, without blocking a tick.

``/dev/kmsg`` gives one record per ``read()``; opened non-blocking and positioned at the end
(``SEEK_END``), each tick drains what arrived since the last one. ``EPIPE`` means records
were overwritten before we read them (counted, not fatal). Record timestamps are the
kernel's clock since boot (``local_clock``); they are turned into epoch milliseconds with
the offset between ``CLOCK_REALTIME`` and ``CLOCK_MONOTONIC`` (sources.md section 5.2).
Reading needs root or ``CAP_SYSLOG`` where ``kernel.dmesg_restrict=1``; without it the
follower is off and ``vramscope doctor`` says so.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from collectors.base import DeviceEvent
from monitor.kernlog import KernelEvent, KernelLogParser, parse_kmsg_record

log = logging.getLogger(__name__)
MAX_RECORDS_PER_TICK = 2000
SEVERITY = {"oom_kill": "critical", "oomd_kill": "critical", "xid": "critical",
            "amdgpu_error": "warning", "oom_invoked": "warning", "app_oom": "critical"}


def boot_offset_ms() -> float:
    """epoch ms = kernel ms since boot + this."""
    return time.clock_gettime(time.CLOCK_REALTIME) * 1000 - time.clock_gettime(
        time.CLOCK_MONOTONIC) * 1000


@dataclass
class KmsgFollower:
    path: Path = Path("/dev/kmsg")
    parser: KernelLogParser = field(default_factory=KernelLogParser)
    lost: int = 0
    error: str | None = None
    _fd: int | None = None

    def open(self) -> bool:
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:
            self.error = f"cannot read {self.path}: {exc.strerror}"
            self._fd = None
            return False
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def read(self) -> list[KernelEvent]:
        """Everything the kernel logged since the last call, parsed into events."""
        if self._fd is None:
            return []
        events: list[KernelEvent] = []
        for _ in range(MAX_RECORDS_PER_TICK):
            try:
                raw = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.lost += 1
                    continue
                self.error = f"reading {self.path}: {exc.strerror}"
                log.error("kernel log: %s", self.error)
                self.close()
                break
            if not raw:
                break
            record = parse_kmsg_record(raw.decode("utf-8", "replace"))
            if record is not None:
                events += self.parser.feed(record.message, record.ts_usec, kernel=True,
                                           clock="monotonic")
        return events


def to_device_events(events: list[KernelEvent], now_ms: int) -> list[DeviceEvent]:
    """Kernel events as stored events; kernel timestamps become epoch ms."""
    offset = boot_offset_ms()
    out = []
    for e in events:
        ts = now_ms
        if e.ts_usec is not None and e.data.get("clock") != "realtime":
            ts = int(e.ts_usec / 1000 + offset)
        elif e.ts_usec is not None:
            ts = e.ts_usec // 1000
        data = {k: v for k, v in e.data.items() if isinstance(v, int | str | float) or v is None}
        data["pid"] = e.pid
        data["comm"] = e.comm
        device = str(e.data.get("device") or e.data.get("pci") or "host")
        out.append(DeviceEvent(ts, device, e.kind, SEVERITY.get(e.kind, "warning"), e.message,
                               data))  # type: ignore[arg-type]
    return out
