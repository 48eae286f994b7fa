"""The selected model's components (per device, with formulas) and its diagnosis."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from monitor.api import model_specific
from monitor.device_names import device_tag, relabel
from tui.format import plain, safe, size
from tui.source import ModelRow


class Breakdown(Static):
    """Shows ``row``; a hint when nothing is selected."""

    DEFAULT_CSS = """
    Breakdown { height: auto; padding: 0 1; }
    """

    row: reactive[ModelRow | None] = reactive(None, repaint=False)
    """The model whose breakdown is shown (``_show`` repaints only when the text changes:
    a new frame brings a new row each time)."""

    labels: dict[str, str] = {}
    """Device names by id (monitor/device_names.py), set by the screen from its frame."""

    _shown: str | None = None
    _height: tuple[int, int] | None = None
    """(width, wrapped height) of the shown text."""

    def _show(self) -> None:
        width = self.content_size.width
        content = self.describe(self.row, width, self.labels)
        markup = content.markup
        if markup == self._shown:
            return
        # the same height once wrapped at this width: repaint without a relayout
        # (as Widget.get_content_height measures it: its styles stand for the rules map)
        rules = self.styles
        height = (width, content.get_height(rules, width)) if width else None  # type: ignore[arg-type]
        same_height = self._shown is not None and height is not None and height == self._height
        self._shown, self._height = markup, height
        self.update(content, layout=not same_height)

    def watch_row(self, row: ModelRow | None) -> None:
        self._show()

    def on_mount(self) -> None:
        self._show()

    def on_resize(self) -> None:
        self._show()

    @staticmethod
    def describe(
        row: ModelRow | None, width: int = 0, labels: dict[str, str] | None = None
    ) -> Content:
        """The breakdown text; component lines are cut to ``width`` (0: never). Text from
        the process (model name, arguments, errors) is never parsed as markup. Devices by
        their short name (``GPU0``; ``labels``: monitor/device_names.py), as the panels."""
        labels = labels or {}
        if row is None:
            return Content.from_markup("[$text-muted]select a model to see its breakdown[/]")
        lines = [
            plain(row.model, "bold")
            + Content(" ")
            + plain(f"pid {row.pid} · {row.engine}", "$text-muted")
        ]
        if row.error:
            lines.append(
                Content.styled("cannot estimate:", "$warning") + Content(" ") + plain(row.error)
            )
        est = row.estimate
        if est is not None:

            def component(name: str, device: str, nbytes: int, formula: str) -> Content:
                device = device_tag(labels[device]) if device in labels else safe(device)
                formula = relabel(formula, labels)
                device = device if len(device) <= 12 else device[:11] + "…"
                head = f"  {name:<13} {device:<12} {size(nbytes):>7}  "
                if width and len(head) + len(formula) > width:
                    formula = formula[: max(0, width - len(head) - 1)] + "…"
                return Content(head) + Content.styled(formula, "$text-muted")

            # what llama.cpp allocates at load, then the caches that fill with use: the
            # growth figures are ceilings, not memory held now, so they come after the total
            load = [c for c in est.components if c.when != "grows"]
            grows = [c for c in est.components if c.when == "grows"]
            for c in sorted(load, key=lambda c: (c.device, -c.bytes)):
                lines.append(component(safe(c.name), c.device, c.bytes, safe(c.formula)))
            lines.append(
                Content(
                    f"  {'at load':<13} {'':<12} {size(est.total_bytes()):>7}  "
                    f"measured {size(row.measured_bytes)}"
                )
            )
            for assumed in model_specific(est.approximate):  # the backend's: `estimate`
                lines.append(plain(f"  ≈ approximate: {assumed}", "$warning"))
            if grows:
                lines.append(plain("  grows with use, up to (ceilings, not held now):", "bold"))
                for c in sorted(grows, key=lambda c: (c.device, -c.bytes)):
                    lines.append(component(safe(c.name), c.device, c.bytes, "↑ " + safe(c.formula)))
        diag = row.diagnosis
        if diag is not None:
            excess = diag.excess_bytes  # None: measured is unknown, so is the excess
            style = (
                "$text-muted"
                if excess is None
                else "$warning"
                if excess > 256 * 1024**2
                else "$success"
            )
            lines.append(plain(diag.summary, style))
            for f in diag.findings:
                line = Content("  • ") + plain(f.cause)
                if f.fix:
                    line += Content(" → ") + plain(f.fix, "bold")
                    if f.frees_bytes:
                        line += Content(f" frees {size(f.frees_bytes)}")
                lines.append(line)
                if f.evidence:
                    lines.append(Content("    ") + plain(f.evidence, "$text-muted"))
        for flag in row.flags:
            lines.append(plain(f"⚑ {flag}", "$warning"))
        return Content("\n").join(lines)
