"""The daemon soak as a test: ``bench/soak.py`` must pass.

Ten minutes of the daemon at a 0.25 s interval with processes coming and going: RSS growth
< 5 MiB after the warm-up (a twelfth of the run), no fd or thread growth, >= 90 % of the
ticks recorded, every short-lived llama-server recorded; in a PID namespace of its own where
one can be made (bench/soak.py), so what else runs on the box does not move the daemon's
RSS. Part of the slow tier, so CI runs
it; the one-hour soak is ``bash scripts/soak`` (its results are in bench/RESULTS.md). The
daemon's figures are printed every minute, straight to the terminal, so a CI log shows
progress.

``VRAMSCOPE_SOAK_MINUTES`` changes the length (60 gives the hour with a 5-minute warm-up);
``bash scripts/test --slow -m "slow and not soak"`` leaves it out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.soak]


def test_daemon_soak(capsys: pytest.CaptureFixture[str]) -> None:
    minutes = float(os.environ.get("VRAMSCOPE_SOAK_MINUTES", "10"))
    warmup = 5.0 if minutes >= 60 else minutes / 12
    argv = [
        sys.executable,
        str(ROOT / "bench" / "soak.py"),
        "--minutes",
        str(minutes),
        "--warmup-minutes",
        str(warmup),
    ]
    lines = []
    with capsys.disabled():
        print(f"\nsoak: {minutes:g} minutes of the daemon at 0.25 s ({warmup:g} min warm-up)")
        with subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                print(f"soak: {line}", end="", flush=True)
    assert proc.returncode == 0, "".join(lines)
    assert lines[-1].strip() == "PASS"
