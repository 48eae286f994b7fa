"""One error tree (issue 15 point 5): every user-facing failure is a VramscopeError with
its exit code and HTTP status, caught at the edges and shown as one line."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import monitor
from monitor.errors import (
    DatabaseError,
    InputError,
    ModelFileError,
    SetupError,
    UsageError,
    VramscopeError,
    describe,
)

ROOT = Path(__file__).resolve().parents[2]


def error_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in monitor/ (each module imported) and tui/source.py."""
    names = [
        m.name
        for m in pkgutil.walk_packages(monitor.__path__, "monitor.")
        if m.name != "monitor.__main__"
    ] + ["tui.source"]
    found: dict[str, type[BaseException]] = {}
    for name in names:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{attr}"] = value
    return found


# raised and caught inside their own module; never reach a user
PRIVATE = {
    "monitor.engines.llamacpp._Bad",
    "monitor.analysis.assess._Bad",
    "monitor.http.server._RequestError",
    "monitor.integrations.slots._HttpError",
    "monitor.cli.main._OneLine",
}


def test_every_user_facing_error_class_derives_from_the_one_base() -> None:
    classes = error_classes()
    public = {name: cls for name, cls in classes.items() if name not in PRIVATE}
    assert set(classes) >= PRIVATE  # the list above names real classes
    strays = sorted(name for name, cls in public.items() if not issubclass(cls, VramscopeError))
    assert strays == []
    for name in (
        "monitor.gguf.reader.GgufError",
        "monitor.estimate.kv.EstimateError",
        "monitor.store.database.StoreError",
        "monitor.cli.capture.CaptureError",
        "monitor.config.ConfigError",
        "monitor.integrations.llamaswap.config.SwapConfigError",
        "monitor.http.server.HttpConfigError",
        "monitor.service.install.InstallError",
        "monitor.report.outdir.OutDirError",
        "tui.source.SourceError",
    ):
        assert name in public, name
    # none of them is a ValueError (an `except ValueError` would swallow them)
    assert sorted(n for n, c in public.items() if issubclass(c, ValueError)) == []
    from monitor.cli.main import UserError

    assert UserError is UsageError


def test_each_kind_carries_its_exit_code_and_http_status() -> None:
    for kind in (UsageError, InputError, ModelFileError, SetupError, DatabaseError):
        assert issubclass(kind, VramscopeError) and kind.exit_code == 2
    assert (InputError.http_status, ModelFileError.http_status) == (400, 400)
    assert DatabaseError.http_status == 503  # the request was fine; the store is not
    assert InputError("a\nb  c").one_line() == "a b c"
    assert describe(KeyError("k")) == "KeyError: 'k'"
    assert describe(DatabaseError("locked\nby pid 1")) == "locked by pid 1"


def test_a_vramscope_error_from_any_command_is_one_line_exit_2(tmp_path: Path) -> None:
    """capture into a folder that is not empty: CaptureError, caught by the CLI's edge."""
    from monitor.cli.main import cli

    folder = tmp_path / "box"
    folder.mkdir()
    (folder / "x").write_text("x")
    result = CliRunner().invoke(cli, ["capture", str(folder)], prog_name="vramscope")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("vramscope: error: ") and "not empty" in lines[0]
    ), lines
    assert result.stdout == ""


BUG_HINT = " — run with --debug (or VRAMSCOPE_DEBUG=1) for the traceback"


def _status_args() -> list[str]:
    fixture = str(ROOT / "tests" / "fixtures")
    return ["status", "--proc-root", fixture, "--sys-root", fixture]


def test_an_unexpected_failure_in_any_command_is_one_line_this_is_a_bug_exit_70(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in `status` (its renderer raising): one line that says it is a bug, exit 70
    (EX_SOFTWARE), no traceback unless asked for."""
    from monitor.cli.main import cli
    from monitor.report import status as status_mod

    def broken(*_args: object, **_kwargs: object) -> str:
        raise RuntimeError("renderer broke\non two lines")

    monkeypatch.setattr(status_mod, "render_text", broken)
    monkeypatch.delenv("VRAMSCOPE_DEBUG", raising=False)
    result = CliRunner().invoke(cli, _status_args(), prog_name="vramscope")
    assert result.exit_code == 70, result.output
    assert "Traceback" not in result.output
    assert result.stderr.strip() == (
        "vramscope: internal error (this is a bug): RuntimeError: renderer broke on two lines"
        + BUG_HINT
    )


# (command line, module, function): each command's work, where a planted bug is raised
PLANTED = [
    (["events", "--since", "1h"], "monitor.analysis.postmortem", "list_events"),
    (["postmortem", "--last"], "monitor.analysis.postmortem", "build"),
    (["diagnose"], "monitor.cli.diagnose", "run_diagnose"),
    (["estimate", "--", "llama-server", "-m", "m.gguf"], "monitor.cli.estimate", "run_estimate"),
    (["predict", "--", "llama-server", "-m", "m.gguf"], "monitor.cli.predict", "run_predict"),
]


@pytest.mark.parametrize(("argv", "module", "func"), PLANTED, ids=[p[0][0] for p in PLANTED])
@pytest.mark.parametrize("bug", [ValueError("bad slice"), KeyError("n_ctx")], ids=repr)
def test_a_planted_value_or_key_error_is_a_bug_not_bad_input(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    module: str,
    func: str,
    bug: Exception,
) -> None:
    """These five commands caught (ValueError, OSError) and printed them as the user's
    mistake (exit 2): a bug raising ValueError read as bad input. Now: exit 70, the bug
    line."""
    from monitor.cli.main import cli

    def planted(*_args: object, **_kwargs: object) -> object:
        raise bug

    monkeypatch.setattr(importlib.import_module(module), func, planted)
    monkeypatch.delenv("VRAMSCOPE_DEBUG", raising=False)
    config = tmp_path / "config.toml"
    config.write_text("")
    full = [*argv[:1], "--config", str(config), "--db", str(tmp_path / "v.db"), *argv[1:]]
    result = CliRunner().invoke(cli, full, prog_name="vramscope")
    assert result.exit_code == 70, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == [f"vramscope: internal error (this is a bug): {describe(bug)}{BUG_HINT}"]
    assert "vramscope: error:" not in result.stderr


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_prints_the_traceback_of_a_bug(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    from monitor.cli.main import cli
    from monitor.report import status as status_mod

    def broken(*_args: object, **_kwargs: object) -> str:
        raise KeyError("planted")

    monkeypatch.setattr(status_mod, "render_text", broken)
    monkeypatch.delenv("VRAMSCOPE_DEBUG", raising=False)
    if how == "env":
        monkeypatch.setenv("VRAMSCOPE_DEBUG", "1")
    argv = ["--debug", *_status_args()] if how == "flag" else _status_args()
    result = CliRunner().invoke(cli, argv, prog_name="vramscope")
    assert result.exit_code == 70, result.output
    assert "Traceback (most recent call last)" in result.stderr
    assert "in broken" in result.stderr  # the frame that raised
    last = result.stderr.strip().splitlines()[-1]
    assert last == "vramscope: internal error (this is a bug): KeyError: 'planted'"
