"""monitor/cli/main.py's group imports a command's module only when that command is looked
up (issue 32 item 4): what a user sees must be what the eager group showed - every command
listed in ``--help`` with its one-line help, each command's own help and options the same,
an unknown name one line, exit 2."""

from __future__ import annotations

import importlib

import click
import pytest
from cli_runner import vramscope
from click.testing import CliRunner

from monitor.cli import main

MODULES = ("commands_box", "commands_predict", "commands_history", "commands_admin")


def defined_commands() -> dict[str, click.Command]:
    """Every top-level click command the four command modules define, by name (a group's
    own subcommands, ``service install``, stay under it)."""
    found: dict[str, click.Command] = {}
    for module in MODULES:
        mod = importlib.import_module(f"monitor.cli.{module}")
        for value in vars(mod).values():
            callback = getattr(value, "callback", None)
            if isinstance(value, click.Command) and callback.__module__ == mod.__name__:
                found[value.name or ""] = value
    nested = {
        id(sub) for c in found.values() if isinstance(c, click.Group) for sub in c.commands.values()
    }
    return {name: c for name, c in found.items() if id(c) not in nested}


def eager_group() -> click.Group:
    """The group as it was built before: a plain click.Group with every command added at
    import (and any added to the real one since, like `tui`), the same options, help and
    settings."""
    return click.Group(
        name=main.cli.name,
        commands={**defined_commands(), **main.cli.commands},  # tui/entry.py's `tui` too
        params=main.cli.params,
        help=main.cli.help,
        invoke_without_command=True,
        context_settings=main.cli.context_settings,
    )


def help_of(group: click.Group, args: list[str]) -> str:
    result = CliRunner().invoke(group, [*args, "--help"], prog_name="vramscope")
    assert result.exit_code == 0, result.output
    return result.output


def test_the_table_names_every_command_the_modules_define() -> None:
    defined = defined_commands()
    assert set(main.COMMANDS) == set(defined)
    for name, module in main.COMMANDS.items():  # each under its own module
        assert defined[name].callback is not None
        assert defined[name].callback.__module__ == f"monitor.cli.{module}"


def test_help_lists_every_command_as_the_eager_group_did() -> None:
    shown = help_of(main.cli, [])
    assert shown == help_of(eager_group(), [])
    for name in main.COMMANDS:
        assert f"\n  {name} " in shown


@pytest.mark.parametrize("name", sorted(main.COMMANDS))
def test_each_commands_help_is_the_same(name: str) -> None:
    assert help_of(main.cli, [name]) == help_of(eager_group(), [name])


def test_a_group_commands_subcommands_still_resolve() -> None:
    for name in ("service", "alerts"):
        command = main.cli.get_command(click.Context(main.cli), name)
        assert isinstance(command, click.Group) and command.list_commands(click.Context(command))


def test_an_unknown_or_misspelt_command_is_one_line_exit_2() -> None:
    for word in ("nosuch", "statu"):
        done = vramscope(word)
        assert done.returncode == 2
        assert done.stderr.strip() == f"vramscope: error: No such command '{word}'."


def test_status_is_the_default_command_without_a_terminal() -> None:
    """No command and no terminal (stdin is /dev/null): `status` runs, imported for it."""
    done = vramscope()
    assert done.returncode == 0, done.stderr
    header = ["DEVICE", "KIND", "USED", "TOTAL", "USE", "DETAIL"]
    assert done.stdout.splitlines()[0].split() == header
    assert "host RAM" in done.stdout
