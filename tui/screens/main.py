"""The main screen: device panels, the models table, the breakdown and the events.

The same screen does replay: with ``replay_ts`` set it stops polling and shows recorded
ticks, with a time cursor and keys to step back and forth. Every source call runs in a
thread worker; results come back as replaceable messages.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Footer, Header, Static
from textual.worker import get_current_worker

from monitor.device_names import device_labels
from monitor.errors import failure_line
from tui.format import clock, plain
from tui.messages import FrameReady, SourceFailed, TicksReady
from tui.source import Frame
from tui.widgets.breakdown import Breakdown
from tui.widgets.device_panel import DevicePanel, PanelData, panels_from_frame
from tui.widgets.events_pane import EventsPane
from tui.widgets.models_table import ModelsTable
from tui.widgets.time_cursor import TimeCursor

if TYPE_CHECKING:
    from textual import getters

    from tui.app import VramscopeApp


REPLAY_WINDOW_MS = 3600_000
T = TypeVar("T")
DETACHED_POLL_S = 0.05  # how often a worker waiting on a detached read checks for cancel


class Abandoned(Exception):
    """The worker was cancelled while its detached read was still running."""


def call_detached(call: Callable[[], T], cancelled: Callable[[], bool]) -> T:
    """``call()`` on a daemon thread; its result (or its exception), or Abandoned as soon
    as ``cancelled()`` says so while it still runs (the thread is left to finish alone:
    a remote read ends at its own deadline, monitor/http/client.py)."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the waiting worker
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="vramscope-read", daemon=True).start()
    while not done.wait(DETACHED_POLL_S):
        if cancelled():
            raise Abandoned
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


class StatusLine(Widget):
    """One line: mode, time of the shown tick, counts; or the source's error."""

    DEFAULT_CSS = "StatusLine { height: 1; }"

    content: reactive[Content] = reactive(Content(""))
    """What to show (built from parts: an error may quote hostile text)."""

    def render(self) -> Content:
        return self.content


