"""The ``vramscope`` console script: the daemon-side CLI plus the ``tui`` command.

The arrows of DESIGN.md point one way (tui -> monitor), so the command that opens the TUI
is added here, to monitor's click group, rather than in monitor/cli/main.py; textual is
imported only when the TUI really opens. ``python -m monitor`` is the same CLI without it.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import click

from monitor.cli.main import cli
from monitor.cli.main import main as cli_main
from monitor.cli.options import Finite, UserError, common_options, load_config


@cli.command()
@common_options
@click.option(
    "--at",
    metavar="TIME",
    help="Replay the database at this moment ('YYYY-MM-DD HH:MM', local time).",
)
@click.option(
    "--swap-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="llama-swap config.yaml: its models are offered in the what-if dialog.",
)
@click.option(
    "--refresh",
    type=Finite(0.1, 3600),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option(
    "--remote",
    "remotes",
    multiple=True,
    metavar="URL",
    help="A daemon's HTTP API, e.g. http://gpu-box:9835 (its [http] listen); repeat it "
    "for a fleet overview (one row per box, Enter opens one).",
)
@click.option(
    "--token",
    envvar="VRAMSCOPE_TOKEN",
    help="The daemon's [http] token (or $VRAMSCOPE_TOKEN), for one box; a fleet's boxes "
    "take theirs from [fleet] boxes in the config (a token file each).",
)
@click.option(
    "--prometheus",
    metavar="URL",
    help="The fleet overview from this Prometheus server (http://HOST:9090), which scrapes "
    "the daemons: its targets are the boxes; Enter opens a box's daemon directly.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Sample here, in this process, even if a daemon writes the database.",
)
def tui(
    at: str | None,
    swap_config: Path | None,
    refresh: float,
    remotes: tuple[str, ...],
    token: str | None,
    prometheus: str | None,
    live: bool,
    **kwargs: Any,
) -> None:
    """Open the terminal UI: live, the daemon's database, or a daemon's HTTP API.

    \b
    What it shows (the header says which, and the daemon's pid for a database):
      --remote URL  a daemon's HTTP API (repeated: the fleet overview);
      --prometheus URL  the fleet overview from a Prometheus scraping the daemons;
      --db FILE     that database, read-only while the daemon writes it;
      --live        samples taken here, by this process;
      otherwise     the default database (see --db) if a daemon has written it in the
                    last 30 s, else live. As root that is /var/lib/vramscope/vramscope.db,
                    the system daemon's, whatever collectors it was set up with.
    Keys are listed in the footer: r refresh, h history, w what-if, [ ] step in replay.
    It ends when its terminal goes away (exit 129), on SIGHUP (129) and SIGTERM (143),
    also as PID 1 of a container.
    Example: vramscope tui --at "2026-01-01 14:05" --db /var/lib/vramscope/vramscope.db
    """
    db_given = kwargs.get("db") is not None
    cfg = load_config(**kwargs)
    tokens = None
    if remotes:
        from monitor.api import tokens_for

        tokens = tokens_for(remotes, cfg, token)
    from monitor.api import fleet_token

    try:
        from tui.app import main as tui_main
    except ImportError as exc:
        raise UserError(f"the TUI needs textual: {exc}") from None
    sys.exit(
        tui_main(
            cfg.db_path if db_given else None,
            at,
            swap_config,
            refresh,
            default_db=cfg.db_path,
            roots=cfg.roots,
            enabled=cfg.collectors,
            overhead_bytes=cfg.gpu_overhead_mib * 1024 * 1024,
            remote=list(remotes),
            token=token,
            tokens=tokens,
            live=live,
            prometheus=prometheus,
            token_of=lambda url: fleet_token(url, cfg),
        )
    )


def main() -> None:
    """The console script ``vramscope``: the CLI with the collector off from here on, as
    ``python -m monitor`` has it (monitor/cli/main.py GC_OFF_COMMANDS says when it comes
    back), so a one-shot command also ends with it off and the interpreter's exit skips the
    full collection it runs when the collector is on (~16 M instructions, issue 32 item 4)."""
    gc.disable()
    cli_main()
