"""The refresh shortcuts draw exactly what a full redraw would.

The models table keeps rendered cells and lines keyed by their values (DataTable alone
re-renders every visible cell when one changes); the screen does not repaint itself for a
new frame; the breakdown repaints only when its text changes. Each test compares what is
on screen with a redraw from empty caches, or with the new values.
"""

from __future__ import annotations

import dataclasses

from fake_source import EVENTS, FakeSource, discrete_three
from pilot_helpers import settle, sync
from textual.widgets import DataTable

from tui.app import VramscopeApp
from tui.format import size
from tui.messages import FrameReady
from tui.widgets.breakdown import Breakdown
from tui.widgets.models_table import ModelsTable

SIZE = (160, 48)
GIB = 1024**3


def drawn(table: ModelsTable) -> list[list[tuple[str, object]]]:
    """The table's content lines as (text, style) segments."""
    return [
        [(seg.text, seg.style) for seg in table.render_line(y)] for y in range(table.size.height)
    ]


def fresh(table: ModelsTable) -> list[list[tuple[str, object]]]:
    """The same lines rendered from empty caches."""
    table._clear_caches()
    return drawn(table)


@sync
async def test_models_table_draws_what_a_full_redraw_draws(models) -> None:  # noqa: ANN001
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ModelsTable)
        rows = list(app.screen.frame.models)
        assert len(rows) == 3
        table.focus()
        await pilot.pause()
        assert drawn(table) == fresh(table)
        steps = [
            (0, 1 * GIB, None),
            (1, 2 * GIB, "down"),
            (0, 1 * GIB, None),
            (2, -GIB // 2, "down"),
            (0, 0, "up"),
            (1, 0, None),
        ]
        for i, (index, extra, key) in enumerate(steps):
            before = drawn(table)
            row = rows[index]
            rows[index] = dataclasses.replace(row, measured_bytes=row.measured_bytes + extra)
            table.show(tuple(rows))
            if key:
                await pilot.press(key)
            await pilot.pause()
            now = drawn(table)
            assert now == fresh(table), f"step {i}: cached lines differ from a full redraw"
            text = "".join(t for line in now for t, _ in line)
            assert size(rows[index].measured_bytes) in text
            if extra and not key:
                assert now != before
        # back to values seen before (cache hits), then unfocused: same as a redraw
        table.show(tuple(app.screen.frame.models))
        app.screen.set_focus(None)
        await pilot.pause()
        assert drawn(table) == fresh(table)


@sync
async def test_one_changed_cell_renders_one_cell(models, monkeypatch) -> None:  # noqa: ANN001
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ModelsTable)
        drawn(table)
        rendered: list[tuple[int, int]] = []
        original = DataTable._render_cell

        def counting(self, row_index, column_index, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            rendered.append((row_index, column_index))
            return original(self, row_index, column_index, *args, **kwargs)

        monkeypatch.setattr(DataTable, "_render_cell", counting)
        rows = list(app.screen.frame.models)
        rows[1] = dataclasses.replace(rows[1], measured_bytes=rows[1].measured_bytes + GIB)
        table.show(tuple(rows))
        drawn(table)
        # measured and Δ of the second row, nothing else
        from tui.widgets.models_table import COLUMNS

        want = sorted((1, COLUMNS.index(c)) for c in ("measured", "Δ"))
        assert sorted(set(rendered)) == want


@sync
async def test_breakdown_follows_new_values_of_the_selected_row(models) -> None:  # noqa: ANN001
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ModelsTable)
        breakdown = app.screen.query_one(Breakdown)
        rows = list(app.screen.frame.models)
        selected = breakdown.row
        assert selected is not None and selected.pid == rows[0].pid
        new = rows[0].measured_bytes + 3 * GIB
        rows[0] = dataclasses.replace(rows[0], measured_bytes=new)
        posted: list[object] = []
        post = table.post_message
        table.post_message = lambda m: posted.append(m) or post(m)  # type: ignore[method-assign]
        # a new frame, as the poll brings it: the screen gives the breakdown the new row
        app.screen.post_message(
            FrameReady(dataclasses.replace(app.screen.frame, models=tuple(rows)))
        )
        await settle(pilot)
        assert table.selected_row() is rows[0]
        assert not [m for m in posted if isinstance(m, ModelsTable.Selected)]
        assert f"measured {size(new)}" in str(breakdown.render())
        lines = breakdown.render_lines(breakdown.region.reset_offset)
        assert any(f"measured {size(new)}" in strip.text for strip in lines)


