"""Byte units: the binary multiples, and every way vramscope writes a byte count as text.

Figures stay in bytes (``*_bytes`` fields) until they are written; the writing is here so
that one number reads the same wherever it appears. Unknown (None) is never written as 0.
The TUI's short style ("1.5G", tui/format.py) uses these constants too.
"""

from __future__ import annotations

__all__ = [
    "GIB",
    "KIB",
    "MIB",
    "TIB",
    "gib",
    "gib_number",
    "gib_or_mib",
    "human_bytes",
    "mib",
    "precise_bytes",
]

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4


def gib(n: float | None, places: int = 1, unknown: str = "?") -> str:
    """``12.3 GiB`` (``places`` decimals)."""
    return unknown if n is None else f"{n / GIB:.{places}f} GiB"


def mib(n: float | None, places: int = 2, unknown: str = "?") -> str:
    """``1234.56 MiB`` (``places`` decimals)."""
    return unknown if n is None else f"{n / MIB:.{places}f} MiB"


def gib_number(n: float) -> float:
    """GiB rounded to 2 decimals, for JSON fields named ``*_gib``."""
    return round(n / GIB, 2)


def gib_or_mib(n: float | None, unknown: str = "?") -> str:
    """``3.2 GiB`` from 1 GiB up, else ``512 MiB``."""
    if n is None:
        return unknown
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def human_bytes(value: float | None) -> str:
    """1536 -> '1.5 KiB', the largest unit up to TiB, one decimal; None -> '-'."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def precise_bytes(v: float | None) -> str:
    """Signed, two decimals in GiB, one in MiB and KiB, whole bytes below: '-1.50 GiB',
    '12.0 MiB', '512 B'; None -> '?'."""
    if v is None:
        return "?"
    sign = "-" if v < 0 else ""
    a = abs(v)
    if a >= GIB:
        return f"{sign}{a / GIB:.2f} GiB"
    if a >= MIB:
        return f"{sign}{a / MIB:.1f} MiB"
    if a >= KIB:
        return f"{sign}{a / KIB:.1f} KiB"
    return f"{sign}{int(a)} B"
