"""Names, command lines and log lines reach a terminal only as visible escapes.

Real processes set their own comm (/proc/self/comm, what prctl PR_SET_NAME does) to a
terminal escape; ``status``, ``events`` and ``postmortem`` must print no control byte.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_process import CSI_CLEAR, MARKUP, OSC_TITLE, hostile_server

from collectors.base import Roots
from monitor.analysis.exits_judged import JUDGE
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store
from monitor.textsafe import terminal_safe, terminal_safe_lines

# C0 but newline, DEL, C1: what must never reach the terminal from a report.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def vramscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
        ("a\nb\tc\rd", "a\\x0ab\\x09c\\x0dd"),
        ("\x9b2J\x7f", "\\x9b2J\\x7f"),
        ("right\u202eleft", "right\\u202eleft"),
        ("bad \udcff byte", "bad \\udcff byte"),
        ("[/]x ünïcode 模型 ✓", "[/]x ünïcode 模型 ✓"),
    ],
)
def test_terminal_safe_makes_control_characters_visible(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown
    assert terminal_safe_lines(f"{raw}\n{raw}") == f"{shown}\n{shown}".replace("\\x0a", "\n")


def test_status_prints_a_hostile_process_without_control_bytes() -> None:
    with hostile_server(OSC_TITLE, "-m", f"/nonexistent/{CSI_CLEAR}{MARKUP}.gguf") as proc:
        result = vramscope("status")
    assert result.returncode == 0, result.stderr
    assert not CONTROL.search(result.stdout), repr(result.stdout)
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith(f"{proc.pid} "))
    # a recognised server is summed up by its model file (the part after the last '/')
    assert line.endswith(" ]x.gguf"), line
    wide = vramscope("status", "--json")
    assert not CONTROL.search(wide.stdout)


def test_status_prints_a_hostile_unrecognised_command_line_escaped() -> None:
    from collectors.base import ProcessInfo, Snapshot
    from monitor.report.status import render_text

    argv = ("python3", "--comm", OSC_TITLE, f"{CSI_CLEAR}{MARKUP}")
    info = ProcessInfo(7, 1, None, 1, 1, "python3", argv, None, ("gpu",))
    text = render_text(Snapshot(0, (), (info,), (), (), (), ()))
    assert not CONTROL.search(text), repr(text)
    line = next(ln for ln in text.splitlines() if ln.startswith("7 "))
    assert "--comm \\x1b]0;pwned\\x07" in line and "\\x1b[2J\\x9b1m[/]x" in line


def test_events_and_postmortem_print_a_hostile_name_without_control_bytes(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    store = Store.open(db, exit_judge=JUDGE)  # as the daemon opens it
    sampler = Sampler(Roots(), enabled=["procfs"])
    try:
        with hostile_server(OSC_TITLE) as proc:
            store.write(sampler.sample())
        store.write(sampler.sample())  # it is gone: its exit is recorded under its comm
    finally:
        sampler.close()
        store.close()
    events = vramscope("events", "--db", str(db), "--since", "1h")
    assert events.returncode == 0, events.stderr
    assert f"\\x1b]0;pwned\\x07 (pid {proc.pid})" in events.stdout
    assert not CONTROL.search(events.stdout), repr(events.stdout)
    post = vramscope("postmortem", "--db", str(db), "--pid", str(proc.pid))
    assert post.returncode in (0, 2), post.stderr
    assert not CONTROL.search(post.stdout + post.stderr), repr(post.stdout + post.stderr)


def test_an_error_naming_a_hostile_model_path_is_one_clean_line() -> None:
    with hostile_server(MARKUP, "-m", f"/nonexistent/{CSI_CLEAR}\nm.gguf") as proc:
        result = vramscope("estimate", "--pid", str(proc.pid))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: error: "), result.stderr
    assert not CONTROL.search(result.stderr), repr(result.stderr)
    assert "/nonexistent/\\x1b[2J\\x9b1m" in lines[0] and "m.gguf" in lines[0]
