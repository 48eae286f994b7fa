"""Process names, command lines and event messages are text, never markup or terminal
control: real processes named ``[/]x`` and ``ESC ] 0;pwned BEL``, recorded by the real
sampler into a real database, shown by the TUI."""

from __future__ import annotations

from pathlib import Path

from hostile_process import CSI_CLEAR, MARKUP, OSC_TITLE, hostile_server
from pilot_helpers import settle, sync

from collectors.base import Roots
from monitor.analysis.exits_judged import JUDGE
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store
from tui.app import VramscopeApp
from tui.source import StoreSource
from tui.widgets.events_pane import EventsPane
from tui.widgets.models_table import ModelsTable

MODEL = f"{CSI_CLEAR}[b]m[$x].gguf"  # a file name: no "/", so no closing tag
MODEL_SHOWN = "\\x1b[2J\\x9b1m[b]m[$x].gguf"
CONTROL = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)) if c != 0x0A]  # lines joined


def shown_text(widget) -> str:  # noqa: ANN001
    """What the widget draws, line by line (its strips' text)."""
    return "\n".join(widget.render_line(y).text for y in range(widget.size.height))


def record(db: Path) -> tuple[int, int]:
    """Two hostile servers sampled while they run, then once more after they are gone."""
    store = Store.open(db, exit_judge=JUDGE)
    sampler = Sampler(Roots(), enabled=["procfs"])
    try:
        with (
            hostile_server(MARKUP, "-m", f"/nonexistent/{MODEL}") as a,
            hostile_server(OSC_TITLE, "-m", "/nonexistent/plain.gguf") as b,
        ):
            store.write(sampler.sample())
            store.write(sampler.sample())
        store.write(sampler.sample())  # both exited: events named by their comm
    finally:
        sampler.close()
        store.close()
    return a.pid, b.pid


@sync
async def test_hostile_names_from_a_recorded_database_are_shown_literally(tmp_path: Path) -> None:
    pid_markup, pid_osc = record(tmp_path / "v.db")
    source = StoreSource(tmp_path / "v.db")
    frame = source.at(source.ticks(0, 2**62)[1])  # the tick where both still ran
    app = VramscopeApp(source, refresh_s=None, at_ms=frame.ts_ms)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        assert app.is_running
        table = app.screen.query_one(ModelsTable)
        assert {str(pid_markup), str(pid_osc)} <= set(table._rows)
        models = shown_text(table)
        assert MODEL_SHOWN in models, models
        breakdown = shown_text(app.screen.query_one("#breakdown"))
        await pilot.press("l")  # the latest tick: both gone, their exits in the events
        await settle(pilot)
        assert app.is_running
        events = shown_text(app.screen.query_one(EventsPane))
        assert f"[/]x (pid {pid_markup})" in events
        assert f"\\x1b]0;pwned\\x07 (pid {pid_osc})" in events
        screen = models + events + breakdown
        assert not [c for c in CONTROL if c in screen], repr(screen)


@sync
async def test_hostile_names_sampled_live_label_the_history() -> None:
    from tui.source import LiveSource

    with hostile_server(MARKUP, "-m", f"/nonexistent/{MODEL}") as proc:
        app = VramscopeApp(LiveSource(Roots(), ["procfs"]), refresh_s=None)
        async with app.run_test(size=(200, 50)) as pilot:
            await settle(pilot)
            assert str(proc.pid) in app.screen.query_one(ModelsTable)._rows
            await pilot.press("h")  # the history screen labels series by model file name
            await settle(pilot)
            assert app.is_running
            labels = "\n".join(shown_text(w) for w in app.screen.query(".series-label"))
            assert f"{MODEL_SHOWN} (pid {proc.pid})" in labels, labels
            assert not [c for c in CONTROL if c in labels], repr(labels)
