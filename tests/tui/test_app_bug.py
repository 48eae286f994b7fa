"""A bug in the running TUI (issue 30 item 5): the app ends without Textual's traceback
(rendered with locals: a token may be one) and tui.app._run raises it again for the CLI's
edge, which prints it as one line, exit 70 (tests/monitor/test_errors.py)."""

from __future__ import annotations

import functools

import pytest
from fake_source import FakeSource, no_gpu
from pilot_helpers import settle, sync
from textual.app import App
from textual.pilot import Pilot

from tui import app as app_mod
from tui.app import VramscopeApp
from tui.source import SourceError


def test_a_bug_in_the_running_app_ends_it_and_is_raised_for_the_edge(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    app = VramscopeApp(FakeSource(no_gpu()), refresh_s=None)

    def broken_help() -> None:
        raise KeyError("planted in the help action")

    monkeypatch.setattr(app, "action_help", broken_help)

    async def press_help(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")

    headless = functools.partial(App.run, app, headless=True, size=(80, 24), auto_pilot=press_help)
    monkeypatch.setattr(app, "run", headless)
    with pytest.raises(KeyError, match="planted in the help action"):
        app_mod._run(app)
    assert isinstance(app.bug, KeyError)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "planted" not in out + err


def test_a_quit_is_no_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    app = VramscopeApp(FakeSource(no_gpu()), refresh_s=None)

    async def quit_(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("q")

    headless = functools.partial(App.run, app, headless=True, size=(80, 24), auto_pilot=quit_)
    monkeypatch.setattr(app, "run", headless)
    assert app_mod._run(app) == 0
    assert app.bug is None


class _BuggySource(FakeSource):
    def latest(self):  # noqa: ANN201
        raise KeyError("n_ctx")


class _GoneSource(FakeSource):
    def latest(self):  # noqa: ANN201
        raise SourceError("no database at /nowhere/vramscope.db")


@sync
async def test_a_bug_reading_the_source_says_so_on_the_status_line() -> None:
    """The monitor outlives a failed read; a bug's line says it is one, the user's does not."""
    for source, says in (
        (_BuggySource(no_gpu()), "internal error (this is a bug): KeyError: 'n_ctx'"),
        (_GoneSource(no_gpu()), "no database at /nowhere/vramscope.db"),
    ):
        app = VramscopeApp(source, refresh_s=None)
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(pilot)
            status = str(app.screen.query_one("#status").render())
        assert says in status, status
        assert ("this is a bug" in status) == isinstance(source, _BuggySource), status
