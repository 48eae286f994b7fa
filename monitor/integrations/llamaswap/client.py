"""llama-swap's live state over HTTP: ``GET /running`` and its ``/api/events`` frames.

HTTP: :func:`fetch_running` reads ``GET /running`` from a loopback llama-swap only, with
no proxy and no redirects. Never request ``/upstream/<model>/...``: that loads the model.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from typing import IO, NoReturn

from monitor.errors import ServiceError
from monitor.integrations.loopback import loopback_url

__all__ = ["PROCESS_STATES", "fetch_running", "parse_event_frame"]

PROCESS_STATES = frozenset({"stopped", "starting", "ready", "stopping", "shutdown"})
_MAX_RUNNING_BYTES = 4 << 20


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> NoReturn:
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused: {msg}", headers, fp)


def fetch_running(base_url: str, timeout: float = 2.0) -> dict[str, str]:
    """``GET {base_url}/running`` -> {model ID: state}. Loopback hosts only (else
    UsageError).

    Reads nothing but ``/running``: it never loads a model. No proxy, no redirects.
    A llama-swap that cannot be reached, or a body that is not its ``{"running": [...]}``,
    is a ServiceError naming the URL.
    """
    parts = loopback_url(base_url, "llama-swap URL")
    url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path + "/running", "", ""))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read(_MAX_RUNNING_BYTES + 1)
    except OSError as exc:  # URLError, HTTPError, a timeout, a reset
        why = getattr(exc, "reason", None) or exc
        raise ServiceError(f"{url}: cannot read llama-swap's /running: {why}") from None
    return _running_states(url, body)


def _running_states(url: str, body: bytes) -> dict[str, str]:
    """llama-swap's ``{"running": [{"model", "state"}, ...]}`` -> {model ID: state}."""
    if len(body) > _MAX_RUNNING_BYTES:
        raise ServiceError(f"{url}: response larger than {_MAX_RUNNING_BYTES} bytes")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ServiceError(f"{url}: not JSON: {str(exc)[:200]}") from None
    entries = payload.get("running") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        raise ServiceError(f'{url}: expected {{"running": [...]}}')
    out: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ServiceError(f"{url}: running entry is not an object")
        model, state = entry.get("model"), entry.get("state")
        if not isinstance(model, str) or not isinstance(state, str):
            raise ServiceError(f"{url}: running entry without string model/state")
        out[model] = state
    return out


def parse_event_frame(text: str) -> list[tuple[str, str]]:
    """(model ID, state) pairs from ``/api/events`` SSE frames of type ``modelStatus``.

    ``text`` is one frame (``event:message`` / ``data:{"type":..,"data":"<json>"}``) or
    several separated by blank lines. Other event types and malformed frames give nothing;
    this never raises, so it can sit on a live stream.
    """
    out: list[tuple[str, str]] = []
    for frame in text.replace("\r\n", "\n").split("\n\n"):
        data_lines = []
        for line in frame.split("\n"):
            if line.startswith("data:"):
                value = line[5:]
                data_lines.append(value[1:] if value.startswith(" ") else value)
        if not data_lines:
            continue
        try:
            envelope = json.loads("\n".join(data_lines))
        except json.JSONDecodeError:
            continue
        if not isinstance(envelope, dict) or envelope.get("type") != "modelStatus":
            continue
        inner = envelope.get("data")
        if isinstance(inner, str):
            try:
                inner = json.loads(inner)
            except json.JSONDecodeError:
                continue
        if not isinstance(inner, list):
            continue
        for item in inner:
            if isinstance(item, dict):
                model, state = item.get("id"), item.get("state")
                if isinstance(model, str) and isinstance(state, str):
                    out.append((model, state))
    return out
