"""Which local user is on the other end of a loopback TCP connection.

The kernel lists every TCP socket of this network namespace in ``/proc/net/tcp`` and
``/proc/net/tcp6`` (proc(5)): the client's own socket is the row whose local address:port
is the client's address:port as the server sees it and whose remote address:port is the
server's; its ``uid`` column is the user who created that socket. Addresses are hex of the
in-memory words: IPv4 one 32-bit word, IPv6 four, each in host byte order.

Bounded: at most :data:`MAX_TABLE_BYTES` of each table are read (a busy box lists one
~150-byte row per socket); a client not found there is unknown (None), which the access
check treats like a remote client ("others").
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

MAX_TABLE_BYTES = 8 * 2**20
"""Per table: about 55,000 sockets. A row not within it is not found (None)."""
_TABLES = ("net/tcp", "net/tcp6")
_UID_COLUMN = 7  # sl local rem st tx:rx tr:when retrnsmt uid


def _hex_address(host: str, port: int) -> tuple[str, str] | None:
    """(the /proc/net/tcp spelling, the /proc/net/tcp6 spelling) of host:port; an IPv4
    address has both (a dual-stack socket lists it mapped in tcp6), ``::ffff:a.b.c.d`` too."""
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    order = sys.byteorder
    if isinstance(address, ipaddress.IPv4Address):
        v4 = int.from_bytes(address.packed, order)
        mapped = ipaddress.IPv6Address(f"::ffff:{address}").packed
        v6 = "".join(f"{int.from_bytes(mapped[i : i + 4], order):08X}" for i in range(0, 16, 4))
        return f"{v4:08X}:{port:04X}", f"{v6}:{port:04X}"
    packed = address.packed
    v6 = "".join(f"{int.from_bytes(packed[i : i + 4], order):08X}" for i in range(0, 16, 4))
    return "", f"{v6}:{port:04X}"


def _read_bounded(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_TABLE_BYTES)
    if len(data) == MAX_TABLE_BYTES:  # the last row may be cut (a uid "655" of "65534")
        data = data[: data.rfind(b"\n") + 1]
    return data


def peer_uid(
    client: tuple[str, int], server: tuple[str, int], proc_root: Path = Path("/proc")
) -> int | None:
    """The uid owning the client's end of the connection ``client`` -> ``server`` (both
    as the server sees them: ``client_address``, ``getsockname()``), or None."""
    local = _hex_address(client[0], int(client[1]))
    remote = _hex_address(server[0], int(server[1]))
    if local is None or remote is None:
        return None
    for index, table in enumerate(_TABLES):
        want_local, want_remote = local[index], remote[index]
        if not want_local or not want_remote:
            continue
        for line in _read_bounded(proc_root / table).splitlines()[1:]:
            fields = line.split()
            if len(fields) <= _UID_COLUMN:
                continue
            if fields[1].decode() == want_local and fields[2].decode() == want_remote:
                uid = fields[_UID_COLUMN]
                return int(uid) if uid.isdigit() else None
    return None
