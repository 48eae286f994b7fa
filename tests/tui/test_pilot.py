"""Behaviour of the TUI on a FakeSource, driven with Pilot."""

from __future__ import annotations

import threading

import pytest
from fake_source import EVENTS, T0, FakeSource, discrete_three, full_gpu, no_gpu
from pilot_helpers import settle, sync

from tui.app import VramscopeApp
from tui.screens.main import MainScreen
from tui.screens.whatif import WhatIfScreen
from tui.source import SourceError
from tui.widgets.breakdown import Breakdown
from tui.widgets.device_panel import DevicePanel
from tui.widgets.models_table import ModelsTable
from tui.widgets.time_cursor import TimeCursor

SIZE = (160, 48)


def main_screen(app: VramscopeApp) -> MainScreen:
    screen = app.screen_stack[1] if len(app.screen_stack) > 1 else app.screen
    assert isinstance(screen, MainScreen)
    return screen


@sync
async def test_refresh_moves_to_the_next_tick_off_the_event_loop(models) -> None:
    source = FakeSource(discrete_three(models, ticks=3), EVENTS)
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = main_screen(app)
        assert screen.frame is not None and screen.frame.ts_ms == T0
        assert len(app.screen.query(DevicePanel)) == 2  # the GPU and host RAM
        await pilot.press("r")
        await settle(pilot)
        assert screen.frame.ts_ms == T0 + 1000
        main = threading.main_thread().name
        assert source.calls and all(not c.endswith(":" + main) for c in source.calls)


@sync
async def test_timer_refresh_polls_again(models) -> None:
    source = FakeSource(discrete_three(models, ticks=3))
    app = VramscopeApp(source, refresh_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(200):  # the timer's polls run on a thread of their own: poll
            await pilot.pause(0.05)
            frame = main_screen(app).frame
            if frame is not None and frame.ts_ms == T0 + 2000:
                break
        await settle(pilot)
        assert source.index >= 3
        assert main_screen(app).frame.ts_ms == T0 + 2000
        # the first frame on a worker; every timed refresh on one long-lived thread, not a
        # Textual worker each (a worker costs the event loop ~1 ms: bench/RESULTS.md)
        threads = [c.split(":", 1)[1] for c in source.calls if c.startswith("latest:")]
        assert len(threads) >= 3 and set(threads[1:]) == {"vramscope-poll"}, threads


@sync
async def test_selecting_a_row_shows_its_breakdown_and_diagnosis(models) -> None:
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ModelsTable)
        assert table.row_count == 3
        first = app.screen.query_one(Breakdown).row
        assert first is not None and first.pid == 4103  # largest first
        table.focus()
        await pilot.press("down", "down")
        await pilot.pause()
        row = app.screen.query_one(Breakdown).row
        assert row is not None and row.pid == 4102
        assert "draft KV in f16" in row.flags
        text = str(app.screen.query_one(Breakdown).render())
        assert "draft_kv" in text and "-ctkd q8_0 -ctvd q8_0" in text
        assert row.diagnosis is not None
        await pilot.press("z")  # zoom the breakdown (80x24 terminals), and back
        await pilot.pause()
        assert app.screen.maximized is app.screen.query_one("#breakdown-box")
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is None


@sync
async def test_whatif_dialog_gives_a_verdict_for_a_pasted_command(models) -> None:
    app = VramscopeApp(FakeSource(full_gpu(models)), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, WhatIfScreen)
        q8 = models["qwen3-8b-q8_0.gguf"]
        app.screen.query_one("#command").value = f"llama-server -m {q8} -c 32768 -np 4"
        await pilot.press("enter")
        await settle(pilot)
        dialog = app.screen
        assert dialog.prediction is not None
        assert dialog.prediction.verdict == "oom"
        assert "OOM" in str(dialog.query_one("#verdict").render())
        assert dialog.prediction.fixes
        assert dialog.query(DevicePanel)  # the projected bar
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


