"""One crash, one event in ``vramscope events`` (issue 34): the ``crash`` headline with its
``process_exit``, the kernel's ``oom_kill`` record and the ``oom_invoked`` line indented
beneath it; ``events --json`` keeps every event. Unrelated records are not folded in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from monitor.store.database import Store

ROOT = Path(__file__).resolve().parents[3]


def exit_data(pid: int, cause: str, how: str) -> dict[str, object]:
    return {"pid": pid, "start_ticks": 7000 + pid, "cause": cause, "how": how, "comm": "srv"}


def fill(db: Path) -> int:
    """A box's day: an OOM-killed server (4 events), a server stopped by hand, and another
    process's OOM kill a minute later (not the first server's)."""
    now = int(time.time() * 1000) - 600_000
    store = Store.open(db)
    killed = exit_data(101, "oom_killed", "killed by the kernel OOM killer")
    add = store.add_event
    add(
        "crash",
        "critical",
        "srv[101]",
        "srv (pid 101) killed by the kernel OOM killer",
        killed,
        now,
    )
    add("oom_invoked", "warning", "host", "python invoked oom-killer", {"pid": None}, now + 400)
    add(
        "oom_kill",
        "critical",
        "host",
        "Out of memory: Killed process 101 (srv)",
        {"pid": 101, "comm": "srv"},
        now + 500,
    )
    add(
        "process_exit",
        "critical",
        "srv[101]",
        "srv (pid 101) killed by the kernel OOM killer; last seen 900 ms before",
        killed,
        now + 900,
    )
    stopped = exit_data(202, "stopped", "stopped (SIGTERM)")
    add("process_exit", "info", "srv[202]", "srv (pid 202) stopped (SIGTERM)", stopped, now + 2000)
    add(
        "oom_kill",
        "critical",
        "host",
        "Out of memory: Killed process 303 (other)",
        {"pid": 303, "comm": "other"},
        now + 60_000,
    )
    store.close()
    return now  # fmt: skip


def events(db: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", "events", "--db", str(db), "--since", "1h", *extra],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},  # piped: lines whole
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_one_crash_is_one_event_with_its_evidence(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    fill(db)
    text = events(db)
    assert text.returncode == 0, text.stderr
    lines = [x for x in text.stdout.splitlines() if "daemon" not in x]
    heads = [x for x in lines if not x.startswith(" ")]
    assert len(heads) == 3, text.stdout
    assert heads[0].endswith(
        "critical crash          srv (pid 101) killed by the kernel OOM killer"
    )
    evidence = lines[1:4]
    assert all(x.startswith(" " * 21 + "└ ") for x in evidence), text.stdout
    assert [x.split()[2] for x in evidence] == ["oom_invoked", "oom_kill", "process_exit"]
    assert "Killed process 101" in evidence[1]
    # the hand stop is its own line; another pid's kill is not the crash's evidence
    assert "srv (pid 202) stopped (SIGTERM)" in heads[1]
    assert heads[2].endswith("Out of memory: Killed process 303 (other)")
    whole = json.loads(events(db, "--json").stdout)
    assert len([e for e in whole if e["subject"] != "daemon"]) == 6
    assert next(e for e in whole if e["kind"] == "oom_kill")["data"]["pid"] == 101
