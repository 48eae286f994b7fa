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
        prometheus: Any = None,
        token_of: Callable[[str], str | None] | None = None,
    ) -> None:
        # terminal: a real one (vramscope tui), not a test's pilot: end with it and on
        # SIGTERM/SIGHUP (tui/terminal.py)
        super().__init__(driver_class=HangupDriver if terminal else None)
        self.terminal = terminal
        self.source = source
        self.fleet = fleet  # RemoteSources of `tui --remote A --remote B`: the overview first
        # `tui --prometheus URL`: a monitor.http.prometheus.PrometheusFleet, the overview
        # first; token_of(box URL): that box's token when Enter opens it
        self.prometheus = prometheus
        self.token_of = token_of or (lambda _url: None)
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
        if self.prometheus is not None:
            from tui.screens.fleet import PrometheusFleetScreen

            self.sub_title = safe(f"fleet from Prometheus {self.prometheus.url}")
            self.push_screen(PrometheusFleetScreen(self.prometheus, self.token_of, self.refresh_s))
            return
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
    urls: list[str],
    tokens: dict[str, str | None],
    refresh_s: float,
    swap_config: Path | None,
    local: bool,
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
        sources = [RemoteSource(url, tokens.get(url)) for url in urls]
    except SourceError as exc:
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return 2
    app = VramscopeApp(sources[0], refresh_s, swap_config=swap_config, fleet=sources, terminal=True)
    return _run(app)


def _prometheus_fleet(
    url: str, token_of: Callable[[str], str | None], refresh_s: float, local: bool
) -> int:
    """``tui --prometheus URL``: the fleet overview from Prometheus (its first answer is
    awaited in the app: Prometheus down is said above an empty table, not an exit)."""
    from monitor.api import PrometheusError, PrometheusFleet
    from tui.format import short_device_name

    if local:
        print(
            "vramscope: error: --prometheus reads other daemons: leave out --remote, --live, "
            "--db and --at",
            file=sys.stderr,
        )
        return 2
    try:
        fleet = PrometheusFleet(url, namer=short_device_name)
    except PrometheusError as exc:
        print(f"vramscope: error: {exc}", file=sys.stderr)
        return 2
    # the app's source until a box is opened: never read by the overview (lazy, no sampler)
    placeholder = LiveSource()
    app = VramscopeApp(placeholder, refresh_s, prometheus=fleet, token_of=token_of, terminal=True)
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
    tokens: dict[str, str | None] | None = None,
    live: bool = False,
    prometheus: str | None = None,
    token_of: Callable[[str], str | None] | None = None,
) -> int:
    """Entry point for ``vramscope tui``; returns the exit status (2: cannot open).
    ``tokens``: each remote URL's own token (monitor/http/tokens.py); a URL it does not
    name takes ``token`` only when it is the only remote."""
    kwargs: _BuilderSizes = {}
    if margin_bytes is not None:
        kwargs["margin_bytes"] = margin_bytes
    if overhead_bytes is not None:
        kwargs["overhead_bytes"] = overhead_bytes
    remotes = [remote] if isinstance(remote, str) else list(remote or [])
    if prometheus is not None:
        local = bool(remotes) or live or db is not None or at is not None
        return _prometheus_fleet(prometheus, token_of or (lambda _u: None), refresh_s, local)
    tokens = tokens if tokens is not None else ({remotes[0]: token} if len(remotes) == 1 else {})
    if len(remotes) > 1:
        return _fleet(
            remotes, tokens, refresh_s, swap_config, live or db is not None or at is not None
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
            remote_source = RemoteSource(
                remote, tokens.get(remote), FrameBuilder(**kwargs) if kwargs else None
            )
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
