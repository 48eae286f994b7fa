"""The idle live TUI draws nothing that the user would not see change (tui/screens/main.py).

The status line shows a live sample's time to the minute (a seconds clock repainted the
screen every refresh: bench/RESULTS.md, "Second idle pass"), and how long no new sample
has come once that is longer than the refresh explains, so a stuck source is obvious.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
from fake_source import EVENTS, FakeSource, discrete_three
from pilot_helpers import settle, sync
from textual.widget import Widget

from tui.app import VramscopeApp
from tui.format import clock
from tui.messages import FrameReady
from tui.source import Frame

SIZE = (120, 40)
MINUTE_MS = 60_000


def at(frame: Frame, ts_ms: int) -> Frame:
    """``frame`` as sampled at ``ts_ms`` (equal data, a new tick time)."""
    return dataclasses.replace(frame, snapshot=dataclasses.replace(frame.snapshot, ts_ms=ts_ms))


def status_of(app: VramscopeApp) -> str:
    return str(app.screen.query_one("#status").render())


def refreshes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every widget repaint or relayout asked for, by widget class."""
    calls: list[str] = []
    original = Widget.refresh

    def counting(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Widget, "refresh", counting)
    return calls


async def poll_once(pilot, screen) -> None:  # noqa: ANN001
    """The refresh comes: the poll thread reads the source once (hang guard only)."""
    done = screen.polls
    screen._poll_wake.set()
    for _ in range(400):
        if screen.polls > done:
            break
        await pilot.pause(0.01)
    assert screen.polls > done
    await settle(pilot)


