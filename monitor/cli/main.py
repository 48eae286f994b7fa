"""The ``vramscope`` command. Each command is thin; the work is in the modules it calls.

Errors the user can fix (a broken config, an unusable database, a second daemon) are
:class:`monitor.errors.VramscopeError`; the group catches them at this one edge and prints
one line, ``vramscope: error: ...``, exiting with the error's code (2) - never a traceback.
Anything else is a bug, one line too: ``vramscope: internal error (this is a bug): Type:
message``, exit 70 (EX_SOFTWARE; 1 and 3 are ``predict`` verdicts); ``vramscope --debug``
or VRAMSCOPE_DEBUG=1 prints its traceback. No command relabels ValueError or OSError as
bad input: a user's path that cannot be read is a typed error where it is opened.

The group and its one edge are here; the commands are in commands_box.py (daemon, status,
doctor, capture), commands_predict.py (estimate, predict), commands_history.py (diagnose,
postmortem, events) and commands_admin.py (service, alerts), each module imported only
when one of its commands is looked up (:data:`COMMANDS`); what they share in options.py.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import click

from monitor.cli.options import _OneLine, _path, reader_gone
from monitor.errors import (
    DEBUG_ENV,
    EXIT_BUG,
    VramscopeError,
    bug_line,
    debug_wanted,
)
from monitor.textsafe import terminal_safe

# The commands, each in the module of its kind (tui/entry.py adds `tui` itself): a command's
# module is imported when that command is looked up (to run it, or for --help's list), so a
# one-shot `status` does not build predict's options nor `predict` status's and the
# history's (issue 32 item 4).
COMMANDS = {
    "daemon": "commands_box",
    "status": "commands_box",
    "doctor": "commands_box",
    "capture": "commands_box",
    "estimate": "commands_predict",
    "predict": "commands_predict",
    "diagnose": "commands_history",
    "postmortem": "commands_history",
    "events": "commands_history",
    "service": "commands_admin",
    "alerts": "commands_admin",
}


# The one-shot commands that run to their end with the cyclic garbage collector off (issue
# 32 item 4): main() switches it off before the commands' modules are imported (as
# `python -m monitor` does before any), which saves the collections that building modules
# and classes triggers (~20 M instructions of a `status`, bench/RESULTS.md "Sixth pass").
# Their work makes little cyclic garbage (measured at exit: ~500 objects, mostly from the
# imports, with `--help` 460 of them), bounded by one sample of the box; and a process that
# ends with the collector off skips the full collection Python's exit runs when it is on
# (~14 M more; `python -m monitor` and the console script, tui/entry.py, leave it off for
# the whole process, while main() called by a caller that had it on gives it back, and so
# pays that collection at the caller's exit). Every other command
# (the daemon, the TUI, the history's reads, capture ...) may run for long or hold a large
# working set, so it gets the collector back (:func:`collector_back`) as soon as it is known.
GC_OFF_COMMANDS = frozenset({"status", "predict", "estimate"})


def collector_back() -> None:
    """Switch the cyclic garbage collector back on if start-up switched it off: the objects
    start-up built are frozen first (gc.freeze: they live as long as the process, so later
    full collections skip them), then the collector runs as usual."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


