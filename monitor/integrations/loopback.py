"""The one loopback check: the hosts vramscope talks to on its own, and listens on unguarded.

vramscope sends requests by itself only to servers on this box (llama-server's ``/slots``
and ``/metrics``, llama-swap's ``/running`` and log stream), and its HTTP API listens
without a token only on loopback. A host is loopback when it is ``localhost`` (any case)
or an IP address written out in full inside 127.0.0.0/8, ``::1`` or ``::ffff:127.0.0.0/104``
(IPv4-mapped 127.x, which the kernel delivers to 127.x).

Everything else is refused before any traffic: other names (DNS can point a name anywhere,
``localhost.`` included), the short and numeric forms the C resolver would also read as
127.0.0.1 (``127.1``, ``2130706433``, ``0x7f.0.0.1``, ``0177.0.0.1``; :mod:`ipaddress`
reads none of them), zone IDs (``[::1%25lo]``), URLs with a user name or password
(``http://127.0.0.1@evil``: the host there is ``evil``), and schemes other than http(s).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from monitor.errors import UsageError

__all__ = ["LoopbackURL", "is_loopback_host", "loopback_url"]

_LOOPBACK_V4 = ipaddress.ip_network("127.0.0.0/8")


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8, ``::1``, ``::ffff:127.x``
    (brackets around an IPv6 address are allowed); False for anything else."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if text.lower() == "localhost":
        return True
    if "%" in text:  # a zone ID: not an address of this box's loopback as written
        return False
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped
        return address == ipaddress.IPv6Address("::1") or (
            mapped is not None and mapped in _LOOPBACK_V4
        )
    return address in _LOOPBACK_V4


@dataclass(frozen=True, slots=True)
class LoopbackURL:
    """An http(s) URL whose host passed :func:`is_loopback_host`."""

    scheme: str  # "http" or "https"
    netloc: str  # as written (host and port; never a user name)
    host: str  # lower case, no brackets: what the connection is opened to
    port: int  # as written, else 80 or 443
    path: str  # as written, without a trailing "/"
    query: str  # as written, without the "?"


def loopback_url(url: str, what: str = "URL") -> LoopbackURL:
    """``url`` split, or UsageError (one line naming ``what``) when it is not an http(s)
    URL on a loopback host. Nothing is resolved or connected here."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # urlsplit's own: a bad port, a bad IPv6 literal
        raise UsageError(f"bad {what} {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"{what} must be http(s): {url!r}")
    if parts.username is not None or parts.password is not None:
        raise UsageError(f"{what} must not carry a user name or password: {url!r}")
    host = parts.hostname or ""
    if not is_loopback_host(host):
        raise UsageError(
            f"refusing non-loopback {what} host {host or url!r}: "
            "only 127.0.0.0/8, ::1 and localhost are allowed"
        )
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return LoopbackURL(parts.scheme, parts.netloc, host, port, parts.path.rstrip("/"), parts.query)
