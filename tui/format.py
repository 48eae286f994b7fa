"""Number formatting shared by the widgets (binary units, short)."""

from __future__ import annotations

from datetime import datetime

GIB = 1024**3
MIB = 1024**2


UNKNOWN = "-"
"""How every view prints a figure that is not known: never 0, never a guess."""


def size(n: int | None) -> str:
    if n is None:
        return UNKNOWN
    if abs(n) >= GIB:
        return f"{n / GIB:.1f}G"
    return f"{n / MIB:.0f}M"


def signed(n: int | None) -> str:
    if n is None:
        return UNKNOWN
    return ("+" if n > 0 else "") + size(n)


def clock(ts_ms: int, with_date: bool = False) -> str:
    moment = datetime.fromtimestamp(ts_ms / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")
