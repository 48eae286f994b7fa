"""Tracked processes whose /proc entries exit or become unreadable between the listing
and the reading: a real EACCES on a fixture tree (chmod 000), never an exception."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from unprivileged import DROP_DAC_CAPS, NOBODY, reachable_by_nobody

import collectors

PIDS = (201, 202, 203, 204, 205)


def _stat_line(pid: int, comm: str) -> str:
    rest = ["S", "1"] + ["0"] * 17 + [str(1000 + pid)] + ["0"] * 30
    return f"{pid} ({comm}) {' '.join(rest)}\n"


STATUS = (
    "Name:\tllama-server\nUid:\t1000\t1000\t1000\t1000\nVmHWM:\t  2048 kB\n"
    "VmLck:\t0 kB\nRssAnon:\t  1024 kB\nRssFile:\t  512 kB\nRssShmem:\t0 kB\n"
    "VmSwap:\t0 kB\n"
)


@pytest.fixture
def tree() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="vramscope-proc-", dir="/tmp"))
    proc = top / "tree" / "proc"
    proc.mkdir(parents=True)
    (proc / "meminfo").write_text(
        "MemTotal: 1000000 kB\nMemFree: 500000 kB\nMemAvailable: 600000 kB\n"
    )
    (proc / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    for pid in PIDS:
        d = proc / str(pid)
        d.mkdir()
        (d / "stat").write_text(_stat_line(pid, "llama-server"))
        (d / "cmdline").write_bytes(b"llama-server\0-m\0/m.gguf\0")
        (d / "status").write_text(STATUS)
        (d / "statm").write_text("1000 300 0 0 0 0 0\n")
    (proc / "205" / "stat").chmod(0)  # unreadable from the start: never identified
    for dirpath, _dirs, files in os.walk(top):
        if os.geteuid() == 0:
            os.chown(dirpath, NOBODY, NOBODY)
            for name in files:
                os.chown(os.path.join(dirpath, name), NOBODY, NOBODY)
        os.chmod(dirpath, 0o755)
    try:
        yield top / "tree"
    finally:
        for dirpath, _dirs, _files in os.walk(top):
            os.chmod(dirpath, 0o755)
        for pid in PIDS:
            for name in ("stat", "status"):
                path = proc / str(pid) / name
                if path.exists():
                    path.chmod(0o644)
        shutil.rmtree(top)


CHILD = """
import dataclasses, json, os, shutil, sys
from pathlib import Path
from collectors.base import CollectorOptions, Roots, Tick
from collectors.procfs import ProcfsCollector
proc = Path(sys.argv[1]) / "proc"
roots = Roots(proc=proc, sys=proc.parent / "sys")
c = ProcfsCollector(roots, CollectorOptions(top_n=100, max_tracked=100, pss_per_tick=0))
first = c.collect(Tick(roots, 1_000))
tick = Tick(roots, 2_000)
tick.pids()                                # the listing: every pid still there
os.chmod(proc / "201" / "status", 0)       # status unreadable
os.chmod(proc / "202", 0)                  # the whole /proc/PID unreadable
shutil.rmtree(proc / "203")                # exited
try:
    open(proc / "201" / "status").close()
    effective = False
except PermissionError:
    effective = True
second = c.collect(tick)
third = c.collect(Tick(roots, 3_000))      # a fresh listing
print(json.dumps({"effective": effective,
                  **{k: dataclasses.asdict(r) for k, r in
                     (("first", first), ("second", second), ("third", third))}}))
"""


def _run(tree: Path, prelude: str, **kwargs: object) -> dict | str:
    checkout = Path(collectors.__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", prelude + CHILD, str(tree)],
        capture_output=True,
        text=True,
        cwd="/",
        check=False,
        timeout=60,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(checkout)},
        **kwargs,  # type: ignore[call-overload]
    )
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    out = json.loads(done.stdout)
    return out if out["effective"] else "chmod 000 did not deny access"


def test_exit_and_unreadable_entries_between_listing_and_reading(tree: Path) -> None:
    if os.geteuid() == 0:
        out: dict | str = "not tried"
        python = Path(sys.executable).resolve()
        checkout = Path(collectors.__file__).resolve().parents[1]
        if reachable_by_nobody(checkout) and reachable_by_nobody(python.parent):
            out = _run(tree, "", user=NOBODY, group=NOBODY, extra_groups=[])
        if isinstance(out, str):
            for dirpath, _dirs, files in os.walk(tree):  # back to root: the caps way
                os.chown(dirpath, 0, 0)
                for name in files:
                    os.chown(os.path.join(dirpath, name), 0, 0)
            out = _run(tree, DROP_DAC_CAPS)
    else:
        out = _run(tree, "")
    if isinstance(out, str):
        pytest.skip(f"no way to produce a real EACCES here: {out}")
    first, second, third = out["first"], out["second"], out["third"]
    assert sorted(p["pid"] for p in first["processes"]) == [201, 202, 203, 204]  # not 205
    # Between listing and reading: 203 exited (skipped), 201/202 denied (hidden, named).
    assert [p["pid"] for p in second["processes"]] == [204]
    hidden = {h["pid"]: h for h in second["hidden"]}
    assert set(hidden) == {201, 202}
    assert all(
        h["reason"] == "permission denied reading /proc/PID/status" and h["comm"] == "llama-server"
        for h in hidden.values()
    )
    # The fresh listing no longer has 203: it is reported as exited exactly once.
    exits = [e["pid"] for e in (*second["exited"], *third["exited"])]
    assert exits == [203]
    assert [p["pid"] for p in third["processes"]] == [204]
