"""Deliver :class:`AlertChange` notices: apprise URLs and a command hook, off the tick.

:meth:`Notifier.submit` only appends to a bounded in-memory queue (the oldest notice is
dropped, and counted, when it is full) and returns. ONE daemon worker thread serves it:
for each notice it applies the cooldown (the same alert key is not re-sent within
``cooldown_s`` unless its level rose; a resolve notice goes out once for every fired
notice that went out), then tries every channel once. A channel that fails is retried
later with exponential backoff (``backoff_s * 2**n``, ``retries`` times) from a schedule
the same worker keeps, so a dead channel costs the others at most one attempt's timeout
at a time and never sleeps in their way.

The command hook runs ``sh -c COMMAND`` in its own session with the notice as JSON on
stdin (and ``VRAMSCOPE_ALERT_*`` variables); a non-zero exit or a timeout is a failure
(on timeout its whole process group is killed).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from monitor.alerts.rules import LEVEL_RANK, Alert, AlertChange

log = logging.getLogger(__name__)

QUEUE_MAX = 256  # notices waiting for the worker; the oldest is dropped past this
RETRY_MAX = 512  # scheduled retries kept; past this a retry is given up (counted failed)
ERROR_MAX = 300  # characters of an error text kept


@dataclass
class NotifierStats:
    sent: int = 0  # channel deliveries that succeeded (a notice to 2 channels counts 2)
    failed: int = 0  # channel deliveries given up after every retry
    suppressed: int = 0  # notices not sent: cooldown / duplicate / resolve of an unsent one
    dropped: int = 0  # notices lost to a full queue or to close()
    retried: int = 0  # retry attempts made


def title_of(change: AlertChange) -> str:
    alert = change.alert
    state = "resolved" if change.kind == "resolved" else alert.level
    return f"[vramscope] {state}: {alert.label} ({alert.subject})"


def body_of(change: AlertChange) -> str:
    if change.kind == "resolved":
        return f"resolved: {change.alert.message}"
    return change.alert.message


def payload_of(change: AlertChange) -> dict[str, Any]:
    """The JSON the command hook reads on stdin."""
    alert = change.alert
    return {
        "kind": change.kind,
        "ts_ms": change.ts_ms,
        "key": alert.key,
        "rule": alert.rule,
        "level": alert.level,
        "subject": alert.subject,
        "title": title_of(change),
        "message": alert.message,
        "body": body_of(change),
        "data": alert.data,
    }


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 1] + "…"


class _AppriseChannel:
    def __init__(self, url: str, timeout_s: float) -> None:
        import apprise  # only when a URL is configured

        self._apprise = apprise
        try:  # no persistent-storage files (apprise >= 1.9); older ones have none anyway
            asset = apprise.AppriseAsset(storage_mode="memory")
        except (AttributeError, TypeError, ValueError):
            asset = apprise.AppriseAsset()
        self._obj = apprise.Apprise(asset=asset)
        self.error: str | None = None
        scheme = url.split("://", 1)[0] if "://" in url else "?"
        self.name = f"{scheme}://…"  # never the whole URL: it may hold a token
        try:
            added = self._obj.add(url)
        except Exception as exc:  # apprise says False for bad URLs; be safe anyway
            added, self.error = False, f"invalid apprise URL: {exc}"
        if not added:
            self.error = self.error or "invalid or unsupported apprise URL"
            return
        plugin = self._obj[0]
        plugin.socket_connect_timeout = timeout_s
        plugin.socket_read_timeout = timeout_s
        with contextlib.suppress(Exception):  # the name is cosmetic
            self.name = str(plugin.url(privacy=True)).split("?", 1)[0]

    def send(self, change: AlertChange) -> str | None:
        if self.error:
            return self.error
        apprise = self._apprise
        if change.kind == "resolved":
            kind = apprise.NotifyType.SUCCESS
        elif change.alert.level == "critical":
            kind = apprise.NotifyType.FAILURE
        else:
            kind = apprise.NotifyType.WARNING
        with apprise.LogCapture(level=logging.WARNING) as logs:
            try:
                ok = self._obj.notify(
                    title=title_of(change), body=body_of(change), notify_type=kind
                )
            except Exception as exc:  # a plugin bug must not kill the worker
                return _short(f"{type(exc).__name__}: {exc}")
            text = logs.getvalue().strip()
        if ok:
            return None
        lines = [line.split(" - ", 2)[-1] for line in text.splitlines() if line.strip()]
        return _short(lines[-1] if lines else "apprise reported a failure")


class _CommandChannel:
    name = "command"
    error: str | None = None

    def __init__(self, command: str, timeout_s: float) -> None:
        self.command = command
        self.timeout_s = timeout_s

    def send(self, change: AlertChange) -> str | None:
        payload = json.dumps(payload_of(change), default=str).encode()
        alert = change.alert
        env = {
            **os.environ,
            "VRAMSCOPE_ALERT_KIND": change.kind,
            "VRAMSCOPE_ALERT_LEVEL": alert.level,
            "VRAMSCOPE_ALERT_KEY": alert.key,
            "VRAMSCOPE_ALERT_RULE": alert.rule,
            "VRAMSCOPE_ALERT_SUBJECT": alert.subject,
            "VRAMSCOPE_ALERT_TITLE": title_of(change),
            "VRAMSCOPE_ALERT_MESSAGE": body_of(change),
        }
        try:
            proc = subprocess.Popen(
                ["sh", "-c", self.command],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=env,
                close_fds=True,
            )
        except OSError as exc:
            return _short(f"cannot run the command hook: {exc}")
        try:
            _, err = proc.communicate(payload, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            try:
                proc.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:  # a grandchild in another session holds a pipe
                for pipe in (proc.stdin, proc.stderr):
                    if pipe is not None:
                        pipe.close()
                proc.wait(timeout=1.0)
            return f"the command hook timed out after {self.timeout_s:g} s"
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()
            why = f": {tail[-1]}" if tail else ""
            return _short(f"the command hook exited with status {proc.returncode}{why}")
        return None


@dataclass(order=True)
class _Retry:
    due: float
    seq: int
    channel: int
    change: AlertChange
    attempt: int  # retries made so far


class Notifier:
    """Sends alert changes to apprise URLs and a command hook without blocking the caller.

    ``submit`` returns at once; ``send_test`` is synchronous (``vramscope alerts test``);
    ``flush`` waits until the queue is served (not the scheduled retries); ``close`` stops
    the worker. ``stats`` counts sent / failed / suppressed / dropped / retried.
    """

    def __init__(
        self,
        urls: list[str],
        command: str | None = None,
        cooldown_s: float = 600,
        retries: int = 4,
        backoff_s: float = 2.0,
        timeout_s: float = 10.0,
        queue_size: int = QUEUE_MAX,
    ) -> None:
        self.cooldown_s = cooldown_s
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.stats = NotifierStats()
        self.channels: list[_AppriseChannel | _CommandChannel] = [
            _AppriseChannel(url, timeout_s) for url in urls if url.strip()
        ]
        if command and command.strip():
            self.channels.append(_CommandChannel(command, timeout_s))
        for ch in self.channels:
            if ch.error:
                log.error("alert channel %s: %s", ch.name, ch.error)
        self._queue: deque[AlertChange] = deque()
        self._queue_size = max(1, queue_size)
        self._cond = threading.Condition()
        self._busy = False
        self._closing = False
        self._deadline = 0.0
        # worker-only state
        self._retries: list[_Retry] = []
        self._seq = itertools.count()
        self._last: dict[str, tuple[float, int]] = {}  # key -> (monotonic sent, level rank)
        self._open: set[str] = set()  # keys whose fired notice went out, no resolve yet
        self._thread = threading.Thread(target=self._run, name="vramscope-alerts", daemon=True)
        self._thread.start()

    # -- caller side ----------------------------------------------------------------------

    def submit(self, change: AlertChange) -> None:
        """Queue one change; never blocks, never raises."""
        with self._cond:
            if self._closing:
                self.stats.dropped += 1
                return
            if len(self._queue) >= self._queue_size:
                lost = self._queue.popleft()
                self.stats.dropped += 1
                log.warning(
                    "alert queue full: dropped the %s notice of %s", lost.kind, lost.alert.key
                )
            self._queue.append(change)
            self._cond.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued notice had its first attempt; False on timeout."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = end - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Serve what is queued (first attempts only) for up to ``timeout``, then stop;
        scheduled retries are given up."""
        with self._cond:
            if not self._closing:
                self._closing = True
                self._deadline = time.monotonic() + timeout
            self._cond.notify_all()
        self._thread.join(timeout)

    def send_test(self) -> dict[str, str]:
        """Send a test notice to every channel now, once each: name -> "ok" | error."""
        alert = Alert(
            "test",
            "test",
            "warning",
            socket.gethostname(),
            f"test notification from vramscope on {socket.gethostname()}",
        )
        change = AlertChange("fired", alert, time.time_ns() // 1_000_000)
        results: dict[str, str] = {}
        for ch in self.channels:
            name, n = ch.name, 2
            while name in results:
                name, n = f"{ch.name} #{n}", n + 1
            error = ch.send(change)
            results[name] = "ok" if error is None else error
        return results

    # -- worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        change: AlertChange | None
        retry: _Retry | None
        while True:
            with self._cond:
                while True:
                    if self._closing and (not self._queue or time.monotonic() >= self._deadline):
                        self.stats.dropped += len(self._queue)
                        self._queue.clear()
                        self._cond.notify_all()
                        return
                    if self._queue:
                        change, retry = self._queue.popleft(), None
                        break
                    now = time.monotonic()
                    if self._retries and self._retries[0].due <= now:
                        change, retry = None, heapq.heappop(self._retries)
                        break
                    wait = self._retries[0].due - now if self._retries else None
                    self._cond.wait(wait)
                self._busy = True
            try:
                if change is not None:
                    self._deliver(change)
                elif retry is not None:
                    self._attempt(retry.channel, retry.change, retry.attempt)
            except Exception:  # the worker must outlive any bug
                log.exception("alert delivery failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _admit(self, change: AlertChange) -> bool:
        """Cooldown and de-duplication; True when the notice should go out."""
        key, now = change.alert.key, time.monotonic()
        if change.kind == "resolved":
            if key in self._open:
                self._open.discard(key)
                return True
            return False
        rank = LEVEL_RANK.get(change.alert.level, 0)
        last = self._last.get(key)
        if last is not None and now - last[0] < self.cooldown_s and rank <= last[1]:
            return False
        self._last[key] = (now, rank)
        self._open.add(key)
        if len(self._last) > 4096:  # keys of events are unique: forget the expired ones
            self._last = {
                k: v
                for k, v in self._last.items()
                if now - v[0] < self.cooldown_s or k in self._open
            }
        return True

    def _deliver(self, change: AlertChange) -> None:
        if not self._admit(change):
            self.stats.suppressed += 1
            log.debug("alert %s %s suppressed (cooldown)", change.alert.key, change.kind)
            return
        for index in range(len(self.channels)):
            self._attempt(index, change, 0)

    def _attempt(self, index: int, change: AlertChange, attempt: int) -> None:
        ch = self.channels[index]
        if attempt:
            self.stats.retried += 1
        error = ch.send(change)
        if error is None:
            self.stats.sent += 1
            return
        retry = attempt < self.retries and ch.error is None and not self._closing
        if retry and len(self._retries) < RETRY_MAX:
            delay = self.backoff_s * 2**attempt
            heapq.heappush(
                self._retries,
                _Retry(time.monotonic() + delay, next(self._seq), index, change, attempt + 1),
            )
            log.info(
                "alert to %s failed (%s); retry %d in %.0f s", ch.name, error, attempt + 1, delay
            )
            return
        self.stats.failed += 1
        log.warning(
            "alert %s to %s failed after %d attempt(s): %s",
            change.alert.key,
            ch.name,
            attempt + 1,
            error,
        )