class _Vramscope(click.Group):
    """The group that runs every command: the CLI's one edge for failures; its commands
    (:data:`COMMANDS`) are imported on first lookup."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(_lazy_command(cmd_name))
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name not in GC_OFF_COMMANDS:
            collector_back()
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # `vramscope events | head`: the reader has all it wanted
            reader_gone()
        except VramscopeError as exc:
            raise _OneLine(str(exc), exc.exit_code) from None
        except Exception as exc:  # a bug: one line saying so, exit 70 (not predict's 1/3)
            raise _bug(ctx, exc) from None


def _lazy_command(name: str) -> click.Command:
    """The command ``name`` from its module in monitor/cli (:data:`COMMANDS`)."""
    import importlib

    command = getattr(importlib.import_module(f"monitor.cli.{COMMANDS[name]}"), name)
    assert isinstance(command, click.Command), name
    return command


def _bug(ctx: click.Context, exc: Exception) -> _OneLine:
    """A failure that is not a VramscopeError is a bug: one line, exit EXIT_BUG; its
    traceback on stderr with --debug / VRAMSCOPE_DEBUG=1, and in the daemon's journal."""
    import logging  # only here: a one-shot command that works never loads it
    import traceback  # (with linecache, tokenize) only for --debug's traceback

    debug = bool(ctx.params.get("debug")) or debug_wanted()
    level = logging.ERROR if ctx.invoked_subcommand == "daemon" else logging.DEBUG
    logging.getLogger("vramscope").log(level, "command failed", exc_info=exc)
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    return _OneLine(bug_line(exc, hint=not debug), EXIT_BUG, prefix="vramscope: ")


@click.group(
    cls=_Vramscope,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="vramscope")
@click.option(
    "--config",
    "config_path",
    type=_path(),
    help="TOML config file for the command (the same as the command's own --config).",
)
@click.option(
    "--debug",
    is_flag=True,
    help=f"Print the traceback of an internal error (a bug), as {DEBUG_ENV}=1 does.",
)
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, debug: bool) -> None:
    """vramscope: live GPU and unified-memory monitor for local LLM inference boxes.

    \b
    Quick start:
      vramscope status        what is on each GPU and in host RAM, right now
      vramscope daemon        sample every second into SQLite (Ctrl-C to stop)
      vramscope doctor        what can and cannot be seen here, and how to fix it

    With no command, vramscope opens the TUI in a terminal (`vramscope tui`), else prints
    `status`.
    """
    if ctx.invoked_subcommand is None:
        interactive = sys.stdout.isatty() and sys.stdin.isatty()
        tui = cli.commands.get("tui") if interactive else None
        if tui is not None:
            collector_back()
        ctx.invoke(tui or _lazy_command("status"))


def main() -> None:
    """Entry point: click's usage errors become one line too (no usage dump). The cyclic
    garbage collector is off while the command starts (:data:`GC_OFF_COMMANDS`), and as it
    was when main() returns or raises (a caller in the same process gets it back)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        _main()
    except SystemExit as exc:
        if not was_enabled and not gc.isenabled():  # our own process, a one-shot command
            _end_now(exc.code)  # returns only where it cannot end the process at once
        raise
    finally:
        if was_enabled:
            gc.enable()


def _end_now(code: object) -> None:
    """End a one-shot command's process now, with exit status ``code``: the atexit handlers
    run and stdout/stderr are flushed, as at any exit, but the interpreter's teardown
    (freeing every module's objects, a full collection) is skipped, ~40 M instructions of
    a ``status`` (issue 32 item 4). Only where main() owns the process (the collector was
    off before it: monitor/__main__.py, tui/entry.py) and the command left it off
    (:data:`GC_OFF_COMMANDS`). Returns, for the usual exit, where a non-daemon thread still
    runs, the status is a message, or a stream cannot be flushed (a closed pipe: the usual
    exit says so as before)."""
    import os

    status = 0 if code is None else code
    threading = sys.modules.get("threading")
    if not isinstance(status, int) or (
        threading is not None
        and any(not t.daemon and t is not threading.main_thread() for t in threading.enumerate())
    ):
        return
    import atexit

    atexit._run_exitfuncs()  # noqa: SLF001 - what the usual exit runs first
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None and not stream.closed:
                stream.flush()
    except OSError:
        return
    os._exit(status)


def _main() -> None:
    try:
        code = cli.main(prog_name="vramscope", standalone_mode=False)
    except BrokenPipeError:  # --help into a closed pipe, say; a command's own is in invoke
        reader_gone()
    except click.exceptions.Abort:
        click.echo("vramscope: aborted", err=True)
        sys.exit(130)
    except _OneLine as exc:  # a VramscopeError or a bug, on its way out: its own line
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"vramscope: error: {terminal_safe(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
