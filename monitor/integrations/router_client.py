"""A llama-server router's model list over HTTP: ``GET /models``, loopback only.

Reads nothing else: never ``POST /models/load`` (that loads a model). No proxy, no
redirects, the answer bounded in size and depth (:func:`monitor.servers.router_models.
models_answer`). Network errors propagate as OSError; a bad answer raises
:class:`~monitor.servers.router_models.RouterModelsError` (a ValueError's sibling:
an InputError)."""

from __future__ import annotations

import urllib.parse
import urllib.request

from monitor.integrations.llamaswap.client import _NoRedirect
from monitor.integrations.loopback import loopback_url
from monitor.servers.router_models import MAX_ANSWER_BYTES, AnsweredModel, models_answer

__all__ = ["fetch_models"]


def fetch_models(base_url: str, timeout_s: float = 2.0) -> tuple[AnsweredModel, ...]:
    """``GET {base_url}/models`` -> the router's models (ValueError for a URL that is
    not http(s) on a loopback host)."""
    parts = loopback_url(base_url, "router URL")
    url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path + "/models", "", ""))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with opener.open(request, timeout=timeout_s) as response:
        body = response.read(MAX_ANSWER_BYTES + 1)
    return models_answer(body)
