"""The flags the llama-server that will run a launch accepts: read from its own ``--help``.

llama.cpp renames and removes flags between builds (``--no-mmap`` and ``--mlock`` became
``--load-mode``); a server started with a flag its build does not know exits at once with
``error: invalid argument: FLAG`` (common/arg.cpp). So before judging a launch, ``predict``
asks that binary which flags it takes, when the binary is known and safe to run:

- found as the command names it (a path, or a name on ``PATH``), or the configured one;
- a regular file (not a link), executable, owned by root or the caller, not writable by
  group or others, in a folder not writable by others;
- run with no shell, a minimal environment (never the target's), a 10 s deadline and at
  most 1 MiB of output; the answer is cached by path, mtime and size.

Option lines of the help start in column 0 with ``-``; their names are the comma-separated
words before the value placeholder (``-c,    --ctx-size N``).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.servers.llamacpp import is_flag, normalise_flag

HELP_TIMEOUT_S = 10.0
MAX_HELP_BYTES = 1 << 20
_NAME = re.compile(r"--?[A-Za-z0-9][\w.-]*")
_HELP_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C", "LC_ALL": "C"}


@dataclass(frozen=True, slots=True)
class ServerFlags:
    """The flags one llama-server binary lists in its ``--help``."""

    binary: str
    flags: frozenset[str]


_CACHE: dict[tuple[str, int, int], frozenset[str]] = {}


def parse_help(text: str) -> frozenset[str]:
    """Every option name of a llama.cpp ``--help`` text."""
    names: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("-") or line.startswith("---"):
            continue
        for word in re.split(r"[,\s]+", line):
            if not word:
                continue
            if not _NAME.fullmatch(word):
                break  # the value placeholder (N, FNAME, <0|1>): names end there
            names.add(normalise_flag(word))
    return frozenset(names)


def _safe_to_run(path: Path) -> str | None:
    """Why ``path`` must not be run, or None when it may."""
    try:
        st = path.lstat()
        folder = path.parent.stat()
    except OSError as exc:
        return exc.strerror or "unreadable"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IXUSR:
        return "not an executable file"
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"owned by uid {st.st_uid} or writable by others"
    if folder.st_mode & stat.S_IWOTH and not folder.st_mode & stat.S_ISVTX:
        return "in a folder anyone may write"
    return None


def named_path(argv0: str, cwd: str | None = None) -> Path | None:
    """The path a command's ``argv[0]`` names, as given: a path (relative to ``cwd``), or a
    name found on this PATH; None for a name on no PATH."""
    if "/" in argv0:
        path = Path(argv0)
        return Path(cwd) / path if not path.is_absolute() and cwd else path
    found = shutil.which(argv0)
    return None if found is None else Path(found)


def locate(argv0: str, cwd: str | None = None) -> Path | None:
    """The binary ``argv[0]`` names (:func:`named_path`), resolved to its real file; None
    when there is none."""
    path = named_path(argv0, cwd)
    try:
        return None if path is None else path.resolve(strict=True)
    except OSError:
        return None


def server_flags(binary: Path) -> ServerFlags | None:
    """The flags ``binary --help`` lists; None when it is unsafe, fails or lists none."""
    if _safe_to_run(binary) is not None:
        return None
    st = binary.stat()
    key = (str(binary), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        try:
            done = subprocess.run(
                [str(binary), "--help"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=HELP_TIMEOUT_S,
                env=_HELP_ENV,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = done.stdout[:MAX_HELP_BYTES].decode("utf-8", "replace")
        _CACHE[key] = parse_help(text)
    flags = _CACHE[key]
    return ServerFlags(str(binary), flags) if len(flags) >= 10 else None


def unknown_flags(command: Sequence[str], known: ServerFlags) -> list[str]:
    """The flags of ``command`` (argv[1:]) its binary's help does not list, in order."""
    out = []
    for token in command[1:]:
        if not is_flag(token):
            continue
        name = normalise_flag(token.split("=", 1)[0])
        if name not in known.flags and name not in out:
            out.append(name)
    return out
