"""The models table leaves equal rows alone (tui/widgets/models_table.py ``show``).

An idle box sends the same rows every refresh; the table then neither fits its model
column again nor compares or updates a cell. A changed value still shows at once.
"""

from __future__ import annotations

import dataclasses

import pytest
from fake_source import EVENTS, FakeSource, discrete_three
from pilot_helpers import settle, sync
from textual.widgets import DataTable

from tui.app import VramscopeApp
from tui.format import clock, size
from tui.messages import FrameReady
from tui.source import Frame
from tui.widgets.models_table import ModelsTable

SIZE = (160, 48)
GIB = 1024**3


def later(frame: Frame, s: int, **changes: object) -> Frame:
    """``frame`` ``s`` seconds on (a new tick time), with ``changes``."""
    snapshot = dataclasses.replace(frame.snapshot, ts_ms=frame.ts_ms + 1000 * s)
    return dataclasses.replace(frame, snapshot=snapshot, **changes)


def text(table: ModelsTable) -> str:
    return "\n".join(
        "".join(seg.text for seg in table.render_line(y)) for y in range(table.size.height)
    )


def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every DataTable call that changes the table's content, by name."""
    calls: list[str] = []
    for name in ("update_cell", "clear", "add_row"):
        original = getattr(DataTable, name)

        def counting(self, *args, _name=name, _original=original, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(DataTable, name, counting)
    return calls


@sync
async def test_an_unchanged_frame_updates_nothing_in_the_table(models, monkeypatch) -> None:  # noqa: ANN001
    """Noise: a new frame (a new tick time) with equal rows: no cell updated, no row added
    or cleared, no column refitted; the screen's status line shows the last frame's minute."""
    frames = discrete_three(models, ticks=1)
    source = FakeSource(frames, EVENTS)
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ModelsTable)
        before, skipped = text(table), table.shows_skipped
        calls = spy(monkeypatch)
        fitted: list[int] = []
        fit = table._fit_model_column
        table._fit_model_column = lambda rows: fitted.append(1) or fit(rows)  # type: ignore[method-assign]
        frame = app.screen.frame
        for i in range(1, 4):
            copies = tuple(dataclasses.replace(r) for r in frame.models)  # equal, not the same
            again = later(frame, i, models=copies)
            app.screen.post_message(FrameReady(again))
            await settle(pilot)
            assert app.screen.frame is again
        assert calls == [] and fitted == []
        assert table.shows_skipped == skipped + 3
        assert text(table) == before
        status = app.screen.query_one("#status")
        assert clock(again.ts_ms, with_date=True)[:-3] in str(status.render())


@sync
async def test_a_changed_value_shows_at_the_next_frame(models) -> None:  # noqa: ANN001
    """Signal: after equal frames, one changed measurement is in the table at once."""
    source = FakeSource(discrete_three(models, ticks=1), EVENTS)
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ModelsTable)
        frame = app.screen.frame
        app.screen.post_message(FrameReady(later(frame, 1)))
        await settle(pilot)
        skipped = table.shows_skipped
        rows = list(frame.models)
        grown = rows[1].measured_bytes + 3 * GIB
        assert size(grown) not in text(table)
        rows[1] = dataclasses.replace(rows[1], measured_bytes=grown)
        changed = later(frame, 2, models=tuple(rows))
        app.screen.post_message(FrameReady(changed))
        await settle(pilot)
        assert table.shows_skipped == skipped
        assert size(grown) in text(table)


@sync
async def test_a_new_width_fits_the_same_rows_again(models) -> None:  # noqa: ANN001
    """Signal: equal rows at a new terminal width are laid out for that width (the model
    column is refitted), not left as they were."""
    source = FakeSource(discrete_three(models, ticks=1), EVENTS)
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ModelsTable)
        rows = app.screen.frame.models
        table.show(rows)
        skipped = table.shows_skipped
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        table.show(rows)
        assert table.shows_skipped <= skipped + 1  # the resize itself fitted them
        assert table.size.width <= 80
        assert all(len(line) <= 80 for line in text(table).splitlines())
