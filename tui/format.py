"""Number formatting shared by the widgets (binary units, short), and :func:`plain`: text
from processes, logs and the network, made safe to draw."""

from __future__ import annotations

from datetime import datetime

from rich.cells import cell_len
from rich.text import Text
from textual.content import Content

from monitor.device_names import (  # one device name for every view
    VENDOR_PREFIXES as VENDOR_PREFIXES,
)
from monitor.device_names import (
    short_device_name as short_device_name,
)
from monitor.textsafe import terminal_safe
from monitor.units import GIB, MIB

UNKNOWN = "-"
"""How every view prints a figure that is not known: never 0, never a guess."""


def size(n: int | None) -> str:
    if n is None:
        return UNKNOWN
    if abs(n) >= GIB:
        return f"{n / GIB:.1f}G"
    return f"{n / MIB:.0f}M"


def size_of(n: int | None, whole: int | None) -> str:
    """``n`` as a part of ``whole``, in ``whole``'s unit: ``0.9G`` of ``23.5G`` (not
    ``912M``: a fraction's parts in one unit, to the resolution of the whole, so a few MiB
    moving on a GiB device leave the figure, and the screen, as they were). A part too
    small to show at that resolution but not nothing reads ``<0.1G``, never ``0.0G``."""
    if n is None or whole is None or abs(whole) < GIB:
        return size(n)
    text = f"{n / GIB:.1f}"
    return "<0.1G" if n > 0 and text == "0.0" else f"{text}G"


def signed(n: int | None) -> str:
    if n is None:
        return UNKNOWN
    return ("+" if n > 0 else "") + size(n)


def middle_cut(text: str, width: int) -> str:
    """``text`` in ``width`` cells: whole, or cut in the middle with "…", keeping its
    start and its end (a model file's quant and shard, a legend's figures)."""
    if cell_len(text) <= width:
        return text
    tail = max((width - 1) * 2 // 5, 1)
    return text[: max(width - 1 - tail, 1)] + "…" + text[-tail:]


def clock(ts_ms: int, with_date: bool = False) -> str:
    moment = datetime.fromtimestamp(ts_ms / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")


def safe(text: object) -> str:
    """A process name, command line, log line or message with every control character
    shown as a visible escape (monitor/textsafe.py). Still not markup: see ``plain``."""
    return terminal_safe(text)


def plain(text: object, style: str = "") -> Content:
    """Hostile text as Content: never parsed as markup, control characters escaped."""
    return Content.styled(terminal_safe(text), style) if style else Content(terminal_safe(text))


class CellText(Text):
    """A DataTable cell that is text, not markup (a ``str`` cell is parsed as Rich markup:
    ``[/]x`` raises). Hashable by its text, as the tables' render caches key cells by
    value; never mutated after it is made."""

    def __hash__(self) -> int:
        return hash(self.plain)


def cell(text: object) -> CellText:
    """Hostile text as a one-line DataTable cell (control characters escaped)."""
    return CellText(terminal_safe(text), no_wrap=True, end="")
