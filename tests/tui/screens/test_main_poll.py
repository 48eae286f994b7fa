"""The live poll thread and the staleness timer (tui/screens/main.py).

The poll thread keeps its own time and posts a frame only when something the user can
see would change, so an idle box costs the event loop nothing per refresh; a still but
new sample is on time, a poll that hangs shows as late at its deadline. Counts only:
the refresh is real (50 ms) and every wait has a generous hang guard.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable

import pytest
from fake_source import EVENTS, GIB, FakeSource, discrete_three
from pilot_helpers import settle, sync
from textual.widget import Widget

from collectors.base import Snapshot
from tui.app import VramscopeApp
from tui.source import Frame

SIZE = (120, 40)
REFRESH_S = 0.05
MINUTE_MS = 60_000


def start_of(snap: Snapshot) -> int:
    """A tick time early in ``snap``'s minute (samples 0.1 s apart stay in it for 60 s)."""
    return snap.ts_ms - snap.ts_ms % MINUTE_MS + 1000


def grown(snap: Snapshot, extra_bytes: int) -> Snapshot:
    """``snap`` with pid 4101's VRAM (and the GPU's used bytes) ``extra_bytes`` larger."""
    memory = tuple(
        dataclasses.replace(m, vram_bytes=m.vram_bytes + extra_bytes)
        if m.pid == 4101 and m.vram_bytes
        else m
        for m in snap.memory
    )
    devices = tuple(
        dataclasses.replace(d, used_bytes=d.used_bytes + extra_bytes, free_bytes=None)
        if d.device_id == "nvml:GPU-0"
        else d
        for d in snap.devices
    )
    return dataclasses.replace(snap, memory=memory, devices=devices)


class Still(FakeSource):
    """A still box: the same figures every read, each a new sample 0.1 s after the last;
    from read ``change_at`` on, ``changed``'s figures. ``hang`` blocks reads while set
    (a collector stuck in a read of a hung mount)."""

    def __init__(self, snap: Snapshot, changed: Snapshot | None = None) -> None:
        super().__init__([snap], EVENTS)
        self.base, self.changed = snap, changed
        self.change_at: int | None = None
        self.hang = threading.Event()
        self.release = threading.Event()

    def latest(self) -> Frame:
        self._seen("latest")
        if self.hang.is_set():
            assert self.release.wait(30), "hang guard"
        i = self.index
        self.index += 1
        use = self.changed if self.change_at is not None and i >= self.change_at else self.base
        assert use is not None
        return self._frame(dataclasses.replace(use, ts_ms=start_of(self.base) + 100 * i))


async def until(pilot, ok: Callable[[], bool]) -> None:  # noqa: ANN001
    """Wait for ``ok()`` (hang guard: 20 s), then assert it."""
    for _ in range(2000):
        if ok():
            return
        await pilot.pause(0.01)
    assert ok()


def status_of(app: VramscopeApp) -> str:
    return str(app.screen.query_one("#status").render())


