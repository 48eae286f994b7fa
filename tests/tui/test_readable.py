"""The TUI readable with 2 GPUs, 12 models and long names (issue 34, Terminal): the
models column sized to the longest current name and capped so Δ, ctx×slots, cache, KV and
engine stay; the selection follows its model when rows re-sort; event messages whole
(wrapped); the breakdown names devices as the panels do."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fake_source import (
    GPU_B,
    LONG_EVENTS,
    T0,
    FakeSource,
    discrete_three,
    long_named,
    two_gpus_twelve,
)
from pilot_helpers import settle, sync

from tui.app import VramscopeApp
from tui.screens.history import fits
from tui.widgets.breakdown import Breakdown
from tui.widgets.events_pane import EventsPane
from tui.widgets.models_table import COLUMNS, ModelsTable


@pytest.fixture(scope="module")
def long_files(models, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # noqa: ANN001
    return long_named(models, tmp_path_factory.mktemp("long"))


def widths(table: ModelsTable) -> dict[str, int]:
    return {c.key.value: c.get_render_width(table) for c in table.columns.values()}


async def idle(pilot) -> None:  # noqa: ANN001
    await settle(pilot)
    for _ in range(6):  # DataTable sets its column widths on idle
        await pilot.pause(0.05)


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (200, 50)])
@sync
async def test_every_models_column_fits_and_names_end_in_an_ellipsis(long_files, size) -> None:
    app = VramscopeApp(FakeSource(two_gpus_twelve(long_files), LONG_EVENTS), refresh_s=None)
    async with app.run_test(size=size) as pilot:
        await idle(pilot)
        table = app.screen.query_one(ModelsTable)
        assert table.row_count == 12
        shown = widths(table)
        assert set(shown) == set(COLUMNS)
        if size[0] >= 120:  # every column on screen, none cut
            assert sum(shown.values()) <= table.scrollable_content_region.width
        else:  # 80 columns: model, measured, estimate, Δ and flags at least
            first = list(COLUMNS).index("flags") + 1
            assert sum(list(shown.values())[:first]) <= table.scrollable_content_region.width
        assert shown["Δ"] >= len("-5.0G") + 2
        longest = max(len(n) for n in long_files)
        for key in table.rows:
            name = str(table.get_cell(key, "model"))
            assert name in long_files or ("…" in name and len(name) < longest)
            assert name.endswith(".gguf")  # cut in the middle: the end tells them apart
        if size[0] >= 200:  # room for the whole names
            assert all(str(table.get_cell(k, "model")) in long_files for k in table.rows)


@sync
async def test_the_models_column_shrinks_when_the_long_names_go(long_files, models) -> None:
    """A tick with long-named servers, then one with only short names: the column
    shrinks to the longest current name (DataTable's auto width only ever grows)."""
    (short,) = discrete_three(models, ticks=1)
    snaps = [two_gpus_twelve(long_files, ticks=1)[0], replace(short, ts_ms=T0 + 5000)]
    app = VramscopeApp(FakeSource(snaps, LONG_EVENTS), refresh_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await idle(pilot)
        table = app.screen.query_one(ModelsTable)
        wide = widths(table)["model"]
        await pilot.press("r")
        await idle(pilot)
        assert table.row_count == 3
        names = [str(table.get_cell(k, "model")) for k in table.rows]
        assert widths(table)["model"] == max(map(len, names)) + 2 < wide


@sync
async def test_the_selection_stays_on_its_model_when_rows_resort(long_files) -> None:
    """Tick 2: the second server grows by 2 GiB and moves to the top; the cursor was on
    another model and stays on it."""
    app = VramscopeApp(FakeSource(two_gpus_twelve(long_files), LONG_EVENTS), refresh_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await idle(pilot)
        table = app.screen.query_one(ModelsTable)
        table.focus()
        await pilot.press("down", "down", "down")
        await pilot.pause()
        chosen = table.selected_row()
        assert chosen is not None and chosen.pid != 6101
        order = list(table._rows)
        await pilot.press("r")
        await idle(pilot)
        assert list(table._rows) != order and list(table._rows)[0] == "6101"  # re-sorted
        after = table.selected_row()
        assert after is not None and after.pid == chosen.pid
        assert app.screen.query_one(Breakdown).row.pid == chosen.pid


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
@sync
async def test_event_messages_wrap_whole_in_their_pane(long_files, size) -> None:
    app = VramscopeApp(FakeSource(two_gpus_twelve(long_files), LONG_EVENTS), refresh_s=None)
    async with app.run_test(size=size) as pilot:
        await idle(pilot)
        pane = app.screen.query_one(EventsPane)
        assert pane.row_count == len(LONG_EVENTS)
        region = pane.scrollable_content_region.width
        total = sum(c.get_render_width(pane) for c in pane.columns.values())
        assert total <= region, (total, region)
        first = pane.get_row_at(0)  # newest first: the surprise
        message = first[-1].plain
        assert "memory surprise" in message and "(context 8192 x 2 slots, KV f16)" in message
        assert GPU_B not in message and "GPU1 RTX 4090" in message  # one device name
        assert pane.rows[next(iter(pane.rows))].height > 1  # wrapped, not cut


@sync
async def test_the_breakdown_names_devices_as_the_panels_do(long_files) -> None:
    app = VramscopeApp(FakeSource(two_gpus_twelve(long_files), LONG_EVENTS), refresh_s=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await idle(pilot)
        text = str(app.screen.query_one(Breakdown).render())
        assert "nvml:" not in text and "GPU-3f" not in text
        assert "GPU0" in text or "GPU1" in text


@sync
async def test_at_80x24_with_gpus_the_breakdown_and_the_events_show(long_files) -> None:
    """Two GPUs and twelve models at 80x24: the breakdown shows its model and components
    (not only its border), the events pane its newest message."""
    app = VramscopeApp(FakeSource(two_gpus_twelve(long_files), LONG_EVENTS), refresh_s=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await idle(pilot)
        box = app.screen.query_one("#breakdown-box")
        assert box.content_region.height >= 4, box.content_region
        lines = str(app.screen.query_one(Breakdown).render()).splitlines()
        assert lines[0].startswith("qwen3-coder") and lines[1].lstrip().startswith("weights")
        pane = app.screen.query_one(EventsPane)
        assert pane.content_region.height >= 2, pane.content_region
        assert pane.row_count == len(LONG_EVENTS)


def _in_cgroup(snap, max_bytes: int, current_bytes: int, reclaimable_bytes: int):  # noqa: ANN001, ANN202
    """``snap`` with its servers in llama-swap's unit under ``memory.max = max_bytes``."""
    from collectors.base import CgroupMemory, ProcessCgroup

    limit = CgroupMemory(
        "/system.slice/llama-swap.service", max_bytes, None, current_bytes, reclaimable_bytes
    )
    return replace(snap, cgroups=tuple(ProcessCgroup(p.pid, limit) for p in snap.processes))


def _host_header(snap) -> str:  # noqa: ANN001
    from tui.source import FrameBuilder
    from tui.widgets.device_panel import DevicePanel, panels_from_frame

    (data,) = [d for d in panels_from_frame(FrameBuilder().build(snap)) if d.label == "host RAM"]
    return DevicePanel(data)._lines(data, 160)[0].plain


def test_the_header_says_the_servers_cgroup_room_where_it_binds(long_files) -> None:
    """MemAvailable is 90 GiB but the servers' unit may charge 8 GiB and holds 7.5 GiB,
    200 MiB of it clean page cache (memcg reclaims that first): room 712 MiB, and the
    cgroup's is what the header says."""
    from fake_source import GIB, MIB

    (snap,) = two_gpus_twelve(long_files, ticks=1)
    assert "room 89.5G (MemAvailable)" in _host_header(snap)  # no limit: MemAvailable
    tight = _in_cgroup(snap, 8 * GIB, int(7.5 * GIB), 200 * MIB)
    # room = 8 GiB - (7.5 GiB - 200 MiB) = 712 MiB, less the 512 MiB margin it leaves
    assert "room 200M (cgroup /system.slice/llama-swap.service)" in _host_header(tight)


def test_a_roomy_cgroup_leaves_the_header_at_memavailable(long_files) -> None:
    """The noise case: a unit with 200 GiB of room does not bind under 90 GiB available."""
    from fake_source import GIB

    (snap,) = two_gpus_twelve(long_files, ticks=1)
    roomy = _in_cgroup(snap, 256 * GIB, 56 * GIB, 0)
    assert "room 89.5G (MemAvailable)" in _host_header(roomy)


@sync
async def test_the_whatif_verdict_names_devices_as_the_panels_do(long_files, monkeypatch) -> None:  # noqa: ANN001
    name = sorted(long_files)[0]
    monkeypatch.chdir(Path(long_files[name]).parent)
    app = VramscopeApp(FakeSource(two_gpus_twelve(long_files), LONG_EVENTS), refresh_s=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await idle(pilot)
        await pilot.press("w")
        await pilot.pause()
        app.screen.query_one("#command").value = f"llama-server -m {name} -c 8192"
        await pilot.press("enter")
        await idle(pilot)
        text = str(app.screen.query_one("#verdict").render())
        assert "  GPU0 RTX 4090: needs" in text and "  GPU1 RTX 4090: needs" in text
        assert "nvml:" not in text


@pytest.mark.parametrize("width", [76, 196])
def test_device_panel_lines_fit_and_a_long_name_is_cut_in_its_middle(long_files, width) -> None:  # noqa: ANN001
    """The legend's first model keeps its figures (GPU, measured, est) at 80 columns: its
    name is cut in the middle with "…" instead of the line being cut at the edge."""
    from rich.cells import cell_len

    from tui.source import FrameBuilder
    from tui.widgets.device_panel import DevicePanel, panels_from_frame

    (snap,) = two_gpus_twelve(long_files, ticks=1)
    for data in panels_from_frame(FrameBuilder().build(snap)):
        lines = [line.plain for line in DevicePanel(data)._lines(data, width)]
        assert all(cell_len(line) <= width for line in lines), lines
        legend = next(line for line in lines if line.startswith("■ "))
        assert " est " in legend, legend
        if width < 100:
            assert "…" in legend.split(" GPU ")[0].split(" anon+shm ")[0], legend
        else:
            assert legend.split(" ")[1] in long_files, legend  # the whole name


@sync
async def test_history_labels_at_80x24_tell_twelve_long_names_apart(long_files) -> None:  # noqa: ANN001
    """The history screen's list (issue 34): devices by the main screen's names, each
    model's file name cut in the middle as the models table does (its quant and shard
    number stay) with its pid whole: twelve names sharing a 40-character start read apart."""
    app = VramscopeApp(FakeSource(two_gpus_twelve(long_files), LONG_EVENTS), refresh_s=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await idle(pilot)
        await pilot.press("h")
        await idle(pilot)
        labels = [str(w.render()) for w in app.screen.query(".series-label")]
        screen = app.export_screenshot()
        shown = str(app.screen.query_one("#readout").render())
    # the cursor's readout: its two lines, the series past them counted, none cut
    assert shown.endswith(" more") and " · +" in shown, shown
    assert fits(shown, 78) and shown.startswith("2026-01-01") and "GPU0 RTX 4090" in shown
    # the time axis in whole minutes ending at "now", not the plot's fifths (-3.8, -1.2)
    assert "-3.8" not in screen and "-1.2" not in screen and ">now<" in screen.replace("&#160;", "")
    devices = [x for x in labels if "(pid " not in x]
    models = [x.split("  ")[0] for x in labels if "(pid " in x]
    assert {x.split("  ")[0] for x in devices} == {"GPU0 RTX 4090", "GPU1 RTX 4090", "host RAM"}
    assert len(models) == 12 and len(set(models)) == 12, models
    for i, name in enumerate(sorted(models)):
        assert "…" in name and f"-{i:02d}.gguf" in name, name
        assert name.endswith(f" (pid {6100 + i})"), name
    assert all(len(x) <= 80 for x in labels) and not any("nvml:" in x for x in labels)