class Clock:
    """The app's clock (``VramscopeApp(clock=...)``), moved by the test."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@sync
async def test_equal_frames_within_a_minute_redraw_nothing(models, monkeypatch) -> None:  # noqa: ANN001
    """Noise: new samples a second apart with the same figures: no widget is repainted
    (the status line's minute is the same), the status line's content is the same object."""
    app = VramscopeApp(FakeSource(discrete_three(models, ticks=1), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        first = app.screen.frame
        start = first.ts_ms - first.ts_ms % MINUTE_MS + 5_000
        app.screen.post_message(FrameReady(at(first, start)))
        await settle(pilot)
        status = app.screen.query_one("#status")
        shown, content = status_of(app), status.content
        calls = refreshes(monkeypatch)
        for s in range(1, 6):
            again = at(first, start + 1000 * s)
            app.screen.post_message(FrameReady(again))
            await settle(pilot)
            assert app.screen.frame is again
        assert calls == []
        assert status.content is content and status_of(app) == shown
        assert clock(start, with_date=True)[:-3] in shown  # to the minute: 2026-01-01 10:00


@sync
async def test_a_new_minute_shows_at_the_next_frame(models, monkeypatch) -> None:  # noqa: ANN001
    """Signal: the sample's minute moves on: the status line shows it at once (and only
    the status line is repainted)."""
    app = VramscopeApp(FakeSource(discrete_three(models, ticks=1), EVENTS), refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        first = app.screen.frame
        start = first.ts_ms - first.ts_ms % MINUTE_MS + 59_000
        app.screen.post_message(FrameReady(at(first, start)))
        await settle(pilot)
        assert clock(start, with_date=True)[:-3] in status_of(app)
        calls = refreshes(monkeypatch)
        app.screen.post_message(FrameReady(at(first, start + 2000)))
        await settle(pilot)
        assert clock(start + 2000, with_date=True)[:-3] in status_of(app)
        assert clock(start, with_date=True)[:-3] not in status_of(app)
        assert set(calls) == {"StatusLine"}


@sync
async def test_a_replayed_tick_keeps_its_seconds(models) -> None:  # noqa: ANN001
    """Replay shows the recorded tick to the second (the user steps tick by tick)."""
    snaps = discrete_three(models)
    app = VramscopeApp(FakeSource(snaps, EVENTS), refresh_s=None, at_ms=snaps[1].ts_ms)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "replay" in status_of(app)
        assert clock(snaps[1].ts_ms, with_date=True) in status_of(app)


@sync
async def test_no_new_sample_shows_as_late_and_clears_when_one_comes(models) -> None:  # noqa: ANN001
    """Stale: the source keeps answering the same sample (a stuck collector or a daemon
    that stopped writing): past 3 refreshes the status line says for how long, every
    refresh; a new sample clears it. Never late within 3 refreshes (noise)."""
    snaps = discrete_three(models, ticks=1)
    now = Clock(snaps[0].ts_ms)
    app = VramscopeApp(FakeSource(snaps, EVENTS), refresh_s=3600.0, clock=now)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        first = screen.frame
        now.now_ms += 3 * 3600_000  # 3 refreshes: on time
        await poll_once(pilot, screen)
        screen._on_deadline()  # the staleness timer fires (early, here)
        assert "no new sample" not in status_of(app)
        now.now_ms += 1000
        await poll_once(pilot, screen)  # the same sample again
        screen._on_deadline()
        assert f"no new sample for {3 * 3600 + 1} s" in status_of(app)
        now.now_ms += 1000
        screen._on_deadline()
        assert f"no new sample for {3 * 3600 + 2} s" in status_of(app)
        screen.post_message(FrameReady(at(first, first.ts_ms + 1000)))
        await settle(pilot)
        assert "no new sample" not in status_of(app) and "live" in status_of(app)


@sync
async def test_a_slow_source_is_judged_by_its_own_interval(models) -> None:  # noqa: ANN001
    """Noise: a daemon's database with ticks 60 s apart, read every second, is on time
    for 3 of its intervals, not 3 refreshes; late after that."""
    snaps = discrete_three(models, ticks=1)
    now = Clock(snaps[0].ts_ms)
    app = VramscopeApp(FakeSource(snaps, EVENTS, live=False), refresh_s=3600.0, clock=now)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        first = screen.frame
        interval_ms = 3 * 3600_000 * 10  # ten times the 3-refresh limit
        now.now_ms += interval_ms
        screen.post_message(FrameReady(at(first, first.ts_ms + interval_ms)))
        await settle(pilot)
        now.now_ms += 3 * interval_ms
        screen._show_status()
        assert "database" in status_of(app) and "no new sample" not in status_of(app)
        now.now_ms += 1000
        screen._show_status()
        assert f"no new sample for {3 * interval_ms // 1000 + 1} s" in status_of(app)


class Stuck(FakeSource):
    """A source whose reads after the first block until ``release`` is set (a collector
    stuck in a read of a hung mount)."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.release = threading.Event()

    def latest(self) -> Frame:
        if self.index >= 1:
            assert self.release.wait(60), "hang guard"
        return super().latest()


@sync
async def test_a_poll_that_hangs_shows_as_late(models) -> None:  # noqa: ANN001
    """Stale: the poll thread is stuck in the source: the refresh timer still shows how
    long no new sample has come; once the read returns a new sample, the line is on time."""
    snaps = discrete_three(models, ticks=2)
    now = Clock(snaps[0].ts_ms)
    source = Stuck(snaps, EVENTS)
    app = VramscopeApp(source, refresh_s=3600.0, clock=now)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        screen._poll_wake.set()  # the poll thread blocks in latest()
        now.now_ms += 4 * 3600_000
        screen._on_deadline()  # the staleness timer fires while the poll hangs
        assert f"no new sample for {4 * 3600} s" in status_of(app)
        source.release.set()
        for _ in range(200):  # hang guard: the blocked read returns the second tick
            await pilot.pause(0.05)
            if screen.frame.ts_ms == snaps[1].ts_ms:
                break
        assert screen.frame.ts_ms == snaps[1].ts_ms
        assert "no new sample" not in status_of(app)
