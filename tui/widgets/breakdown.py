"""The selected model's components (per device, with formulas) and its diagnosis."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from tui.format import size
from tui.source import ModelRow


def width_ok(old: str, new: str) -> bool:
    """Lines keep their count and every line its length: no relayout needed."""
    a, b = old.split("\n"), new.split("\n")
    return len(a) == len(b) and all(len(x) == len(y) for x, y in zip(a, b, strict=True))


def _esc(text: str) -> str:
    return text.replace("[", r"\[")


class Breakdown(Static):
    """Shows ``row``; a hint when nothing is selected."""

    DEFAULT_CSS = """
    Breakdown { height: auto; padding: 0 1; }
    """

    row: reactive[ModelRow | None] = reactive(None, repaint=False)
    """The model whose breakdown is shown (``_show`` repaints only when the text changes:
    a new frame brings a new row each time)."""

    _shown: str | None = None

    def _show(self) -> None:
        content = self.describe(self.row, self.content_size.width)
        markup = content.markup
        if markup != self._shown:  # same line count: repaint without a relayout
            same_height = (self._shown is not None and width_ok(self._shown, markup))
            self._shown = markup
            self.update(content, layout=not same_height)

    def watch_row(self, row: ModelRow | None) -> None:
        self._show()

    def on_mount(self) -> None:
        self._show()

    def on_resize(self) -> None:
        self._show()

    @staticmethod
    def describe(row: ModelRow | None, width: int = 0) -> Content:
        """The breakdown text; component lines are cut to ``width`` (0: never)."""
        if row is None:
            return Content.from_markup("[$text-muted]select a model to see its breakdown[/]")
        lines = [f"[b]{_esc(row.model)}[/b] [$text-muted]pid {row.pid} · {row.engine}[/]"]
        if row.error:
            lines.append(f"[$warning]cannot estimate:[/] {_esc(row.error)}")
        est = row.estimate
        if est is not None:
            for c in sorted(est.components, key=lambda c: (c.device, -c.bytes)):
                grows = "↑" if c.when == "grows" else " "
                device = c.device if len(c.device) <= 12 else c.device[:11] + "…"
                head = f"  {c.name:<13} {device:<12} {size(c.bytes):>7}{grows} "
                formula = c.formula
                if width and len(head) + len(formula) > width:
                    formula = formula[: max(0, width - len(head) - 1)] + "…"
                lines.append(f"{_esc(head)}[$text-muted]{_esc(formula)}[/]")
            lines.append(f"  {'total':<13} {'':<12} {size(est.total_bytes()):>7}  "
                         f"measured {size(row.measured_bytes)}  (↑ grows with use)")
        diag = row.diagnosis
        if diag is not None:
            style = "$warning" if diag.excess_bytes > 256 * 1024**2 else "$success"
            lines.append(f"[{style}]{_esc(diag.summary)}[/]")
            for f in diag.findings:
                fix = ""
                if f.fix:
                    fix = f" → [b]{_esc(f.fix)}[/b]"
                    if f.frees_bytes:
                        fix += f" frees {size(f.frees_bytes)}"
                lines.append(f"  • {_esc(f.cause)}{fix}")
        for flag in row.flags:
            lines.append(f"[$warning]⚑ {_esc(flag)}[/]")
        return Content.from_markup("\n".join(lines))
