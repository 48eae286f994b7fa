"""The one way tests run the ``vramscope`` command as a user does: ``python -m monitor ARGS``
in a fresh interpreter, from this checkout, output captured as text.

Tests that need the command in-process (no interpreter start) use click's ``CliRunner`` on
``monitor.cli.main.cli`` instead; everything else goes through :func:`vramscope` (also the
``vramscope`` fixture of tests/conftest.py), so what "run the command" means is decided here
once: which interpreter, which environment, which directory, how long before it counts as a
hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 180  # a hang guard only: a busy 2-core box runs a cold command in ~1 s


def command_env(
    env: Mapping[str, str] | None = None,
    *,
    set_env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    checkout: bool = True,
) -> dict[str, str]:
    """The child's environment: ``env`` (default: this process's), ``PYTHONPATH`` set to the
    checkout when ``checkout`` (an installed copy is tested with ``checkout=False``),
    ``set_env`` on top, ``unset`` names dropped."""
    out = dict(os.environ if env is None else env)
    if "PYTHONPYCACHEPREFIX" in os.environ:  # the tests' bytecode cache (tests/conftest.py)
        out.setdefault("PYTHONPYCACHEPREFIX", os.environ["PYTHONPYCACHEPREFIX"])
    if checkout:
        out["PYTHONPATH"] = str(ROOT)
    out.update(set_env or {})
    for name in unset:
        out.pop(name, None)
    return out


def vramscope(
    *args: str,
    env: Mapping[str, str] | None = None,
    set_env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    checkout: bool = True,
    cwd: Path = ROOT,
    python: str = sys.executable,
    stdout: int | None = subprocess.PIPE,
    timeout_s: float = HANG_GUARD_S,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m monitor *args`` and return it finished (stdout/stderr as text).

    ``env``/``set_env``/``unset``/``checkout``: see :func:`command_env`; ``python``: another
    interpreter (a venv with the wheel installed); ``stdout``: e.g. a closed pipe's end."""
    return subprocess.run(
        [python, "-m", "monitor", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=timeout_s,
        env=command_env(env, set_env=set_env, unset=unset, checkout=checkout),
        cwd=cwd,
    )