class Counts:
    """What reaches the event loop from other threads while counting: messages posted
    to the screen and loop wake-ups (``call_soon_threadsafe``); and widget repaints."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, screen: Widget) -> None:
        self.posted: list[str] = []
        self.wakes = 0
        self.repaints: list[str] = []
        loop = asyncio.get_running_loop()
        wake = loop.call_soon_threadsafe
        post = screen.post_message
        loop_thread = threading.get_ident()  # the test runs on the app's loop

        def counting_wake(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            self.wakes += threading.get_ident() != loop_thread
            return wake(*args, **kwargs)

        def counting_post(message):  # noqa: ANN001, ANN202
            if threading.get_ident() != loop_thread:  # not the pilot's own callbacks
                self.posted.append(type(message).__name__)
            return post(message)

        original = Widget.refresh

        def counting_refresh(widget, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            self.repaints.append(type(widget).__name__)
            return original(widget, *args, **kwargs)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counting_wake)
        monkeypatch.setattr(screen, "post_message", counting_post)
        monkeypatch.setattr(Widget, "refresh", counting_refresh)


async def warm(pilot, source: Still) -> None:  # noqa: ANN001
    """The first frame drawn and a few polls past it (the first polls draw again once the
    panels have their width)."""
    await settle(pilot)
    await until(pilot, lambda: pilot.app.screen.frame is not None)
    seen = source.index
    await until(pilot, lambda: source.index >= seen + 5)
    await settle(pilot)


@sync
async def test_equal_samples_never_reach_the_event_loop(models, monkeypatch) -> None:  # noqa: ANN001
    """Noise: twenty new samples with the same figures in the same minute: the poll
    thread posts nothing, wakes the event loop 0 times and nothing is repainted; the
    screen still knows the newest sample (history, what-if and replay start from it)."""
    source = Still(discrete_three(models, ticks=1)[0])
    app = VramscopeApp(source, refresh_s=REFRESH_S)
    async with app.run_test(size=SIZE) as pilot:
        await warm(pilot, source)
        screen = app.screen
        drawn = screen.frame
        counts = Counts(monkeypatch, screen)
        seen = source.index
        await until(pilot, lambda: source.index >= seen + 20)
        reads = source.index
        monkeypatch.undo()
        assert counts.posted == [] and counts.wakes == 0 and counts.repaints == []
        assert screen.frame is drawn
        assert screen._current().ts_ms >= start_of(source.base) + 100 * (reads - 2)
        assert "live" in status_of(app) and "no new sample" not in status_of(app)


@sync
async def test_a_change_shows_at_the_next_refresh(models, monkeypatch) -> None:  # noqa: ANN001
    """Signal: after still samples, one server's VRAM grows by 2 GiB: the next read is
    posted and drawn (the models table and the GPU panel show it); the equal reads after
    it are not posted again."""
    first = discrete_three(models, ticks=1)[0]
    source = Still(first, grown(first, 2 * GIB))
    app = VramscopeApp(source, refresh_s=REFRESH_S)
    async with app.run_test(size=SIZE) as pilot:
        await warm(pilot, source)
        screen = app.screen
        before = next(r for r in screen.frame.models if r.pid == 4101).measured_bytes
        counts = Counts(monkeypatch, screen)
        source.change_at = source.index + 1
        await until(pilot, lambda: source.index >= source.change_at + 10)
        await settle(pilot)
        monkeypatch.undo()
        assert counts.posted == ["FrameReady"]
        assert screen.frame.ts_ms == start_of(first) + 100 * source.change_at
        after = next(r for r in screen.frame.models if r.pid == 4101).measured_bytes
        assert after == before + 2 * GIB
        assert "ModelsTable" in counts.repaints and "DevicePanel" in counts.repaints


@sync
async def test_a_still_new_sample_is_never_late(models) -> None:  # noqa: ANN001
    """Noise: the figures stay the same for longer than the staleness limit (3 refreshes)
    but each read is a new sample: the status line is never late, though no frame was
    posted; the deadline timer keeps being armed for the newest sample."""
    source = Still(discrete_three(models, ticks=1)[0])
    app = VramscopeApp(source, refresh_s=REFRESH_S)
    async with app.run_test(size=SIZE) as pilot:
        await warm(pilot, source)
        screen = app.screen
        posted = screen.posted
        for _ in range(3):  # the timer fires (here at once) each past 3 refreshes
            seen = source.index
            await until(pilot, lambda s=seen: source.index >= s + 4)  # noqa: B023
            screen._on_deadline()
            assert "no new sample" not in status_of(app)
            assert screen._deadline is not None
        assert screen.posted == posted  # all of it without a frame posted


@sync
async def test_a_hung_source_shows_as_late_and_recovers(models) -> None:  # noqa: ANN001
    """Signal: the source hangs in a read: the staleness timer, armed for 3 intervals
    after the newest sample, shows `no new sample for N s`; once the read returns, the
    next sample is posted (though its figures are the same) and the line is on time."""
    source = Still(discrete_three(models, ticks=1)[0])
    app = VramscopeApp(source, refresh_s=REFRESH_S)
    async with app.run_test(size=SIZE) as pilot:
        await warm(pilot, source)
        screen = app.screen
        deadline = screen._deadline
        # 3 of the samples' own interval as the screen saw it (0.1 s on a quiet box; more
        # when a loaded box delays the reads), or of the refresh, from the newest sample
        cadence_s = max(REFRESH_S, (screen._arrival[2] or 0) / 1000)
        assert deadline is not None and deadline._interval <= 3 * cadence_s + 0.011
        source.hang.set()
        await until(pilot, lambda: "no new sample for" in status_of(app))
        late_posted = screen.posted
        source.hang.clear()
        source.release.set()
        await until(pilot, lambda: "no new sample" not in status_of(app))
        assert screen.posted > late_posted and "live" in status_of(app)