@sync
async def test_device_panel_repaints_only_for_a_visible_change(models) -> None:  # noqa: ANN001
    from tui.widgets.device_panel import DevicePanel

    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panel = app.screen.query(DevicePanel).first()
        data = panel.data
        assert data is not None and data.picture.device_id == "nvml:GPU-0"
        width = panel._width()

        def shown() -> str:
            return "\n".join(s.text for s in panel.render_lines(panel.region.reset_offset))

        def with_used(used: int):  # noqa: ANN202
            pic = dataclasses.replace(data.picture, used_bytes=used)
            return dataclasses.replace(data, picture=pic)

        repaints: list[bool] = []
        original = panel.refresh

        def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            repaints.append(True)
            return original(*args, **kwargs)

        panel.refresh = counting  # type: ignore[method-assign]
        used = data.picture.used_bytes
        panel.data = with_used(used + 1)  # rounds to the same text: nothing to redraw
        await pilot.pause()
        assert not repaints
        assert size(used) in shown()
        panel.data = with_used(used + 2 * GIB)
        await pilot.pause()
        assert repaints
        assert size(used + 2 * GIB) in shown() and size(used) not in shown()
        fresh_content = panel._content(panel.data, width)
        drawn = panel.render()
        assert (drawn.plain, drawn.spans) == (fresh_content.plain, fresh_content.spans)


@sync
async def test_a_gpu_panel_is_left_alone_when_only_host_ram_moves(models) -> None:  # noqa: ANN001
    """A dedicated GPU's panel does not draw host RAM: a frame where only host RAM moved
    gives it equal data, so it neither redraws nor even rebuilds its text to compare."""
    from fake_source import host

    from tui.widgets.device_panel import DevicePanel, panels_from_frame

    first = discrete_three(models, ticks=1)[0]
    devices = tuple(host(64 * GIB, 20 * GIB) if d.device_id == "host" else d for d in first.devices)
    second = dataclasses.replace(first, ts_ms=first.ts_ms + 1000, devices=devices)
    source = FakeSource([first, second], EVENTS)
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        gpu, host_panel = app.screen.query(DevicePanel)
        assert gpu.data is not None and gpu.data.picture.device_id == "nvml:GPU-0"
        built: list[str] = []
        for panel in (gpu, host_panel):
            original = panel._content

            def counting(data, width, original=original, panel=panel):  # noqa: ANN001, ANN202
                built.append(panel.data.picture.device_id)
                return original(data, width)

            panel._content = counting  # type: ignore[method-assign]
        frame = source.latest()
        assert [d.picture.device_id for d in panels_from_frame(frame)][0] == "nvml:GPU-0"
        assert panels_from_frame(frame)[0] == gpu.data  # equal data: no watcher runs
        app.screen.post_message(FrameReady(frame))
        await settle(pilot)
        assert "nvml:GPU-0" not in built
        assert "host" in built  # the host panel did see its new figure
        text = "\n".join(s.text for s in host_panel.render_lines(host_panel.region.reset_offset))
        assert size(44 * GIB) in text, text


@sync
async def test_a_new_order_moves_the_rows_without_rebuilding_the_table(models) -> None:  # noqa: ANN001
    """A model that grows past another moves up: its row moves (no clear and re-add, so no
    relayout), the cursor stays on the model it was on, the lines match a full redraw."""
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ModelsTable)
        table.focus()
        rows = list(app.screen.frame.models)
        await pilot.press("down")  # on the second model
        await pilot.pause()
        on = table.selected_key()
        assert on == str(rows[1].pid)
        cleared: list[bool] = []
        table.clear = lambda *a, **k: cleared.append(True)  # type: ignore[method-assign]
        grown = dataclasses.replace(rows[2], measured_bytes=rows[2].measured_bytes + 20 * GIB)
        order = [grown, rows[0], rows[1]]
        app.screen.post_message(
            FrameReady(dataclasses.replace(app.screen.frame, models=tuple(order)))
        )
        await settle(pilot)
        assert not cleared
        assert [r.key.value for r in table.ordered_rows] == [str(r.pid) for r in order]
        assert table.selected_key() == on and table.cursor_row == 2
        assert app.screen.query_one(Breakdown).row is order[2]
        first = "".join(seg.text for seg in table.render_line(1))  # under the header
        assert size(grown.measured_bytes) in first
        assert drawn(table) == fresh(table)


