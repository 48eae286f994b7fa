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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from collectors.base import DeviceEvent, DeviceSample, EventValue, Severity
from monitor.logs.kernel import KernelLogParser
from monitor.logs.kernel_patterns import parse_kmsg_record
from monitor.logs.kernel_records import KernelEvent

log = logging.getLogger(__name__)
MAX_RECORDS_PER_TICK = 2000
SEVERITY: dict[str, Severity] = {
    "oom_kill": "critical",
    "oomd_kill": "critical",
    "xid": "critical",
    "amdgpu_error": "warning",
    "oom_invoked": "warning",
    "app_oom": "critical",
    "engine_oom": "critical",
}


def boot_offset_ms() -> float:
    """epoch ms = kernel ms since boot + this."""
    return (
        time.clock_gettime(time.CLOCK_REALTIME) * 1000
        - time.clock_gettime(time.CLOCK_MONOTONIC) * 1000
    )


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
                events += self.parser.feed(
                    record.message, record.ts_usec, kernel=True, clock="monotonic"
                )
        return events


def device_for_pci(pci: str, devices: Iterable[DeviceSample]) -> str | None:
    """The sampled device at a kernel message's PCI address, by its normalised bus id.

    NVRM's Xid lines give ``domain:bus:device`` without the function (``PCI:0000:01:00``,
    ``nv_report_error``); amdgpu's give ``domain:bus:device.function``. Collectors store
    ``0000:01:00.0`` (lower case, 4-digit domain: nvml.py, drm.py).
    """
    want = pci.strip().lower()
    if want.count(":") == 1:
        want = "0000:" + want  # an address printed without its domain
    for dev in devices:
        bus = (dev.pci_bus_id or "").lower()
        if bus and (bus == want or ("." not in want and bus.rsplit(".", 1)[0] == want)):
            return dev.device_id
    return None


def to_device_events(
    events: list[KernelEvent], now_ms: int, devices: Iterable[DeviceSample] = ()
) -> list[DeviceEvent]:
    """Kernel events as stored events; kernel timestamps become epoch ms. A GPU driver's
    event is filed under the device id its collector uses (``nvml:GPU-…``, ``drm:…``) when
    that device is sampled, else under its PCI address. amdgpu messages that name no
    address (``[drm:amdgpu_job_timedout] ring ... timeout``) go to the only AMD GPU when
    there is one, else to ``host``."""
    offset = boot_offset_ms()
    devices = tuple(devices)
    out = []
    for e in events:
        ts = now_ms
        if e.ts_usec is not None and e.data.get("clock") != "realtime":
            ts = int(e.ts_usec / 1000 + offset)
        elif e.ts_usec is not None:
            ts = e.ts_usec // 1000
        data: dict[str, EventValue] = {
            k: v for k, v in e.data.items() if isinstance(v, int | str | float) or v is None
        }
        data["pid"] = e.pid
        data["comm"] = e.comm
        pci = e.data.get("pci")
        device = str(e.data.get("device") or pci or "host")
        if isinstance(pci, str) and not e.data.get("device"):
            device = device_for_pci(pci, devices) or device
        elif e.kind == "amdgpu_error" and device == "host":
            amd = [d.device_id for d in devices if d.vendor == "amd" and d.pci_bus_id]
            device = amd[0] if len(amd) == 1 else device
        out.append(
            DeviceEvent(ts, device, e.kind, SEVERITY.get(e.kind, "warning"), e.message, data)
        )
    return out
