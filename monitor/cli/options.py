"""What every command shares: the options each takes (``--config``, ``--db``, the roots), the
config in force, the parameter types (finite numbers, pids), the one-line failure on its way
out through click, and the quiet exit when stdout's reader is gone."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from monitor import config as config_mod
from monitor.errors import (
    DEBUG_ENV,
    EXIT_USAGE,
    UsageError,
)
from monitor.textsafe import terminal_safe

UserError = UsageError  # what a command raises for a bad value; any VramscopeError will do


class _OneLine(click.ClickException):
    """A failure on its way out through click: ``vramscope: error: MESSAGE``, one line."""

    def __init__(
        self, message: str, exit_code: int = EXIT_USAGE, prefix: str = "vramscope: error: "
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click: a class default, per error
        self.prefix = prefix

    def show(self, file: Any = None) -> None:
        click.echo(f"{self.prefix}{terminal_safe(self.message)}", err=True)


EXIT_PIPE = 128 + 13  # 141: as a process killed by SIGPIPE, which Python ignores


def reader_gone() -> NoReturn:
    """Exit quietly (EXIT_PIPE) when whoever reads stdout closed it (``| head``): stdout
    becomes /dev/null so the interpreter's last flush of what is still buffered cannot
    print a BrokenPipeError of its own."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    raise SystemExit(EXIT_PIPE)


class Finite(click.FloatRange):
    """A number in a range, and finite: click's FloatRange lets ``nan`` through."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


PID = click.IntRange(1, 2**31 - 1)  # pid_t: a signed 32-bit integer


def _path(**kwargs: Any) -> click.Path:
    return click.Path(dir_okay=False, path_type=Path, **kwargs)


def _debug_after_command(ctx: click.Context, _param: Any, value: bool) -> None:
    """``vramscope status --debug``: the same as ``vramscope --debug status`` (the bug line
    says "run with --debug"; either place works): the group's ``debug`` set."""
    if value:
        ctx.find_root().params["debug"] = True


def common_options(func: Any) -> Any:
    """Options every command shares: where the config, database and roots are."""
    options = [
        click.option(
            "--config",
            "config_path",
            type=_path(),
            help="TOML config file (default: /etc/vramscope/config.toml for root, "
            "else ~/.config/vramscope/config.toml, if present).",
        ),
        click.option(
            "--db",
            type=_path(),
            help="SQLite database (default: ~/.local/state/vramscope/vramscope.db, "
            "or /var/lib/vramscope/vramscope.db for root).",
        ),
        click.option(
            "--proc-root",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Read this tree instead of /proc (a recorded fixture).",
        ),
        click.option(
            "--sys-root",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Read this tree instead of /sys (a recorded fixture).",
        ),
        click.option(
            "--debug",
            is_flag=True,
            expose_value=False,
            callback=_debug_after_command,
            help=f"Print the traceback of an internal error (a bug), as {DEBUG_ENV}=1 does.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def load_config(**kwargs: Any) -> config_mod.Config:
    """The config (raises ConfigError, a VramscopeError, for a broken one): the command's
    ``--config``, else the group's (``vramscope --config FILE status``); both given and
    different is a usage error."""
    return config_mod.load(_config_in_force(kwargs.pop("config_path", None)), **kwargs)


def _config_in_force(own: Path | None) -> Path | None:
    """The ``--config`` in force: the command's own, or the one given before the command."""
    ctx = click.get_current_context(silent=True)
    group = ctx.find_root().params.get("config_path") if ctx is not None else None
    if own is None or group is None:
        return own if own is not None else group
    if Path(own).absolute() != Path(group).absolute():
        raise _OneLine(f"--config given twice and different: {group} and {own}; give one")
    return own


def terminal_width() -> int | None:
    """The columns text output is laid out for (monitor/report/status.py output_width):
    the terminal's; piped, COLUMNS if set, else None (every line whole)."""
    import os
    import shutil
    import sys

    from monitor.report.status import output_width

    return output_width(sys.stdout.isatty(), shutil.get_terminal_size().columns, os.environ)
