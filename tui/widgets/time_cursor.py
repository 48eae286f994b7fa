"""The replay time cursor: where we are among the recorded ticks."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from tui.format import clock


class TimeCursor(Widget):
    """A one-line track of the recorded ticks with the current one marked."""

    DEFAULT_CSS = """
    TimeCursor { height: 1; background: $boost; padding: 0 1; }
    """

    ticks: reactive[tuple[int, ...]] = reactive((), layout=False)
    """Recorded tick timestamps around the cursor (epoch ms)."""
    position: reactive[int | None] = reactive(None)
    """The shown tick (epoch ms)."""

    def render(self) -> Content:
        if self.position is None:
            return Content("replay: no tick")
        label = f" REPLAY {clock(self.position, with_date=True)} "
        width = max(10, self.size.width - len(label) - 2)
        track = ["─"] * width
        if self.ticks:
            lo, hi = self.ticks[0], self.ticks[-1]
            span = max(1, hi - lo)
            pos = round((self.position - lo) / span * (width - 1))
            track[max(0, min(width - 1, pos))] = "●"
        return Content.styled(label, "bold $warning") + Content.styled(
            "".join(track), "$text-muted"
        )