@sync
async def test_whatif_rejects_a_command_that_loads_no_model(models) -> None:
    app = VramscopeApp(FakeSource(full_gpu(models)), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("w")
        app.screen.query_one("#command").value = "ls -l"
        await pilot.press("enter")
        await settle(pilot)
        assert "cannot predict" in str(app.screen.query_one("#verdict").render())


@sync
async def test_replay_scrubbing_changes_the_shown_tick(models) -> None:
    source = FakeSource(discrete_three(models, ticks=5), EVENTS, live=False)
    app = VramscopeApp(source, refresh_s=None, at_ms=T0 + 2500)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = main_screen(app)
        assert screen.frame.ts_ms == T0 + 2000
        cursor = app.screen.query_one(TimeCursor)
        assert cursor.display and cursor.position == T0 + 2000
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert screen.frame.ts_ms == T0 + 1000
        await pilot.press("right_square_bracket", "right_square_bracket")
        await settle(pilot)
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert screen.frame.ts_ms == T0 + 4000
        await pilot.press("l")  # back to live
        await settle(pilot)
        assert screen.replay_ts is None and not cursor.display


@sync
async def test_opening_an_event_replays_its_moment(models) -> None:
    source = FakeSource(discrete_three(models, ticks=3), EVENTS)
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        events = app.screen.query_one("#events")
        events.focus()
        await pilot.press("enter")  # the newest event
        await settle(pilot)
        screen = main_screen(app)
        assert screen.replay_ts == EVENTS[-1].ts_ms
        assert screen.frame.ts_ms == T0  # the first tick stands for earlier moments


@pytest.mark.parametrize("scenario", ["discrete", "none"])
@sync
async def test_resize_between_80x24_and_160x48(models, scenario: str) -> None:
    snaps = discrete_three(models) if scenario == "discrete" else no_gpu()
    app = VramscopeApp(FakeSource(snaps, EVENTS), refresh_s=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for size in [(160, 48), (80, 24), (160, 48)]:
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert app.screen.size.width == size[0]
        await pilot.press("h")
        await settle(pilot)
        await pilot.resize_terminal(80, 24)
        await pilot.press("2")
        await settle(pilot)
        assert app.screen.query(".series-line")


@sync
async def test_history_windows_up_to_30_days(models) -> None:
    source = FakeSource(discrete_three(models), EVENTS)
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        for key in "12345":
            await pilot.press(key)
            await settle(pilot)
        title = str(app.screen.query_one("#history-title").render())
    day = 86_400_000
    assert source.windows == [300_000, 3600_000, 86_400_000, 7 * day, 30 * day]
    assert "last 30d" in title and "1-5" in title


@sync
async def test_history_names_devices_as_the_main_screen_does(models) -> None:
    """Issue 20: devices by their short name (GPU0 RTX 4090, host RAM), not their id."""
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        labels = [str(w.render()) for w in app.screen.query(".series-label")]
        readout = str(app.screen.query_one("#readout").render())
    assert any(label.startswith("GPU0 RTX 4090  ") for label in labels), labels
    assert any(label.startswith("host RAM  ") for label in labels), labels
    assert not any("nvml:" in label for label in labels), labels
    assert "GPU0 RTX 4090 " in readout and "nvml:" not in readout, readout


class BrokenSource(FakeSource):
    def latest(self):  # noqa: ANN201
        raise SourceError("no database at /nowhere/vramscope.db")


@sync
async def test_an_unreachable_database_is_a_message_not_a_traceback() -> None:
    app = VramscopeApp(BrokenSource(no_gpu()), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        status = str(app.screen.query_one("#status").render())
        assert "no database at /nowhere/vramscope.db" in status
    assert app.return_code in (None, 0)


@sync
async def test_quit_closes_the_source(models) -> None:
    source = FakeSource(no_gpu())
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
    assert source.closed


@sync
async def test_arrows_move_in_the_models_table_from_the_start(models) -> None:
    """Issue 20: the arrows scrolled the devices pane until Tab was pressed."""
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.focused, ModelsTable)
        await pilot.press("down")  # no Tab first
        await pilot.pause()
        row = app.screen.query_one(Breakdown).row
        assert row is not None and row.pid != 4103  # moved off the first (largest) row


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
@sync
async def test_question_mark_shows_every_key_and_symbol_and_escape_returns(
    models, size: tuple[int, int]
) -> None:
    from tui.screens.help import HelpScreen

    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-text").render())
        # every key of the main screen, each glyph the device bar draws, each column
        for b in MainScreen.BINDINGS:
            key = b.key_display or b.key
            assert f"\n  {key} " in text or f"\n  {key}\n" in text, key
        for glyph in "█▼▓▒▞░╳":
            assert f"\n  {glyph} " in text, glyph
        for column in ("ctx×slots", "measured", "estimate", "Δ", "KV", "flags"):
            assert f"\n  {column} " in text, column
        assert "⚑ draft KV in f16" in text and "‼" in text
        # a long description wraps under itself, never back to the first column, where
        # only the section titles start
        titles = {ln for ln in text.splitlines() if ln and not ln.startswith(" ")}
        assert len(titles) == 9, titles
        assert all(len(ln) <= size[0] for ln in text.splitlines()), size
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


@sync
async def test_the_breakdown_lists_load_components_first_and_growth_as_ceilings(models) -> None:
    """Issue 20: the prompt cache ceiling ("8.0G↑") came above the weights and KV."""
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        text = str(app.screen.query_one(Breakdown).render())
        row = app.screen.query_one(Breakdown).row
    from tui.format import size

    lines = text.splitlines()
    names = [ln.split()[0] for ln in lines[1:] if ln.startswith("  ") and ln.split()]
    assert "cache_ram" in names and "weights" in names and "at" in names
    assert names.index("weights") < names.index("at") < names.index("cache_ram")
    assert any("ceilings, not held now" in ln for ln in lines)
    # the "at load" total is the load-time sum: the growth ceiling is not in it
    assert row is not None and row.estimate is not None
    total = next(ln for ln in lines if ln.startswith("  at load"))
    assert total.split()[2] == size(row.estimate.total_bytes())
    assert row.estimate.total_bytes() < row.estimate.total_bytes(include_growth=True)


@sync
async def test_devices_are_named_gpu0_with_their_id_on_demand(models) -> None:
    """Issue 20: devices were named by their long id ('nvml:GPU-3f2c...')."""
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        heads = [str(p.render()).splitlines()[0] for p in app.screen.query(DevicePanel)]
        assert heads[0].startswith("GPU0 RTX 4090 ") and "nvml:" not in heads[0], heads
        assert heads[1].startswith("host RAM "), heads
        await pilot.press("i")
        await pilot.pause()
        heads = [str(p.render()).splitlines()[0] for p in app.screen.query(DevicePanel)]
        assert heads[0].startswith("GPU0 RTX 4090 (nvml:GPU-0)"), heads


def test_short_device_names() -> None:
    from tui.format import short_device_name

    assert short_device_name("nvml:GPU-3f2c", "NVIDIA GeForce RTX 4060", 0) == "GPU0 RTX 4060"
    assert short_device_name("drm:0000:03:00.0", "AMD Radeon RX 7900 XTX", 1) == (
        "GPU1 RX 7900 XTX"
    )
    assert short_device_name("drm:0000:c5:00.0", "Strix Halo", 0) == "GPU0 Strix Halo"
    assert short_device_name("nvml:x", None, 2) == "GPU2"
    assert short_device_name("host", "Host RAM", None) == "host RAM"
    assert "\x1b" not in short_device_name("nvml:x", "evil\x1b[2J", 0)


@sync
async def test_the_device_header_shows_temperature_power_and_utilisation(models) -> None:
    """Issue 20: they were only in JSON. The fake GPU reports 61 °C, 40 % busy and a
    10501 MHz memory clock and no power figure: the header shows those and no made-up
    power."""
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        head = str(app.screen.query(DevicePanel).first().render()).splitlines()[0]
    assert "61°C" in head and "40% busy" in head, head
    assert "40% busy mem 10501MHz" in head, head
    assert "W " not in head and not head.rstrip().endswith("W"), head


@sync
async def test_a_narrow_header_drops_the_memory_clock_whole(models) -> None:
    """On 80 columns the clock does not fit: it is left out, never cut to 'mem …'."""
    app = VramscopeApp(FakeSource(discrete_three(models), EVENTS), refresh_s=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        head = str(app.screen.query(DevicePanel).first().render()).splitlines()[0]
    assert "61°C 40% busy" in head, head
    assert "mem" not in head and "…" not in head, head