@sync
async def test_device_panels_draw_line_by_line_what_a_full_render_draws(models) -> None:  # noqa: ANN001
    """The panels render each line on its own (kept by its text): the same strips as
    rendering the whole panel at once, for a discrete GPU, a unified pool (five lines) and
    an over-full GPU; a new figure repaints only the lines whose text changed."""
    from fake_source import full_gpu, strix_halo
    from textual.visual import Visual

    from tui.widgets.device_panel import DevicePanel

    def whole(panel: DevicePanel) -> list[list[tuple[str, object]]]:
        strips = Visual.to_strips(
            panel, panel.render(), panel.size.width, panel.size.height, panel.visual_style
        )
        return [[(seg.text, seg.style) for seg in strip] for strip in strips]

    def by_line(panel: DevicePanel) -> list[list[tuple[str, object]]]:
        return [
            [(seg.text, seg.style) for seg in panel.render_line(y)]
            for y in range(panel.size.height)
        ]

    for snaps in (discrete_three(models), strix_halo(models), full_gpu(models)):
        app = VramscopeApp(FakeSource(snaps, EVENTS), refresh_s=None)
        async with app.run_test(size=(100, 40)) as pilot:
            await settle(pilot)
            panels = list(app.screen.query(DevicePanel))
            assert panels
            for panel in panels:
                assert by_line(panel) == whole(panel)
            assert {p.size.height for p in panels} >= {4}
            if snaps[0].devices[0].memory_kind == "unified":
                assert 5 in {p.size.height for p in panels}
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panel = app.screen.query(DevicePanel).first()
        data = panel.data
        assert data is not None
        before = [line.plain for line in panel._lines(data, panel._width())]
        first = data.models[0]
        moved = dataclasses.replace(first, estimate_bytes=(first.estimate_bytes or 0) + 2 * GIB)
        panel.data = dataclasses.replace(data, models=(moved, *data.models[1:]))
        after = [line.plain for line in panel._lines(panel.data, panel._width())]
        changed = {y for y, (a, b) in enumerate(zip(before, after, strict=True)) if a != b}
        assert changed and len(changed) < len(before)  # the marker and the legend only
        dirty = {y for r in panel._repaint_regions for y in r.line_range}
        assert dirty == {y + panel.content_offset.y for y in changed}
        await pilot.pause()
        assert by_line(panel) == whole(panel)
        assert size(first.estimate_bytes + 2 * GIB) in after[3]
        on_screen = [strip.text for strip in panel.render_lines(panel.region.reset_offset)]
        assert after[3][:30] in on_screen[3]


@sync
async def test_breakdown_relayouts_only_when_its_height_changes(models) -> None:  # noqa: ANN001
    """A longer line that wraps to the same height repaints the breakdown in place; a new
    line (a flag) changes its height and lays the screen out again."""
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        breakdown = app.screen.query_one(Breakdown)
        row = breakdown.row
        assert row is not None and row.measured_bytes is not None
        layouts: list[bool] = []
        original = breakdown.refresh

        def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            layouts.append(bool(kwargs.get("layout")))
            return original(*args, **kwargs)

        breakdown.refresh = counting  # type: ignore[method-assign]
        height = breakdown.size.height
        longer = dataclasses.replace(row, measured_bytes=row.measured_bytes + 100 * GIB)
        assert len(size(longer.measured_bytes)) > len(size(row.measured_bytes))
        breakdown.row = longer
        await pilot.pause()
        assert layouts == [False]
        assert f"measured {size(longer.measured_bytes)}" in "\n".join(
            strip.text for strip in breakdown.render_lines(breakdown.region.reset_offset)
        )
        flagged = dataclasses.replace(longer, flags=(*longer.flags, "a new flag"))
        breakdown.row = flagged
        await pilot.pause()
        assert layouts[:2] == [False, True]  # (then Textual's own, for the new size)
        assert breakdown.size.height == height + 1


@sync
async def test_a_device_filling_steadily_shows_its_time_to_oom(models) -> None:  # noqa: ANN001
    """A GPU whose snapshot carries a time-to-OOM forecast says so on its panel's head line
    ("OOM in ~14 min"); the other devices, with no forecast, say nothing of it."""
    from collectors.base import OomForecast
    from tui.widgets.device_panel import DevicePanel

    snaps = discrete_three(models)
    gpu = snaps[0].devices[0].device_id
    ahead = OomForecast(gpu, 20 * GIB, 24 * GIB, 5 * 2**20, 14 * 60.0)
    snaps = [dataclasses.replace(s, time_to_oom=(ahead,)) for s in snaps]
    app = VramscopeApp(FakeSource(snaps, EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        heads = {
            p.data.picture.device_id: p._lines(p.data, p._width())[0].plain
            for p in app.screen.query(DevicePanel)
            if p.data is not None
        }
    assert "OOM in ~14 min" in heads[gpu]
    assert not [h for d, h in heads.items() if d != gpu and "OOM in" in h]
