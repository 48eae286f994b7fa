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
    "monitor.servers.llamacpp_values._Bad",
    "monitor.analysis.assess._Bad",
    "monitor.http.requests.RequestError",  # caught by http/server.py's handler: a 4xx
    "monitor.integrations.slots._HttpError",
    "monitor.cli.options._OneLine",
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
        "monitor.integrations.llamaswap.schema.SwapConfigError",
        "monitor.http.server.HttpConfigError",
        "monitor.service.install.InstallError",
        "monitor.report.outdir.OutDirError",
        "tui.source.SourceError",
    ):
        assert name in public, name
    # none of them is a ValueError (an `except ValueError` would swallow them)
    assert sorted(n for n, c in public.items() if issubclass(c, ValueError)) == []
    from monitor.cli.options import UserError

    assert UserError is UsageError


def test_each_kind_carries_its_exit_code_and_http_status() -> None:
    for kind in (UsageError, InputError, ModelFileError, SetupError, DatabaseError):
        assert issubclass(kind, VramscopeError) and kind.exit_code == 2
    assert (InputError.http_status, ModelFileError.http_status) == (400, 400)
    assert DatabaseError.http_status == 503  # the request was fine; the store is not
    assert InputError("a\nb  c").one_line() == "a b c"
    assert describe(KeyError("k")) == "KeyError: 'k'"
    assert describe(DatabaseError("locked\nby pid 1")) == "locked by pid 1"
    from monitor.errors import EXIT_BUG, bug_line, failure_line

    assert EXIT_BUG == 70  # EX_SOFTWARE
    assert failure_line(InputError("bad\nfile")) == "bad file"
    assert failure_line(KeyError("k")) == "internal error (this is a bug): KeyError: 'k'"
    assert bug_line(ValueError("v")).endswith("for the traceback")


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
    (["postmortem", "--last"], "monitor.analysis.postmortem", "build_model"),
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


@pytest.mark.parametrize("how", ["flag", "flag-after", "env"])
def test_debug_prints_the_traceback_of_a_bug(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    from monitor.cli.main import cli
    from monitor.report import status as status_mod

    def broken(*_args: object, **_kwargs: object) -> str:
        raise KeyError("planted")

    monkeypatch.setattr(status_mod, "render_text", broken)
    monkeypatch.delenv("VRAMSCOPE_DEBUG", raising=False)
    if how == "env":
        monkeypatch.setenv("VRAMSCOPE_DEBUG", "1")
    argv = {
        "flag": ["--debug", *_status_args()],
        "flag-after": [*_status_args(), "--debug"],  # where "run with --debug" is typed
        "env": _status_args(),
    }[how]
    result = CliRunner().invoke(cli, argv, prog_name="vramscope")
    assert result.exit_code == 70, result.output
    assert "Traceback (most recent call last)" in result.stderr
    assert "in broken" in result.stderr  # the frame that raised
    last = result.stderr.strip().splitlines()[-1]
    assert last == "vramscope: internal error (this is a bug): KeyError: 'planted'"


# -- each converted user-input path: still one line, exit 2 (not the bug line) ------------

FIXTURE = str(ROOT / "tests" / "fixtures")
USER_ERRORS = [
    (["events", "--since", "garbage"], "--since 'garbage': cannot read it; use 30m"),
    (["postmortem", "--at", "garbage"], "cannot read the time 'garbage'"),
    (["postmortem", "--at", "0001-01-01"], "cannot read the time '0001-01-01'"),  # OverflowError
    (["diagnose", "--at", "9" * 5000], "cannot read the time"),  # int() refuses 5000 digits
    (
        ["predict", "--router", "http://10.0.0.1:8080", "qwen"],
        "refusing non-loopback router URL host '10.0.0.1'",
    ),
    (
        ["predict", "--router", "http://127.0.0.1:1", "qwen"],  # nothing listens on port 1
        "--router http://127.0.0.1:1: cannot read its GET /models: ",
    ),
    (
        ["predict", "--proc-root", FIXTURE, "--sys-root", FIXTURE, "--cgroup", "/nope"]
        + ["--", "llama-server", "-m", "m.gguf"],
        "no memory cgroup controller is mounted",  # the fixture's /sys has none
    ),
]


@pytest.mark.parametrize(("argv", "says"), USER_ERRORS, ids=[u[1][:30] for u in USER_ERRORS])
def test_each_converted_user_input_failure_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], says: str
) -> None:
    """These reached the CLI as ValueError/OSError and were relabelled there; now each is
    a VramscopeError raised where the value is read (a relabelling gone, they would be
    bugs, exit 70)."""
    from monitor.cli.main import cli

    monkeypatch.delenv("VRAMSCOPE_DEBUG", raising=False)
    config = tmp_path / "config.toml"
    config.write_text("")
    full = [*argv[:1], "--config", str(config), "--db", str(tmp_path / "v.db"), *argv[1:]]
    result = CliRunner().invoke(cli, full, prog_name="vramscope")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: error: "), lines
    assert says in lines[0], lines


