"""`?`: every key, column, flag, bar symbol and colour of the TUI, in one scrollable page.

The key lists are read from the screens' own bindings, so they cannot drift from what the
keys do; the symbols are the device panel's and events pane's own constants.
"""

from __future__ import annotations

import textwrap
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from tui.widgets.device_panel import FREE, MARGIN, OTHERS, OVER, PALETTE, PROJECTED, RESERVED
from tui.widgets.events_pane import SEVERITY

KEY_NAMES = {
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "left_curly_bracket": "{",
    "right_curly_bracket": "}",
    "escape": "Esc",
    "question_mark": "?",
    "up": "↑",
    "down": "↓",
    "enter": "Enter",
    "tab": "Tab",
    "f5": "F5",
}

DETAIL = {  # action -> what the key does, where the binding's short description is not enough
    "refresh": "sample now (live) instead of waiting for the next refresh",
    "history": "memory over time per device and per model, 5 min to 30 days",
    "whatif": "predict a launch on this box: a llama-swap model id or a llama-server command",
    "replay": (
        "freeze on this moment and step through the recorded ticks "
        "(live and remote: the last minute; the database: all of them)"
    ),
    "step(-1)": "replay: one tick back",
    "step(1)": "replay: one tick forward",
    "step(-60)": "replay: 60 ticks back",
    "step(60)": "replay: 60 ticks forward",
    "live": "back to live after a replay",
    "zoom": "the breakdown (or the focused pane) full-screen; again to go back",
    "ids": "show or hide each device's long id (nvml:GPU-…, drm:0000:…) beside GPU0, GPU1",
    "app.quit": "quit",
    "app.pop_screen": "back to the main screen",
    "dismiss_dialog": "close the dialog",
    "predict": "run the prediction for the chosen model or command line",
}

COLUMNS = (
    (
        "model",
        "the model file (or the engine's model name); a long one cut in the middle (…),"
        " whole in the breakdown",
    ),
    ("measured", "what the process holds: VRAM + GTT + RssAnon + RssFile (its helpers included)"),
    ("estimate", "what llama.cpp allocates at load by the estimate (growth ceilings not counted)"),
    ("Δ", "measured − estimate: + holds more than expected, − less"),
    ("flags", "what to look at (below)"),
    ("ctx×slots", "context cells × parallel slots (-c × -np), as the estimate uses them"),
    ("cache", "K/V cache types (-ctk/-ctv)"),
    ("KV", "the KV cache of the estimate, all devices"),
    ("engine", "llama.cpp, ollama or vLLM, recognised from the command line"),
)

FLAGS = (
    (
        "KV N× the p99 context in use",
        "the KV cache is sized for far more context than requests use",
    ),
    ("draft KV in f16", "the draft model's KV cache is f16: -ctkd q8_0 -ctvd q8_0 halves it"),
    ("no -c: fit will grow the context", "started without -c: llama.cpp picks the context itself"),
    ("unknown model", "the model file cannot be read here: no estimate"),
)


def _keys(bindings: list[Any]) -> list[tuple[str, str]]:
    out = []
    for b in bindings:
        if not isinstance(b, Binding):
            continue
        keys = " ".join(
            b.key_display or KEY_NAMES.get(k.strip(), k.strip()) for k in b.key.split(",")
        )
        out.append((keys, DETAIL.get(b.action, b.description or b.action)))
    return out


def help_text(width: int | None = None) -> Content:
    """The whole help page (pure: tests read it without running the app). With ``width``,
    a description that does not fit wraps under itself (a hanging indent), never back to
    the first column."""
    from tui.screens.history import HistoryScreen
    from tui.screens.main import MainScreen
    from tui.screens.whatif import WhatIfScreen

    lines: list[Content] = []

    def section(title: str) -> None:
        if lines:
            lines.append(Content(""))
        lines.append(Content.styled(title, "bold $accent"))

    def wrapped(text: str, indent: int) -> list[str]:
        if width is None or width - indent < 20:
            return [text]
        return textwrap.wrap(text, width - indent) or [""]

    def row(left: str | Content, right: str, pad: int = 14) -> None:
        left_c = left if isinstance(left, Content) else Content(left)
        gap = " " * max(1, pad - left_c.cell_length)
        indent = 2 + left_c.cell_length + len(gap)
        first, *rest = wrapped(right, indent)
        lines.append(Content("  ") + left_c + Content(gap) + Content(first))
        lines.extend(Content(" " * indent + more) for more in rest)

    section("main screen keys")
    row("↑ ↓", "select a model (its breakdown below)")
    row("Tab", "next pane: models, breakdown, events (Enter on an event: replay that moment)")
    for key, what in _keys(MainScreen.BINDINGS):
        row(key, what)
    row("?", "this help")
    row("Ctrl+P", "command palette")
    section("history screen keys")
    for key, what in _keys(HistoryScreen.BINDINGS):
        row(
            key, what if " " not in what or "back" in what or what == "quit" else f"the last {what}"
        )
    section("what-if dialog keys")
    for key, what in _keys(WhatIfScreen.BINDINGS):
        row(key, what)
    section("device bar")
    for i, color in enumerate(PALETTE[:3]):
        row(Content.styled("█", color), f"a model's memory on this device (colour {i + 1} of 8)")
    row(Content.styled("▼", PALETTE[0]), "where that model's estimate ends (same colour)")
    row(Content.styled("▓", OTHERS), "others: processes that are not inference servers")
    row(Content.styled("▒", RESERVED), "reserved by the driver / firmware")
    row(Content.styled("▞", PROJECTED), "what-if: the launch being predicted, at its estimate")
    row(Content.styled("░", FREE), "free (what a new load can get, less the margin)")
    row(Content.styled("╳", MARGIN), "the safety margin kept free (--margin-gib)")
    row(Content.styled("!", f"bold {OVER}"), "the bar's content would not fit: OOM ahead")
    row("anon+shm", "on the host bar a model's part is anonymous + shared memory")
    row("", "(its mmap'd weights are page cache, counted as available)")
    section("models table columns (→ scrolls to the last ones on a narrow terminal)")
    for name, what in COLUMNS:
        row(name, what)
    section("flags")
    for flag, what in FLAGS:
        lines.append(Content("  ") + Content.styled(f"⚑ {flag}", "$warning"))
        lines.extend(Content(f"      {part}") for part in wrapped(what, 6))
    section("breakdown")
    row("at load", "the components llama.cpp allocates at start, per device, with the formula")
    row("↑ grows", "caches that fill with use (prompt cache, checkpoints): ceilings, not held now")
    row("• cause", "the diagnosis: what explains measured vs estimate, → the fix and what it frees")
    section("events")
    for severity, mark in SEVERITY.items():
        row(mark if mark.strip() else "(blank)", severity)
    section("colours")
    row(Content.styled("green", "$success"), "as expected")
    row(Content.styled("yellow", "$warning"), "a warning: over the estimate, a flag, margin")
    row(Content.styled("red", "$error"), "OOM ahead, an error")
    row(Content.styled("grey", "$text-muted"), "context: formulas, ids, unknown figures")
    return Content("\n").join(lines)


class HelpScreen(Screen):
    """Every key, flag, symbol and colour."""

    BINDINGS = [
        Binding("escape,question_mark,q", "app.pop_screen", "Back"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="help"):
            yield Static(help_text(), id="help-text")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#help").focus()

    def on_resize(self) -> None:
        # the page wraps to the pane (less its scrollbar), each description under itself
        width = self.query_one("#help").scrollable_content_region.width
        self.query_one("#help-text", Static).update(help_text(max(40, width)))
