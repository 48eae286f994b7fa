"""``vramscope service`` (install / uninstall the systemd unit) and ``vramscope alerts`` (test the
alert channels): the commands that set the box up, registered on the group in main.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from monitor.cli.options import UserError, common_options, load_config


@click.group()
def service() -> None:
    """Install vramscope as a systemd service (system-wide, or --user)."""


@service.command("install")
@click.option("--user", "user", is_flag=True, help="Your user's systemd (no root needed).")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default="/",
    hidden=True,
    help="Write under this directory instead of / (for packaging).",
)
@click.option(
    "--allow-user-venv",
    is_flag=True,
    help="Install even though a non-root user can change the code the service "
    "runs with CAP_SYS_PTRACE (see docs/service.md).",
)
def service_install(user: bool, root: Path, allow_user_venv: bool) -> None:
    """Write the unit and an example config (0600), then print the next steps."""
    from monitor.service.install import install

    click.echo("\n".join(install(user, root, allow_user_venv=allow_user_venv)))


@service.command("uninstall")
@click.option("--user", "user", is_flag=True, help="The --user unit.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default="/", hidden=True)
def service_uninstall(user: bool, root: Path) -> None:
    """Remove the unit (the config and the data stay)."""
    from monitor.service.install import uninstall

    click.echo("\n".join(uninstall(user, root)))


@click.group()
def alerts() -> None:
    """Alert channels: apprise URLs and a command hook ([alerts] in the config)."""


@alerts.command("test")
@common_options
def alerts_test(**kwargs: Any) -> None:
    """Send a test notification to every configured channel; exit 1 if any failed."""
    from monitor.alerts import Notifier

    cfg = load_config(**kwargs)
    if not cfg.alert_urls and not cfg.alert_command:
        raise UserError(
            'no alert channels: add [alerts] urls = [...] or command = "..." to the config'
        )
    notifier = Notifier(list(cfg.alert_urls), cfg.alert_command, cfg.alert_cooldown_s)
    try:
        results = notifier.send_test()
    finally:
        notifier.close()
    for channel, outcome in results.items():
        click.echo(f"{channel}: {outcome}")
    sys.exit(0 if all(v == "ok" for v in results.values()) else 1)