def test_a_moment_the_database_does_not_hold_is_not_recorded(tmp_path: Path) -> None:
    from monitor.errors import NotRecorded
    from monitor.store.moment import check_moment

    with pytest.raises(NotRecorded, match="holds no full-resolution samples"):
        check_moment(tmp_path / "v.db", 5, None, None)
    with pytest.raises(NotRecorded, match="before the first sample"):
        check_moment(tmp_path / "v.db", 5, 10_000, 20_000)
    check_moment(tmp_path / "v.db", 15_000, 10_000, 20_000)  # inside: no error


# -- the HTTP edge -------------------------------------------------------------------------


def test_a_bug_behind_an_http_endpoint_is_500_one_line_json_traceback_only_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import http.client
    import json
    import logging

    from monitor.config import Config
    from monitor.http import HttpServer

    def latest() -> None:
        raise ValueError("planted bug /secret/path")

    db = tmp_path / "v.db"
    srv = HttpServer("127.0.0.1:0", None, latest, db, Config(db_path=db))
    srv.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.address[1], timeout=30)
        with caplog.at_level(logging.ERROR, logger="monitor.http.server"):
            conn.request("GET", "/api/v1/snapshot")
            resp = conn.getresponse()
            body = resp.read()
        conn.close()
    finally:
        srv.stop()
    assert resp.status == 500
    assert body.count(b"\n") == 1 and body.endswith(b"\n")
    assert json.loads(body) == {
        "error": "internal error (this is a bug; its traceback is in the daemon's log)"
    }
    assert b"secret" not in body and b"Traceback" not in body
    logged = [r for r in caplog.records if r.exc_info]
    assert len(logged) == 1 and "this is a bug" in logged[0].getMessage()
    assert "planted bug /secret/path" in caplog.text and "Traceback" in caplog.text


# -- no relabelling at the edges -----------------------------------------------------------

EDGES = (
    *sorted((ROOT / "monitor" / "cli").glob("*.py")),
    ROOT / "monitor" / "http" / "server.py",
    ROOT / "monitor" / "http" / "requests.py",
    ROOT / "tui" / "app.py",
    ROOT / "tui" / "entry.py",
)
# (module, function): why its `except ValueError` is no relabelling (the value is read in
# the `try` itself: a parse caught at its source, its meaning known)
ALLOWED = {
    ("monitor/cli/commands_predict.py", "_device_figures"): "float() of --bw/--flops",
    ("monitor/cli/doctor.py", "_has_capability"): "int() of /proc's CapEff: absent is False",
    ("monitor/cli/capture.py", "place"): "PurePath.relative_to: not under this root",
    ("monitor/cli/engine_check.py", "refuse_foreign"): "int() of /proc's Uid: line, at source",
    ("monitor/http/server.py", "parse_listen"): "ip_address() of [http] listen's host",
    ("monitor/http/requests.py", "dns_safe_host"): "ip_address() of the Host header",
    ("monitor/http/requests.py", "query_params"): "parse_qs's max_num_fields: a bad query",
}


