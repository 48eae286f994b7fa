"""A client of a vramscope daemon's HTTP API (``tui --remote URL``), and the checks that
its answers have the shapes the daemon serves: they are untrusted, so each is at most
``REMOTE_MAX_BYTES`` and must look like ``vramscope.status/1`` (docs/status.schema.json)
or an events page before anything is drawn from it. No proxies are used; a token is sent
as a bearer token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from monitor.errors import VramscopeError

REMOTE_MAX_BYTES = 16 << 20
"""The most a daemon's answer may be: a snapshot of a box with 10,000 tracked processes is
about 10 MiB; anything larger is not a vramscope daemon (and is not read into memory)."""
REMOTE_MAX_EVENTS = 1000  # the daemon's own page size (monitor/http/server.py)


class RemoteError(VramscopeError):
    """The daemon cannot be read, or did not answer like a vramscope daemon."""


class DaemonClient:
    """``GET`` JSON from the daemon at ``url`` (http or https only)."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 5.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(
                f"--remote {url}: expected http://HOST:PORT, e.g. http://gpu-box:9835"
            )
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def get(self, path: str) -> Any:
        """The JSON answer to ``GET path``, at most ``REMOTE_MAX_BYTES``; RemoteError says
        what went wrong in one line."""
        return self._request(path)

    def post(self, path: str, doc: Any) -> tuple[int, Any]:
        """``POST path`` with a JSON body: (HTTP status, JSON answer). A 400 is an answer
        (the daemon's one-line ``error``), not a failure; other errors raise RemoteError."""
        return self._request(path, json.dumps(doc).encode(), accept_codes=(400,))

    def _request(
        self, path: str, body: bytes | None = None, accept_codes: tuple[int, ...] = ()
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        # http(s) only: no proxies, no file:// or ftp:// handlers
        opener = urllib.request.OpenerDirector()
        for handler in (
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPHandler(),
            urllib.request.HTTPSHandler(),
            urllib.request.HTTPDefaultErrorHandler(),
            urllib.request.HTTPErrorProcessor(),
        ):
            opener.add_handler(handler)
        status = 200
        request = urllib.request.Request(self.url + path, data=body, headers=headers)
        try:
            with opener.open(request, timeout=self.timeout_s) as response:
                answer = response.read(REMOTE_MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code not in accept_codes:
                hint = " (give --token)" if exc.code == 401 else ""
                raise RemoteError(f"{self.url}{path}: HTTP {exc.code}{hint}") from None
            status = exc.code
            try:
                answer = exc.read(REMOTE_MAX_BYTES + 1)
            except OSError as read_exc:
                raise RemoteError(f"{self.url}{path}: {read_exc}") from None
        except (OSError, ValueError) as exc:
            raise RemoteError(f"cannot reach the vramscope daemon at {self.url}: {exc}") from None
        if len(answer) > REMOTE_MAX_BYTES:
            raise RemoteError(
                f"{self.url}{path}: the answer is larger than "
                f"{REMOTE_MAX_BYTES >> 20} MiB; not a vramscope daemon?"
            )
        try:
            doc = json.loads(answer)
        except (ValueError, RecursionError) as exc:
            raise RemoteError(
                f"{self.url}{path}: not JSON ({str(exc)[:80]}); not a vramscope daemon?"
            ) from None
        return (status, doc) if body is not None else doc


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