class MainScreen(Screen):
    """Live (or replayed) memory map of the box."""

    if TYPE_CHECKING:  # Textual's typed ``app`` (textual.getters.app), for the checker only
        app = getters.app(VramscopeApp)

    AUTO_FOCUS = "#models"  # arrows move in the models table from the start

    BINDINGS = [
        Binding("r", "refresh", "Refresh"),
        Binding("h", "history", "History"),
        Binding("w", "whatif", "What-if"),
        Binding("p", "replay", "Replay"),
        Binding("left_square_bracket", "step(-1)", "◀ Tick", key_display="["),
        Binding("right_square_bracket", "step(1)", "Tick ▶", key_display="]"),
        Binding("left_curly_bracket", "step(-60)", "◀ 60", key_display="{", show=False),
        Binding("right_curly_bracket", "step(60)", "60 ▶", key_display="}", show=False),
        Binding("l", "live", "Live"),
        Binding("z", "zoom", "Zoom"),
        Binding("i", "ids", "Ids", show=False),
        Binding("q", "app.quit", "Quit"),
    ]

    frame: reactive[Frame | None] = reactive(None, always_update=True, init=False, repaint=False)
    """The frame on screen (its widgets redraw themselves; repainting the screen would
    redraw every widget: a full compositor update per refresh)."""
    replay_ts: reactive[int | None] = reactive(None, init=False)
    """The recorded tick asked for; None when live."""
    error: reactive[str] = reactive("")
    """Why the source could not be read (shown instead of a traceback)."""

    def __init__(self) -> None:
        super().__init__()
        self.show_ids = False
        self._busy = False
        self._frozen = False
        self._ticks: list[int] = []
        self._poll_wake = threading.Event()
        self._poll_stop = False
        self._poll_thread: threading.Thread | None = None
        self._status_text = ""  # the status line's text and lateness as last shown
        self._status_stale: int | None = None
        # (the newest sample's time, when (app.now_ms) it came, the interval between the
        # last two samples' times): written whole by the poll thread for every sample,
        # drawn or not, so the event loop reads a consistent one
        self._arrival: tuple[int | None, int | None, int | None] = (None, None, None)
        self._deadline: Timer | None = None  # fires when the newest sample becomes late
        self._newest: Frame | None = None  # the newest live frame, drawn or not
        self._posted_key: tuple[object, ...] | None = None  # poll thread: what it last posted
        self._panels: tuple[DevicePanel, ...] = ()  # the device panels on screen
        self._panel_texts: dict[int, tuple[PanelData, int, object]] = {}  # poll thread
        self.polls = 0  # polls the poll thread finished (tests wait on it)
        self.posted = 0  # and how many of them it posted to the event loop

    def compose(self) -> ComposeResult:
        yield Header()
        yield StatusLine(id="status")
        with VerticalScroll(id="devices"):
            yield Static("waiting for the first sample…", id="placeholder")
        with Vertical(id="lower"):
            yield ModelsTable(id="models")
            with Horizontal(id="details"):
                with VerticalScroll(id="breakdown-box"):
                    yield Breakdown(id="breakdown")
                yield EventsPane(id="events")
        yield TimeCursor(id="cursor")
        yield Footer()

    def on_mount(self) -> None:
        app = self.app
        self.query_one("#breakdown-box").border_title = "breakdown"
        self.query_one("#events").border_title = "events"
        self.query_one("#models").border_title = "models"
        at_ms = getattr(app, "at_ms", None)
        if at_ms is not None:
            self.replay_ts = at_ms
        else:
            self.poll()
        refresh_s = getattr(app, "refresh_s", None)
        if refresh_s:
            self._poll_thread = threading.Thread(
                target=self._poll_loop, args=(refresh_s,), name="vramscope-poll", daemon=True
            )
            self._poll_thread.start()

    def on_unmount(self) -> None:
        self._poll_stop = True
        self._poll_wake.set()

    def on_resize(self) -> None:
        self.set_class(self.size.width < 120 or self.size.height < 32, "-narrow")
        self._posted_key = None  # the next frame is drawn: the table refits at a new width

    # ------------------------------------------------------------------ workers

    def poll(self) -> None:
        if self.replay_ts is not None or self._busy:
            return
        self._busy = True
        self.fetch_latest()

    def _poll_loop(self, interval_s: float) -> None:
        """The live refresh, timed by this thread rather than a Textual interval timer (a
        timer tick, a message and a frame comparison on the event loop every refresh,
        ~1.5 ms: bench/RESULTS.md, "Third idle pass"). A frame that shows nothing new is
        not posted (``_still``): an idle box costs the event loop nothing. The first
        frame, ``r`` and the way back from replay go through ``fetch_latest``, which
        always posts."""
        wake = self._poll_wake
        while True:
            wake.wait(interval_s)
            wake.clear()
            if self._poll_stop:
                return
            if self.replay_ts is None and not self._busy:
                self._fetch(lambda: self._poll_stop, still_ok=True)
                self.polls += 1

    @work(thread=True, exclusive=True, group="poll")
    def fetch_latest(self) -> None:
        worker = get_current_worker()
        try:
            self._fetch(lambda: worker.is_cancelled, detached=True)
        except Abandoned:  # the app quits (or a newer fetch replaced this one)
            return

    def _fetch(
        self, cancelled: Callable[[], bool], detached: bool = False, still_ok: bool = False
    ) -> None:
        """One frame from the source, posted to the screen (off the event loop).
        ``detached``: the source is read on a daemon thread of its own, which a cancelled
        worker leaves behind, so that quitting never waits for a slow source (the
        executor of Textual's thread workers is joined when the app's loop closes).
        ``still_ok``: a frame that would show nothing new is kept (``_newest``, its
        arrival noted for the staleness check) but not posted."""
        latest = self.app.source.latest
        try:
            frame = call_detached(latest, cancelled) if detached else latest()
        except Abandoned:
            raise
        except Exception as exc:  # any failure is a message on screen
            self._posted_key = None  # the next frame is drawn again, equal or not
            self.post_message(SourceFailed(failure_line(exc)))
            return
        if cancelled():
            return
        self._newest = frame
        self._note_sample(frame)
        if self._still(frame) and still_ok:
            return
        self.posted += 1
        self.post_message(FrameReady(frame))

    def _note_sample(self, frame: Frame) -> None:
        """Remember when a new sample (a new tick time) came, by this box's clock."""
        last_ms, _, cadence_ms = self._arrival
        if frame.ts_ms == last_ms:
            return
        if last_ms is not None and frame.ts_ms > last_ms:
            cadence_ms = frame.ts_ms - last_ms
        self._arrival = (frame.ts_ms, self.app.now_ms(), cadence_ms)

    def _still(self, frame: Frame) -> bool:
        """Whether ``frame`` shows exactly what the last posted frame showed (its display
        key, ``_display_key``), with the status line on time; remembers its key."""
        key = self._display_key(frame)
        if key is not None and key == self._posted_key and self._status_stale is None:
            return True
        self._posted_key = key
        return False

    def _display_key(self, frame: Frame) -> tuple[object, ...] | None:
        """What the screen shows of a live ``frame``, built on the poll thread: the status
        line's minute and counts, the models table's rows (and so the breakdown's), the
        events, and each device panel's text and styles at the width it is drawn at
        (``DevicePanel.text_of``, the comparison ``DevicePanel.watch_data`` makes); None
        while a panel is not drawn yet or the panels would change in number."""
        panels = self._panels
        datas = panels_from_frame(frame, show_ids=self.show_ids)
        if len(datas) != len(panels):
            return None
        texts = []
        for i, (panel, data) in enumerate(zip(panels, datas, strict=True)):
            width = panel.drawn_width
            if width is None:
                return None
            known = self._panel_texts.get(i)
            if known is None or known[1] != width or known[0] != data:
                known = (data, width, (data.verdict, DevicePanel.text_of(data, width)))
                self._panel_texts[i] = known
            texts.append(known[2])
        when = clock(frame.ts_ms, with_date=True)[:-3]
        return (frame.live, when, frame.models, frame.events, tuple(texts))

    @work(thread=True, exclusive=True, group="replay")
    def fetch_at(self, ts_ms: int, want_ticks: bool) -> None:
        worker = get_current_worker()
        source = self.app.source
        try:
            frame = source.at(ts_ms)
            ticks = (
                source.ticks(frame.ts_ms - REPLAY_WINDOW_MS, frame.ts_ms + REPLAY_WINDOW_MS)
                if want_ticks
                else None
            )
        except Exception as exc:
            self.post_message(SourceFailed(failure_line(exc)))
            return
        if worker.is_cancelled:
            return
        if ticks is not None:
            self.post_message(TicksReady(ticks))
        self.post_message(FrameReady(frame, replay=True))

    # ------------------------------------------------------------------ messages

    def on_frame_ready(self, message: FrameReady) -> None:
        if not message.replay:
            self._busy = False
        if message.replay != (self.replay_ts is not None):
            return  # a late answer for the other mode
        self.error = ""
        self.frame = message.frame
        if not self._frozen:
            # Startup objects (CSS, widgets, imports) never die: keep them out of the
            # collector's scans, so a full collection does not stall a refresh.
            self._frozen = True
            self.call_after_refresh(gc.freeze)

    def on_source_failed(self, message: SourceFailed) -> None:
        self._busy = False
        self.error = message.error

    def on_ticks_ready(self, message: TicksReady) -> None:
        self._ticks = list(message.ticks)
        self.query_one(TimeCursor).ticks = tuple(self._ticks)

    def watch_error(self, error: str) -> None:
        self._show_status()

    def watch_replay_ts(self, ts: int | None) -> None:
        cursor = self.query_one(TimeCursor)
        cursor.display = ts is not None
        self.set_class(ts is not None, "-replay")
        self.refresh_bindings()
        if ts is not None:
            cursor.position = ts
            want = not self._ticks or not (self._ticks[0] < ts < self._ticks[-1])
            self.fetch_at(ts, want)
        else:
            self._ticks = []
            self.poll()
        self._show_status()

    def watch_frame(self, frame: Frame | None) -> None:
        if frame is None:
            return
        if self.replay_ts is None:
            self._note_sample(frame)  # noted already when it came from the poll thread
            if self._deadline is None:
                self._arm_deadline()
        self._show_devices(frame)
        table = self._models_table
        table.show(frame.models)
        # Now rather than on the table's Selected message: the breakdown is drawn with the
        # rest of this frame, not in a second screen update.
        labels = device_labels((d.device_id, d.name) for d in frame.picture.devices.values())
        self._breakdown.labels = self._events_pane.labels = labels
        self._breakdown.row = table.selected_row()
        self._events_pane.show(frame.events)
        if self.replay_ts is not None:
            self.query_one(TimeCursor).position = frame.ts_ms
        self._show_status()

    @on(ModelsTable.Selected)
    def show_breakdown(self, message: ModelsTable.Selected) -> None:
        self._breakdown.row = message.row

    @on(EventsPane.Opened)
    def replay_event(self, message: EventsPane.Opened) -> None:
        self._ticks = []
        self.replay_ts = message.event.ts_ms

    # ------------------------------------------------------------------ drawing

    # The widgets each frame updates, found once (a query per widget per refresh is a
    # measurable part of a refresh: bench/bench_tui_refresh.py).

    @cached_property
    def _status_line(self) -> StatusLine:
        return self.query_one("#status", StatusLine)

    @cached_property
    def _devices_box(self) -> VerticalScroll:
        return self.query_one("#devices", VerticalScroll)

    @cached_property
    def _models_table(self) -> ModelsTable:
        return self.query_one(ModelsTable)

    @cached_property
    def _breakdown(self) -> Breakdown:
        return self.query_one(Breakdown)

    @cached_property
    def _events_pane(self) -> EventsPane:
        return self.query_one(EventsPane)

    def _show_devices(self, frame: Frame) -> None:
        box = self._devices_box
        panels = [child for child in box.children if isinstance(child, DevicePanel)]
        datas = panels_from_frame(frame, show_ids=self.show_ids)
        for placeholder in [child for child in box.children if child.id == "placeholder"]:
            placeholder.remove()
        if len(panels) != len(datas):
            for p in panels:
                p.remove()
            box.mount_all([DevicePanel(d) for d in datas])
            if not datas:
                box.mount(Static("no devices sampled", id="placeholder"))
        else:
            for panel, data in zip(panels, datas, strict=True):
                panel.data = data
        self._panels = tuple(c for c in box.children if isinstance(c, DevicePanel))

    def _show_status(self) -> None:
        status = self._status_line
        if self.error or self.frame is None:
            self._status_text = ""  # the frame's line is drawn again once back
        if self.error:
            status.content = plain(f"⚠ {self.error}", "bold $error")
            return
        frame = self.frame
        if frame is None:
            url = getattr(self.app.source, "url", None)
            waiting = f"connecting to {url}…" if url else "waiting for the first sample…"
            status.content = plain(waiting, "$text-muted")
            return
        replay = self.replay_ts is not None
        mode = "replay" if replay else ("live" if frame.live else "database")
        gpus = sum(1 for d in frame.picture.devices if d != "host")
        models = sum(1 for r in frame.models if r.role != "router")
        # the replayed tick to the second; live, the minute (a seconds clock repaints the
        # screen every refresh) and the data's age once it is late (``_stale_s``)
        when = clock(frame.ts_ms, with_date=True)
        text = f"{mode} · {when if replay else when[:-3]} · {gpus} GPU{'s' if gpus != 1 else ''}"
        text += f" · {models} model{'s' if models != 1 else ''}"
        stale_s = None if replay else self._stale_s()
        if text == self._status_text and stale_s is None and self._status_stale is None:
            return  # nothing the user can see has changed: no new Content, no repaint
        self._status_text, self._status_stale = text, stale_s
        if stale_s is None:
            status.content = Content.styled(text, "$text-muted")
            return
        late = f"no new sample for {stale_s} s"
        status.content = Content.assemble((text, "$text-muted"), " · ", (late, "bold $warning"))

    def _stale_s(self) -> int | None:
        """Whole seconds since a new sample last came, once that is longer than a refresh
        can explain (3 refreshes, or 3 of the source's own intervals between samples: a
        daemon's database is as new as its ticks); None while on time. Timed by this
        box's clock, not the sample's: a remote box's clock may be off."""
        refresh_s = getattr(self.app, "refresh_s", None)
        _, new_at_ms, cadence_ms = self._arrival
        if not refresh_s or new_at_ms is None:
            return None  # no refresh timer (a test's still frame): never late by design
        age_ms = self.app.now_ms() - new_at_ms
        if age_ms <= 3 * max(refresh_s * 1000, cadence_ms or 0):
            return None
        return int(age_ms // 1000)

    def _arm_deadline(self) -> None:
        """One timer, at the moment the newest sample becomes late (``_stale_s``), rather
        than a check every refresh: when it fires and a newer sample came meanwhile (the
        poll thread notes each, drawn or not) it is armed again for that one; while late,
        every refresh, so the count moves on. Not in replay, not before a first sample."""
        refresh_s = getattr(self.app, "refresh_s", None)
        _, new_at_ms, cadence_ms = self._arrival
        if self._deadline is not None:
            self._deadline.stop()
            self._deadline = None
        if not refresh_s or new_at_ms is None or self.replay_ts is not None:
            return
        late_at_ms = new_at_ms + 3 * max(refresh_s * 1000, cadence_ms or 0)
        wait_ms = late_at_ms - self.app.now_ms()
        delay_s = refresh_s if wait_ms < 0 else wait_ms / 1000 + 0.01
        self._deadline = self.set_timer(delay_s, self._on_deadline, name="stale")

    def _on_deadline(self) -> None:
        self._deadline = None
        if self.frame is not None and self.replay_ts is None and not self.error:
            self._show_status()
        self._arm_deadline()

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "step":
            return self.replay_ts is not None
        if action == "live":
            return self.replay_ts is not None
        if action == "replay":
            return self.replay_ts is None
        return True

    def action_zoom(self) -> None:
        """The breakdown full-screen (small terminals), or the focused pane; again: back."""
        if self.maximized is not None:
            self.minimize()
            return
        focused = self.focused
        target = focused if isinstance(focused, EventsPane) else self.query_one("#breakdown-box")
        self.maximized = target  # containers refuse maximize(); the screen takes any

    def action_ids(self) -> None:
        """Show or hide each device's long id (nvml:GPU-3f2c…) beside its short name."""
        self.show_ids = not self.show_ids
        if self.frame is not None:
            self._show_devices(self.frame)

    def action_refresh(self) -> None:
        if self.replay_ts is None:
            self._busy = False
            self.poll()

    def action_history(self) -> None:
        from tui.screens.history import HistoryScreen

        self.app.push_screen(HistoryScreen(self._current()))

    def action_whatif(self) -> None:
        from tui.screens.whatif import WhatIfScreen

        self.app.push_screen(WhatIfScreen(self._current()))

    def action_replay(self) -> None:
        current = self._current()
        if current is not None:
            self._ticks = []
            self.replay_ts = current.ts_ms

    def _current(self) -> Frame | None:
        """The frame the user looks at: live, the newest sample (one equal on screen to
        the frame drawn may not have been posted); in replay, the replayed one."""
        if self.replay_ts is not None or self._newest is None or self.error:
            return self.frame
        return self._newest

    def action_live(self) -> None:
        self.replay_ts = None

    def action_step(self, n: int) -> None:
        if self.replay_ts is None or not self._ticks:
            return
        current = self.frame.ts_ms if self.frame is not None else self.replay_ts
        import bisect

        i = bisect.bisect_left(self._ticks, current)
        if i >= len(self._ticks) or self._ticks[i] != current:
            i = max(0, i - (1 if n < 0 else 0))
        j = max(0, min(len(self._ticks) - 1, i + n))
        if j == i and self._ticks[j] == current:
            self.notify("no recorded tick further that way", severity="warning", timeout=2)
            return
        self.replay_ts = self._ticks[j]
