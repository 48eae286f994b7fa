"""The sd_notify protocol, without libsystemd: one datagram per message to $NOTIFY_SOCKET.

``READY=1`` once the first tick is written, ``WATCHDOG=1`` from the sampling tick itself
(at most every third of ``$WATCHDOG_USEC``, so a stuck sampler gets the service
restarted), ``STOPPING=1`` on SIGTERM, ``RELOADING=1``/``READY=1`` around a SIGHUP reload,
and ``STATUS=`` lines for ``systemctl status``. Outside systemd every call is a no-op.
"""

from __future__ import annotations

import os
import socket
import time


class SdNotifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.address = env.get("NOTIFY_SOCKET") or None
        usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and int(usec) > 0 else None
        self._last_ping = 0.0

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        if self.address is None:
            return False
        target = self.address
        if target.startswith("@"):
            target = "\0" + target[1:]  # abstract namespace
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.sendto("\n".join(lines).encode(), target)
        except OSError:
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def watchdog(self, now: float | None = None) -> bool:
        """Ping if a third of the watchdog period has passed since the last ping."""
        if self.watchdog_s is None:
            return False
        now = time.monotonic() if now is None else now
        if now - self._last_ping < self.watchdog_s / 3:
            return False
        self._last_ping = now
        return self.send("WATCHDOG=1")
