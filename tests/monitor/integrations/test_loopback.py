"""One loopback check for every caller: one table of URLs, and each caller that talks to a
server on its own (llama-swap's /running and log stream, llama-server's /slots) or listens
unguarded (the HTTP API) accepts and refuses the same ones. A refused URL causes no traffic:
the socket functions raise if they are called. Accepted URLs name port 1 on loopback, where
nothing listens, so they fail to connect (never a ValueError)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest

from monitor.errors import ServiceError, UsageError
from monitor.http import is_loopback
from monitor.integrations.llamaswap.client import fetch_running
from monitor.integrations.loopback import is_loopback_host, loopback_url
from monitor.integrations.slots import SlotPoller
from monitor.logs.follow import SwapLogTail

ACCEPTED = [
    "http://127.0.0.1:1",
    "http://127.5.6.7:1",
    "http://127.255.255.254:1/",
    "http://localhost:1",
    "http://LocalHost:1",
    "http://[::1]:1",
    "http://[0:0:0:0:0:0:0:1]:1",
    "http://[::ffff:127.0.0.1]:1",  # IPv4-mapped 127.0.0.1: delivered to 127.0.0.1
    "https://127.0.0.1:1/upstream/m",
    "http://127.0.0.1:1/prefix/?q=1",
    "http://127.0.0.1:1#@evil.example",  # the part after # is a fragment, never sent
]

REFUSED = [
    # names other than localhost: DNS can point them anywhere
    "http://example.com:1",
    "http://localhost.example.com:1",
    "http://127.0.0.1.nip.io:1",
    "http://localhost.:1",
    "http://box:1",
    # other addresses
    "http://10.0.0.5:1",
    "http://192.168.1.2:1",
    "http://0.0.0.0:1",
    "http://[::]:1",
    "http://[fe80::1]:1",
    "http://[2001:db8::1]:1",
    "http://[::ffff:10.0.0.1]:1",
    "http://[::1%25lo]:1",  # a zone ID
    # forms the C resolver reads as 127.0.0.1 but that are not written-out addresses
    "http://2130706433:1",
    "http://0x7f000001:1",
    "http://0x7f.0.0.1:1",
    "http://0177.0.0.1:1",
    "http://127.1:1",
    "http://0:1",
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:1",  # full-width digits
    # user-info tricks: the host is what follows the last @
    "http://127.0.0.1@evil.example:1",
    "http://127.0.0.1:1@evil.example",
    "http://user:pw@127.0.0.1:1",
    "http://evil.example\\@127.0.0.1:1",
    "http://evil.example#@127.0.0.1:1",
    "http://127.0.0.1\n.evil.example:1",  # urlsplit drops the newline
    # not an http(s) URL on a port
    "ftp://127.0.0.1/",
    "file:///etc/passwd",
    "127.0.0.1:8080",
    "http://:1",
    "http://127.0.0.1:99999",
    "http://[::1",
]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket, "create_connection", boom)
    monkeypatch.setattr(socket, "getaddrinfo", boom)
    monkeypatch.setattr(socket.socket, "connect", boom)


@pytest.mark.parametrize("url", REFUSED)
def test_every_caller_refuses_before_any_traffic(url: str, no_network: None) -> None:
    with pytest.raises(UsageError) as refused:
        loopback_url(url)
    assert "\n" not in str(refused.value)
    with pytest.raises(UsageError):
        fetch_running(url, timeout=0.5)
    with pytest.raises(UsageError):
        SlotPoller(timeout_s=0.2).poll(url, "m", now_s=0.0)
    with pytest.raises(UsageError):
        SwapLogTail(url)


@pytest.mark.parametrize("url", ACCEPTED)
def test_every_caller_accepts_loopback(url: str) -> None:
    parts = loopback_url(url)
    assert parts.port == 1 and is_loopback_host(parts.host)
    with pytest.raises(ServiceError, match="cannot read llama-swap's /running"):
        fetch_running(url, timeout=2.0)  # refused on port 1: reached, not refused by us
    assert SlotPoller(timeout_s=0.5).poll(url, "m", now_s=0.0) is None
    tail = SwapLogTail(url)  # built, not started: no connection yet
    assert (tail._host, tail._port) == (parts.host, 1)


def _host_of(url: str) -> str | None:
    """The host of a URL whose scheme, user info and port are fine (the host decides)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a bad port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or parts.username is not None:
        return None
    return parts.hostname or None


HOSTS = [(host, url in ACCEPTED) for url in ACCEPTED + REFUSED if (host := _host_of(url))]


@pytest.mark.parametrize(("host", "loopback"), HOSTS)
def test_the_http_api_listen_check_agrees(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert is_loopback(f"[{host}]" if ":" in host else host) is loopback


def test_loopback_url_keeps_what_callers_build_on() -> None:
    parts = loopback_url("https://[::1]:8443/swap/?a=b", "llama-swap URL")
    assert (parts.scheme, parts.netloc, parts.host, parts.port, parts.path, parts.query) == (
        "https",
        "[::1]:8443",
        "::1",
        8443,
        "/swap",
        "a=b",
    )
    assert loopback_url("http://LOCALHOST").port == 80
    assert loopback_url("https://127.0.0.1").port == 443
    with pytest.raises(UsageError, match="refusing non-loopback llama-swap URL host"):
        loopback_url("http://10.0.0.1:8080", "llama-swap URL")
