"""What a request to the daemon's HTTP API carries, read and checked before it reaches
the daemon (monitor/http/server.py): the predict body's shape and bounds, query integers,
the Host header a web page cannot forge (DNS rebinding), a header in a raw head, the body
reader that resumes after the head, and the one-line 4xx error they raise."""

from __future__ import annotations

import io
import ipaddress
import json
from typing import Any
from urllib.parse import parse_qs

MAX_COMMAND_ARGS = 512
MAX_ARG_CHARS = 4096


class RequestError(Exception):
    """A request refused: its 4xx ``status``, a one-line ``message`` for the client, and
    any ``headers`` the answer must carry (``WWW-Authenticate`` for a 401)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class BodyReader(io.BufferedIOBase):
    """The bytes that came after the head, then the connection's own reader."""

    def __init__(self, prefix: bytes, rest: io.BufferedIOBase) -> None:
        super().__init__()
        self.prefix = prefix
        self.rest = rest

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1, /) -> bytes:
        if n is None or n < 0:
            out, self.prefix = self.prefix + self.rest.read(), b""
            return out
        out, self.prefix = self.prefix[:n], self.prefix[n:]
        if len(out) < n:
            out += self.rest.read(n - len(out))
        return out

    def read1(self, n: int = -1, /) -> bytes:
        """What is here now: the head's leftover first, else one read of the connection."""
        if self.prefix:
            size = len(self.prefix) if n < 0 else n
            out, self.prefix = self.prefix[:size], self.prefix[size:]
            return out
        return self.rest.read1(n)

    def close(self) -> None:
        if not self.closed:
            self.rest.close()
        super().close()


def header_value(lines: list[bytes], name: bytes) -> str | None:
    for line in lines:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return None


def int_param(
    query: dict[str, list[str]], name: str, default: int, low: int, high: int | None = None
) -> int:
    values = query.get(name)
    if not values:
        return default
    text = values[-1].strip()
    if not text.lstrip("-").isdigit() or len(text) > 20:
        raise RequestError(400, f"{name}: expected an integer, got {text[:40]!r}")
    value = int(text)
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise RequestError(400, f"{name}: must be {bound}")
    return value


def predict_request(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RequestError(400, 'expected a JSON object: {"command": ["llama-server", ...]}')
    unknown = set(doc) - {"command", "margin_gib", "model_id"}
    if unknown:
        raise RequestError(
            400, f"unknown field {sorted(unknown)[0]!r}; expected command, margin_gib, model_id"
        )
    margin = doc.get("margin_gib", 0.5)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin <= 1024:
        raise RequestError(400, "margin_gib: expected a number from 0 to 1024")
    if "model_id" in doc and "command" not in doc:
        model_id = doc["model_id"]
        if not isinstance(model_id, str) or not 0 < len(model_id) <= MAX_ARG_CHARS:
            raise RequestError(400, "model_id: expected a llama-server router's model id")
        if not model_id.isprintable():
            raise RequestError(400, "model_id: no control characters")
        return {"command": [], "model_id": model_id, "margin_gib": float(margin)}
    command = doc.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        raise RequestError(
            400,
            "command: expected a non-empty list of strings, e.g. "
            '["llama-server", "-m", "/models/m.gguf"]',
        )
    if len(command) > MAX_COMMAND_ARGS or any(len(a) > MAX_ARG_CHARS or "\0" in a for a in command):
        raise RequestError(
            400,
            f"command: at most {MAX_COMMAND_ARGS} arguments of at most "
            f"{MAX_ARG_CHARS} characters, no NUL",
        )
    return {"command": list(command), "margin_gib": float(margin)}


def dns_safe_host(header: str | None) -> bool:
    """The Host header names this box by address or ``localhost`` (not a DNS name that
    a web page could point at 127.0.0.1)."""
    if not header:
        return True  # HTTP/1.0 clients send none; browsers always do
    host = header.strip()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def drain(stream: Any, length: int) -> None:
    try:
        while length > 0:
            chunk = stream.read(min(length, 65536))
            if not chunk:
                return
            length -= len(chunk)
    except OSError:
        return


def query_params(text: str) -> dict[str, list[str]]:
    try:
        return parse_qs(text, max_num_fields=64)
    except ValueError as exc:
        raise RequestError(400, f"bad query string: {exc}") from None