def _value_error_handlers() -> set[tuple[str, str]]:
    """(module, enclosing function) of each `except` naming ValueError in the edges."""
    import ast

    found: set[tuple[str, str]] = set()
    for path in EDGES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ExceptHandler) and node.type is not None:
                    names = {n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)}
                    if "ValueError" in names:
                        found.add((str(path.relative_to(ROOT)), func.name))
    return found


def test_no_edge_relabels_value_error_as_the_users_mistake() -> None:
    """A ValueError caught at the CLI, HTTP or TUI edge and printed as bad input hides a
    bug; only parses caught at their source (the allow-list, with reasons) remain."""
    found = _value_error_handlers()
    assert found - set(ALLOWED) == set(), "relabelling at an edge (raise a VramscopeError)"
    assert set(ALLOWED) - found == set(), "an allowed handler is gone: drop it from ALLOWED"


def test_the_console_entry_prints_the_bug_line_and_exits_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vramscope` / `python -m monitor` run click outside its standalone mode
    (monitor/cli/main.py main): the bug's own line, not `vramscope: error: ...`."""
    from monitor.cli import main as main_mod
    from monitor.report import status as status_mod

    def broken(*_args: object, **_kwargs: object) -> str:
        raise ValueError("planted")

    monkeypatch.setattr(status_mod, "render_text", broken)
    monkeypatch.delenv("VRAMSCOPE_DEBUG", raising=False)
    monkeypatch.setattr("sys.argv", ["vramscope", *_status_args()])
    with pytest.raises(SystemExit) as ended:
        main_mod.main()
    assert ended.value.code == 70
    err = capsys.readouterr().err
    assert err == f"vramscope: internal error (this is a bug): ValueError: planted{BUG_HINT}\n"


HOSTILE_TIMES = [
    "9" * 5000,  # int() refuses over 4300 digits (ValueError)
    "9" * 19,  # past int64 epoch ms
    "0001-01-01",  # astimezone() before the epoch: OverflowError / OSError
    "9999-12-31T23:59:59-14:00",  # past datetime.max in UTC: OverflowError
    "１２３",  # fullwidth digits: str.isdigit() is True
    "\x00",
    "",
]


@pytest.mark.parametrize("text", HOSTILE_TIMES, ids=range(len(HOSTILE_TIMES)))
def test_a_time_the_user_typed_is_a_usage_error_or_a_time_never_another_exception(
    text: str,
) -> None:
    from monitor.store.moment import parse_since, parse_time

    for parse in (parse_time, parse_since):
        try:
            got = parse(text)
        except UsageError as exc:
            assert "\n" not in str(exc) and "cannot read" in str(exc)
        else:
            assert isinstance(got, int)


def test_debug_after_the_command_reaches_the_tui_and_estimates_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--debug after a command is accepted by every command that takes the common options
    (the TUI's too), and without it a bug stays one line with the hint (the noise case)."""
    import tui.entry  # noqa: F401  # registers `vramscope tui` on the group
    from monitor.cli.main import cli
    from monitor.report import status as status_mod

    monkeypatch.setattr(status_mod, "render_text", lambda *_a, **_k: {}["planted"])
    monkeypatch.delenv("VRAMSCOPE_DEBUG", raising=False)
    quiet = CliRunner().invoke(cli, _status_args(), prog_name="vramscope")
    assert quiet.exit_code == 70 and "Traceback" not in quiet.stderr
    assert quiet.stderr.strip().endswith(BUG_HINT)
    for command in ("tui", "estimate", "predict", "events", "diagnose", "daemon"):
        helped = CliRunner().invoke(cli, [command, "--help"], prog_name="vramscope")
        assert "--debug" in helped.output, command
