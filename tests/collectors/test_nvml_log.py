"""collectors/nvml.py's debug lines (issue 32 item 4): they reach logging where a program
loaded and configured it (the daemon's --log-level debug), and a program that never loaded
logging (a one-shot command) does not load it for them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collectors import nvml

ROOT = Path(__file__).resolve().parents[2]


def test_debug_lines_reach_a_configured_logger(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="collectors.nvml"):
        nvml.log.debug("nvml: %d device(s), process api %s", 2, "v3")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("collectors.nvml", logging.DEBUG, "nvml: 2 device(s), process api v3")
    ]


def test_a_program_without_logging_does_not_load_it_for_them() -> None:
    code = (
        "import sys; from collectors import nvml; nvml.log.debug('nvml: %s', 'x'); "
        "print('logging' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
