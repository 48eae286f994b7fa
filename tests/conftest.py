"""Shared pytest options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The tests' subprocesses (the command, daemons, fake servers) keep their bytecode in
# .cache/pycache (git-ignored), as an installed package keeps its own: this environment
# sets PYTHONDONTWRITEBYTECODE=1, so each `python -m monitor` of a fresh clone compiled
# every module it imports (~0.6 s of CPU here) instead of reading them.
_PYCACHE = Path(__file__).resolve().parents[1] / ".cache" / "pycache"
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ["PYTHONPYCACHEPREFIX"] = str(_PYCACHE)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden expected.json files from the current output instead of comparing",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was started with ``--update-golden``."""
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def stop_with_sigterm():
    """Send SIGTERM to a daemon subprocess, wait for it, and return its stderr."""
    import signal
    import subprocess

    from stopping import STOP_GUARD_S  # a hang guard: a slow stop on a busy box passes

    def stop(proc: subprocess.Popen[str]) -> str:
        try:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=STOP_GUARD_S)
        finally:
            proc.kill()
        return err or ""

    return stop


def _ticks_in(db) -> int:
    """Distinct ticks a daemon has committed to ``db`` (0 while it is not there yet)."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:
        return 0
    try:
        return conn.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


@pytest.fixture
def wait_for_ticks():
    """Wait until a daemon has committed at least ``n`` ticks (polled, generous deadline).

    Tests wait for what the daemon did, never for a fixed time: on a busy machine a daemon
    may take seconds to start.
    """
    import time

    def wait(db, n: int, timeout_s: float = 60.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (got := _ticks_in(db)) >= n:
                return got
            time.sleep(0.05)
        raise AssertionError(f"the daemon committed fewer than {n} ticks in {timeout_s} s")

    wait.ticks_in = _ticks_in  # type: ignore[attr-defined]
    return wait


@pytest.fixture
def fresh_pynvml():
    """pynvml keeps the library and its symbols in module globals: reset around each test."""
    import pynvml

    yield
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlLib_refcount = 0


@pytest.fixture(autouse=True)
def _no_terminal_width_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command piped without ``COLUMNS`` prints every line whole (monitor/report/
    status.py ``output_width``); a width that leaked into this environment (a terminal, a
    CI runner, an earlier test) would wrap the text the tests read. A test that wants a
    width sets it."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def vramscope():
    """The command as a user runs it (tests/fakes/cli_runner.py): ``vramscope("status",
    "--json")`` -> a finished ``CompletedProcess`` with text output."""
    import cli_runner

    return cli_runner.vramscope
