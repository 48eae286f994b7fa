"""The vramscope TUI: ``VramscopeApp(source)``, and :func:`main` for ``vramscope tui``.

The app renders a :class:`~tui.source.SampleSource` (live sampling or the daemon's
database); it never calls a collector or NVML on the event loop.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypedDict

from textual.app import App
from textual.binding import Binding

from collectors.base import Roots
from monitor.errors import VramscopeError, describe
from tui.format import safe
from tui.screens.main import MainScreen
from tui.source import (
    FrameBuilder,
    LiveSource,
    SampleSource,
    SourceError,
    StoreSource,
    being_written,
)
from tui.terminal import HangupDriver, install_stop_signals


class VramscopeApp(App[None]):
    """GPU / unified memory of a local LLM box: who holds what, vs what they should."""

    CSS_PATH = Path(__file__).with_name("vramscope.tcss")  # absolute: subclasses elsewhere
    TITLE = "vramscope"
    BINDINGS = [
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    def __init__(
        self,
        source: SampleSource,
        refresh_s: float | None = 1.0,
        clock: Callable[[], int] | None = None,
        at_ms: int | None = None,
        swap_config: Path | None = None,
        fleet: list[Any] | None = None,
        terminal: bool = False,
    ) -> None:
        # terminal: a real one (vramscope tui), not a test's pilot: end with it and on
        # SIGTERM/SIGHUP (tui/terminal.py)
        super().__init__(driver_class=HangupDriver if terminal else None)
        self.terminal = terminal
        self.source = source
        self.fleet = fleet  # RemoteSources of `tui --remote A --remote B`: the overview first
        self.refresh_s = refresh_s
        self.clock = clock
        self.at_ms = at_ms
        self.swap_config = swap_config
        self._swap_models: list[str] | None = None

    def now_ms(self) -> int:
        return self.clock() if self.clock is not None else time.time_ns() // 1_000_000

    def swap_models(self) -> list[str]:
        """Model ids of the llama-swap config (read once; small YAML)."""
        if self._swap_models is None:
            self._swap_models = []
            if self.swap_config is not None:
                from monitor.api import load_llamaswap_config as load_config

                try:
                    self._swap_models = sorted(load_config(self.swap_config).models)
                except Exception as exc:
                    self.notify(
                        safe(f"cannot read {self.swap_config}: {describe(exc)}"),
                        severity="error",
                        markup=False,
                    )
        return self._swap_models

    def action_help(self) -> None:
        """Every key, column, flag, bar symbol and colour (tui/screens/help.py)."""
        from tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def on_mount(self) -> None:
        if self.terminal:
            install_stop_signals(self)
        if self.fleet:
            from tui.screens.fleet import FleetScreen

            self.sub_title = f"fleet of {len(self.fleet)} boxes"
            self.push_screen(FleetScreen(self.fleet, self.refresh_s))
            return
        self.sub_title = source_label(self.source)
        self.push_screen(MainScreen())

    def on_unmount(self) -> None:
        # Closing a sampler may shut NVML down: off the event loop, bounded.
        closer = threading.Thread(target=self._close_source, daemon=True)
        closer.start()
        closer.join(timeout=2.0)

    def _close_source(self) -> None:
        with contextlib.suppress(Exception):
            self.source.close()


def source_label(source: SampleSource) -> str:
    """The header's words for where the data comes from: live, which database (and which
    daemon writes it), or which remote daemon."""
    describe = getattr(source, "describe", None)
    label = describe() if callable(describe) else ("live" if source.live else "database")
    return safe(label)


def open_source(
    db: Path | None,
    at: str | None,
    *,
    default_db: Path | None = None,
    roots: Roots | None = None,
    enabled: Iterable[str] | None = None,
    builder: FrameBuilder | None = None,
    live: bool = False,
) -> tuple[SampleSource, int | None]:
    """Live sampling when ``live``; else ``db`` when given; else ``default_db`` when asked
    for (``--at``) or being written by a daemon now; else live sampling. Raises
    SourceError/ValueError with a message."""
    if live:
        if db is not None or at is not None:
            raise SourceError("--live samples here and now: leave out --db and --at")
        return LiveSource(roots, enabled, builder), None
    at_ms = None
    if at is not None:
        from monitor.api import parse_time

        at_ms = parse_time(at)
    if (
        db is None
        and default_db is not None
        and (at is not None or (default_db.exists() and being_written(default_db)))
    ):
        db = default_db
    if db is None:
        if at is not None:
            raise SourceError("--at replays a database: give --db FILE")
        return LiveSource(roots, enabled, builder), at_ms
    if not Path(db).exists():
        raise SourceError(
            f"no database at {db} (is the vramscope daemon running? "
            "`vramscope tui` without --db samples live)"
        )
    source = StoreSource(Path(db), builder)
    source.check(at_ms)  # a bad file or a moment it does not cover: one line, no app
    return source, at_ms


def _fleet(
    urls: list[str], token: str | None, refresh_s: float, swap_config: Path | None, local: bool
) -> int:
    """``tui --remote A --remote B ...``: the fleet overview (an unreachable box is a row
    that says so; a URL that is not http(s)://HOST:PORT is an error before the app)."""
    from tui.source import RemoteSource

    if local:
        print(
            "vramscope: error: --remote reads other daemons: leave out --live, --db and --at",
            file=sys.stderr,
        )
        return 2
    try:
        sources = [RemoteSource(url, token) for url in urls]
    except SourceError as exc:
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return 2
    app = VramscopeApp(sources[0], refresh_s, swap_config=swap_config, fleet=sources, terminal=True)
    return _run(app)


class _BuilderSizes(TypedDict, total=False):
    """The FrameBuilder sizes given on the command line (the rest keep its defaults)."""

    margin_bytes: int
    overhead_bytes: int


def main(
    db: Path | None = None,
    at: str | None = None,
    swap_config: Path | None = None,
    refresh_s: float = 1.0,
    *,
    default_db: Path | None = None,
    roots: Roots | None = None,
    enabled: Iterable[str] | None = None,
    margin_bytes: int | None = None,
    overhead_bytes: int | None = None,
    remote: str | list[str] | None = None,
    token: str | None = None,
    live: bool = False,
) -> int:
    """Entry point for ``vramscope tui``; returns the exit status (2: cannot open)."""
    kwargs: _BuilderSizes = {}
    if margin_bytes is not None:
        kwargs["margin_bytes"] = margin_bytes
    if overhead_bytes is not None:
        kwargs["overhead_bytes"] = overhead_bytes
    remotes = [remote] if isinstance(remote, str) else list(remote or [])
    if len(remotes) > 1:
        return _fleet(
            remotes, token, refresh_s, swap_config, live or db is not None or at is not None
        )
    remote = remotes[0] if remotes else None
    if remote is not None:
        from tui.source import RemoteSource

        if live or db is not None or at is not None:
            print(
                "vramscope: error: --remote reads another daemon: leave out --live, --db and --at",
                file=sys.stderr,
            )
            return 2
        try:
            remote_source = RemoteSource(remote, token, FrameBuilder(**kwargs) if kwargs else None)
            remote_source.latest()  # fail fast with a message, not a blank screen
        except SourceError as exc:
            print(f"vramscope: error: {exc}", file=sys.stderr)
            return 2
        return _run(VramscopeApp(remote_source, refresh_s, swap_config=swap_config, terminal=True))
    try:
        source, at_ms = open_source(
            db,
            at,
            default_db=default_db,
            roots=roots,
            enabled=enabled,
            builder=FrameBuilder(**kwargs) if kwargs else None,
            live=live,
        )
    except (VramscopeError, ValueError) as exc:
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return 2
    return _run(
        VramscopeApp(source, refresh_s, at_ms=at_ms, swap_config=swap_config, terminal=True)
    )


def _run(app: VramscopeApp) -> int:
    """Run the app on this terminal; its exit status (0 when quit; EXIT_HANGUP when the
    terminal went away or SIGHUP came, EXIT_TERMINATED on SIGTERM: tui/terminal.py)."""
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
