"""Text from processes and logs, made safe to print on a terminal.

Process names (``/proc/PID/comm``, 15 bytes any process may set), command lines, log lines
and the daemon's recorded events are hostile: an ESC or CSI sequence in a name can retitle,
clear or reprogram the terminal that prints it (OSC 52 even writes the clipboard). Every
such string goes through :func:`terminal_safe` before it is printed (``status``,
``events``, ``postmortem``, ``diagnose``, ``predict``) or drawn by the TUI.

Control characters (Unicode category C: C0 incl. ESC and BEL, DEL, C1 incl. CSI/OSC,
format characters such as bidi overrides, lone surrogates, unassigned code points) become
visible escapes: ``\\x1b``, ``\\u202e``. Markup is a separate matter: the TUI also keeps
such text out of markup strings (tui/format.py). Stdlib only.
"""

from __future__ import annotations

import unicodedata
from typing import Any


def _escape_char(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "C"


def terminal_safe(value: Any) -> str:
    """One field (a name, an argument, a message): every control character, newlines and
    tabs included, becomes a visible ``\\xNN`` / ``\\uNNNN`` escape."""
    s = value if isinstance(value, str) else str(value)
    if s.isprintable():  # fast path: printable strings hold no category C character
        return s
    return "".join(_escape_char(ch) if _unsafe(ch) else ch for ch in s)


def terminal_safe_lines(text: str) -> str:
    """A whole report: as :func:`terminal_safe`, but newlines stay line breaks."""
    return "\n".join(terminal_safe(line) for line in text.split("\n"))
