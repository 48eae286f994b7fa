"""The one tree of user-facing failures.

Every failure the user can act on (a bad argument, a file that cannot be used, a database
that cannot be opened, a machine that cannot do what was asked) is a
:class:`VramscopeError`. Each carries its one-line message, the exit code the CLI ends
with and the HTTP status the API answers with. The edges catch the base class and print
one line: the CLI (``vramscope: error: ...``, monitor/cli/main.py), the HTTP API (a
``{"error": ...}`` body, monitor/http/server.py) and the TUI (a one-line notification).
Nothing here imports the project: every layer may raise these.
"""

from __future__ import annotations

import os

EXIT_USAGE = 2  # the exit code of every user-facing failure (1 and 3 are predict verdicts)
EXIT_BUG = 70  # EX_SOFTWARE (sysexits.h): anything that is not a VramscopeError is a bug
DEBUG_ENV = "VRAMSCOPE_DEBUG"  # set (to anything but "" or "0"): tracebacks of bugs shown


class VramscopeError(Exception):
    """A failure the user can act on: one line, an exit code, an HTTP status."""

    exit_code: int = EXIT_USAGE
    http_status: int = 400

    @property
    def message(self) -> str:
        return str(self)

    def one_line(self, limit: int = 500) -> str:
        """The message on one line (newlines and runs of blanks folded), at most ``limit``
        characters."""
        line = " ".join(str(self).split()) or type(self).__name__
        return line if len(line) <= limit else line[: limit - 3] + "..."


class UsageError(VramscopeError):
    """The command line or a request asks for something impossible (a bad option value,
    nothing to do, no channel configured)."""


class InputError(VramscopeError):
    """What the user gave cannot be used: a config file, a recorded state, a llama-swap
    config, a launch command the estimator cannot price."""


class ModelFileError(InputError):
    """A model file is missing, unreadable or not a GGUF the reader accepts."""


class NotRecorded(InputError):
    """The database does not hold what was asked: no sample at that moment, no crash of
    that pid (the request was fine; nothing was recorded to answer it)."""


class ServiceError(VramscopeError):
    """A local service vramscope asks (llama-swap's /running, a llama-server router's
    /models) cannot be reached, or answered something not of its documented shape (the
    API answers 502: the request was fine, the service behind it was not)."""

    http_status = 502


class DatabaseError(VramscopeError):
    """The database cannot be created, opened, read or locked (the API answers 503: the
    request was fine, the daemon's store is not)."""

    http_status = 503


class SetupError(VramscopeError):
    """This machine cannot do what was asked: a folder that is not empty, a port taken,
    a unit file that cannot be written, an address that needs a token."""


def debug_wanted(environ: dict[str, str] | None = None) -> bool:
    """Whether ``VRAMSCOPE_DEBUG`` asks for the traceback of a bug (the CLI's ``--debug``
    sets it too)."""
    value = (environ if environ is not None else os.environ).get(DEBUG_ENV, "")
    return value.strip() not in ("", "0")


def bug_line(exc: BaseException, *, hint: bool = True) -> str:
    """The one line an edge prints for an exception that is not a VramscopeError: it is a
    bug, said so, with its type and message (and, with ``hint``, how to see the
    traceback)."""
    line = f"internal error (this is a bug): {describe(exc)}"
    return f"{line} — run with --debug (or {DEBUG_ENV}=1) for the traceback" if hint else line


def failure_line(exc: BaseException, limit: int = 300) -> str:
    """The line a view that outlives a failure (the TUI's status line, a dialog) shows: a
    :class:`VramscopeError`'s own message; anything else said to be a bug."""
    if isinstance(exc, VramscopeError):
        return exc.one_line(limit)
    return bug_line(exc, hint=False)[:limit]


def describe(exc: BaseException, limit: int = 300) -> str:
    """One line for any failure: a :class:`VramscopeError`'s own message; anything else
    (a bug) with its type first, so that a report of it says what broke."""
    if isinstance(exc, VramscopeError):
        return exc.one_line(limit)
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:limit]
