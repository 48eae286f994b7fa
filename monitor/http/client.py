"""A client of a vramscope daemon's HTTP API (``tui --remote URL``), and the checks that
its answers have the shapes the daemon serves: they are untrusted, so each is at most
``REMOTE_MAX_BYTES`` and must look like ``vramscope.status/1`` (docs/status.schema.json)
or an events page before anything is drawn from it. No proxies are used; a token is sent
as a bearer token."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from monitor.errors import VramscopeError

REMOTE_MAX_BYTES = 16 << 20
"""The most a daemon's answer may be: a snapshot of a box with 10,000 tracked processes is
about 10 MiB; anything larger is not a vramscope daemon (and is not read into memory)."""
REMOTE_MAX_EVENTS = 1000  # the daemon's own page size (monitor/http/server.py)
CONNECT_TIMEOUT_S = 3.0
"""To connect to a daemon (a LAN or loopback: a connect takes milliseconds; a box that is
down or firewalled should not cost the whole request deadline)."""
READ_CHUNK_BYTES = 65536


class RemoteError(VramscopeError):
    """The daemon cannot be read, or did not answer like a vramscope daemon."""


class DaemonClient:
    """``GET`` JSON from the daemon at ``url`` (http or https only).

    Every request has two deadlines: ``connect_timeout_s`` to connect, and ``timeout_s``
    for the whole exchange (connect, request, head and body). Socket timeouts alone are
    per operation, so a server sending 1 byte every 4 s would keep a 5 s read going
    forever: the answer is read in chunks against a monotonic deadline, and a watchdog
    cuts the socket at the deadline whatever the read is waiting on (issue 28 item 10)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout_s: float = 5.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
            raise RemoteError(
                f"--remote {url}: expected http://HOST:PORT, e.g. http://gpu-box:9835"
            )
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.connect_timeout_s = min(connect_timeout_s, timeout_s)
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, port
        self._prefix = parts.path.rstrip("/")

    def get(self, path: str) -> Any:
        """The JSON answer to ``GET path``, at most ``REMOTE_MAX_BYTES``; RemoteError says
        what went wrong in one line."""
        return self._request(path)

    def post(self, path: str, doc: Any) -> tuple[int, Any]:
        """``POST path`` with a JSON body: (HTTP status, JSON answer). A 400 is an answer
        (the daemon's one-line ``error``), not a failure; other errors raise RemoteError."""
        return self._request(path, json.dumps(doc).encode(), accept_codes=(400,))

    def status_doc(self) -> Any:
        """The daemon's ``/api/v1/snapshot``, shape-checked as ``vramscope.status/1``
        (:func:`status_doc_problem`); RemoteError when it is not one."""
        doc = self.get("/api/v1/snapshot")
        problem = status_doc_problem(doc)
        if problem is not None:
            raise RemoteError(f"{self.url}/api/v1/snapshot: not a vramscope snapshot: {problem}")
        return doc

    def _request(
        self, path: str, body: bytes | None = None, accept_codes: tuple[int, ...] = ()
    ) -> Any:
        headers = {"Accept": "application/json", "Connection": "close"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        status, answer = self._exchange("GET" if body is None else "POST", path, body, headers)
        if not 200 <= status < 300 and status not in accept_codes:
            hint = ""
            if status == 401:  # the words monitor/analysis/fleet.py's short_reason reads
                hint = " (wrong token)" if self.token else " (give --token)"
            raise RemoteError(f"{self.url}{path}: HTTP {status}{hint}")
        try:
            doc = json.loads(answer)
        except (ValueError, RecursionError) as exc:
            raise RemoteError(
                f"{self.url}{path}: not JSON ({str(exc)[:80]}); not a vramscope daemon?"
            ) from None
        return (status, doc) if body is not None else doc

    def _connection(self) -> http.client.HTTPConnection:
        """A connection to the daemon (no proxies; https verifies the certificate)."""
        if self._scheme == "https":
            return http.client.HTTPSConnection(
                self._host,
                self._port,
                timeout=self.connect_timeout_s,
                context=ssl.create_default_context(),
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self.connect_timeout_s)

    def _exchange(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """(HTTP status, body of at most REMOTE_MAX_BYTES), all within ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        conn = self._connection()
        watchdog = threading.Timer(self.timeout_s, _cut, (conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.request(method, self._prefix + path, body, headers)
            _settimeout(conn, deadline)
            response = conn.getresponse()
            return response.status, _read_bounded(response, conn, deadline, self.url + path)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if time.monotonic() >= deadline - 0.05 or isinstance(exc, TimeoutError):
                raise RemoteError(
                    f"{self.url}{path}: timed out: no complete answer within "
                    f"{self.timeout_s:g} s (connect: {self.connect_timeout_s:g} s)"
                ) from None
            raise RemoteError(f"cannot reach the vramscope daemon at {self.url}: {exc}") from None
        finally:
            watchdog.cancel()
            conn.close()


def _settimeout(conn: http.client.HTTPConnection, deadline: float) -> None:
    """Each read may wait at most what is left of the deadline (and the watchdog cuts
    a read that trickles past it)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("deadline")
    if conn.sock is not None:
        conn.sock.settimeout(remaining)


def _cut(conn: http.client.HTTPConnection) -> None:
    """The deadline passed: shut the socket down, so that a blocked read returns now (the
    plain socket's shutdown: an SSL socket's would drop its state under the reader)."""
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _read_bounded(
    response: http.client.HTTPResponse,
    conn: http.client.HTTPConnection,
    deadline: float,
    where: str,
) -> bytes:
    """The body in chunks, each read against the deadline; more than REMOTE_MAX_BYTES
    is refused without reading it all."""
    length = response.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > REMOTE_MAX_BYTES:
        raise RemoteError(_too_large(where))
    chunks: list[bytes] = []
    total = 0
    while True:
        _settimeout(conn, deadline)
        chunk = response.read1(READ_CHUNK_BYTES)
        if not chunk:
            if time.monotonic() >= deadline:
                raise TimeoutError("deadline")
            return b"".join(chunks)
        total += len(chunk)
        if total > REMOTE_MAX_BYTES:
            raise RemoteError(_too_large(where))
        chunks.append(chunk)


def _too_large(where: str) -> str:
    return (
        f"{where}: the answer is larger than {REMOTE_MAX_BYTES >> 20} MiB; not a vramscope daemon?"
    )


def _value_problem(value: Any, kind: str) -> str | None:
    """Does a JSON value fit a dataclass field's annotation (as written in collectors/base)?"""
    optional = kind.endswith(" | None")
    kind = kind.removesuffix(" | None")
    if value is None:
        return None if optional else "missing"
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63
    elif kind == "float":
        ok = (
            isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 2**63
        )  # json gives inf for 1e999: refused here
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "str":
        ok = isinstance(value, str) and len(value) <= 4096
    elif kind == "MemoryKind":
        ok = value in ("dedicated", "unified", "host")
    elif kind == "tuple[str, ...]":
        ok = (
            isinstance(value, list)
            and len(value) <= 4096
            and all(isinstance(v, str) and len(v) <= 65536 for v in value)
        )
    else:
        ok = True
    return None if ok else f"{type(value).__name__} {str(value)[:40]!r}"


def _record_problem(cls: type, record: Any, where: str, skip: tuple[str, ...] = ()) -> str | None:
    import dataclasses

    if not isinstance(record, dict):
        return f"{where} is a {type(record).__name__}, not an object"
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name not in record:
            if required:
                return f"{where} has no {f.name!r}"
            continue
        bad = _value_problem(record[f.name], str(f.type))
        if bad is not None:
            return f"{where}.{f.name} is {bad}"
        if f.name.endswith("_bytes") and record[f.name] is not None and record[f.name] < 0:
            return f"{where}.{f.name} is negative"
    return None


def status_doc_problem(doc: Any) -> str | None:
    """Why ``doc`` is not a ``vramscope.status/1`` document we can draw, or None."""
    from collectors.base import DeviceSample, ProcessInfo, ProcessMemory

    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}, not an object"
    if doc.get("schema") != "vramscope.status/1":
        return f"schema {str(doc.get('schema'))[:40]!r}, expected 'vramscope.status/1'"
    if _value_problem(doc.get("ts_ms"), "int") is not None:
        return "ts_ms is not an integer"
    for key in ("devices", "processes"):
        if not isinstance(doc.get(key), list):
            return f"{key!r} is not a list"
    if len(doc["devices"]) > 256 or len(doc["processes"]) > 20000:
        return "too many devices or processes"
    for i, d in enumerate(doc["devices"]):
        if problem := _record_problem(DeviceSample, d, f"devices[{i}]"):
            return problem
    for i, p in enumerate(doc["processes"]):
        where = f"processes[{i}]"
        if problem := _record_problem(ProcessInfo, p, where):
            return problem
        memory = p.get("memory", {})
        if not isinstance(memory, dict):
            return f"{where}.memory is not an object"
        for device_id, fields in memory.items():
            if problem := _record_problem(
                ProcessMemory, fields, f"{where}.memory.{device_id}", skip=("pid", "device_id")
            ):
                return problem
            extra = set(fields) - {f for f in ProcessMemory.__dataclass_fields__}
            if extra or "pid" in fields or "device_id" in fields:
                return f"{where}.memory.{device_id} has unknown keys"
    return None


def events_doc_problem(page: Any) -> str | None:
    """Why ``page`` is not an events page (``{"events": [...]}``) we can show, or None."""
    if not isinstance(page, dict):
        return f"a JSON {type(page).__name__}, not an object"
    events = page.get("events")
    if not isinstance(events, list):
        return "'events' is not a list"
    if len(events) > REMOTE_MAX_EVENTS:
        return f"more than {REMOTE_MAX_EVENTS} events"
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            return f"events[{i}] is not an object"
        for key, kind in (
            ("ts_ms", "int"),
            ("kind", "str"),
            ("severity", "str"),
            ("message", "str"),
            ("subject", "str | None"),
        ):
            if (bad := _value_problem(e.get(key), kind)) is not None:
                return f"events[{i}].{key} is {bad}"
    return None
