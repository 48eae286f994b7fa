"""collectors/procfs.py's exec check with the process-event connector's execs (issue 32
item 3, churn): with ``Tick.execs`` known, a young process is not re-read every tick (the
noise case: 0 stat reads); without it every young one is, as before; a real exec seen by
the real listener is picked up at the next tick (the signal case), whatever the age.
Real processes on the real /proc; each tick's listing is cut to our own processes so
nothing else on the box is counted."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors import procfs, proctable
from collectors.base import CollectorOptions, Roots, Tick, now_ms
from collectors.proc_events import ProcEventListener
from collectors.procfs import ProcfsCollector

REAL = Roots()
NO_TOP = CollectorOptions(top_n=0, pss_per_tick=0)


def tick(pids: list[int], execs: frozenset[int] | None) -> Tick:
    """A tick of the real /proc whose listing holds only ``pids`` (those still listed)."""
    listed = proctable.list_pids(REAL.proc)
    t = Tick(REAL, now_ms(), execs=execs)
    t._pids = {pid: listed[pid] for pid in pids if pid in listed}
    return t


@pytest.fixture
def sleepers() -> Iterator[list[int]]:
    sleep = shutil.which("sleep")
    assert sleep is not None
    procs = [subprocess.Popen([sleep, "3210.5"]) for _ in range(20)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_young_processes_are_not_reread_when_the_execs_are_known(sleepers: list[int]) -> None:
    collector = ProcfsCollector(REAL, NO_TOP)
    collector.collect(tick(sleepers, frozenset()))
    assert collector.stat_reads == 20  # each new process read once
    for _ in range(3):
        collector.collect(tick(sleepers, frozenset()))
    assert collector.stat_reads == 20  # young, but none exec'd: no re-read


def test_without_the_execs_every_young_process_is_reread_as_before(sleepers: list[int]) -> None:
    collector = ProcfsCollector(REAL, NO_TOP)
    collector.collect(tick(sleepers, None))
    collector.collect(tick(sleepers, None))
    assert collector.stat_reads == 40  # all 20 are < 5 s old: checked again


def test_only_the_pids_that_execd_are_reread(sleepers: list[int]) -> None:
    collector = ProcfsCollector(REAL, NO_TOP)
    collector.collect(tick(sleepers, frozenset()))
    collector.collect(tick(sleepers, frozenset(sleepers[:2])))
    assert collector.stat_reads == 22


@pytest.fixture
def listener() -> Iterator[ProcEventListener]:
    events = ProcEventListener()
    if not events.open() or not events.verify():
        events.close()
        pytest.skip(f"no process-event connector here: {events.error}")
    try:
        yield events
    finally:
        events.close()


def wait_for(pid: int, listener: ProcEventListener, got: set[int]) -> None:
    """Gather the listener's execs until ``pid`` is among them (a hang guard, no timing)."""
    deadline = time.monotonic() + 30
    while pid not in got and time.monotonic() < deadline:
        execs = listener.take_execs()
        assert execs is not None  # nothing was lost on this quiet socket
        got |= execs
        time.sleep(0.05)
    assert pid in got


def test_a_real_exec_is_seen_at_the_next_tick(
    listener: ProcEventListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen through the connector, whatever the age: no age window at all here."""
    monkeypatch.setattr(procfs, "EXEC_CHECK_WINDOW_S", 0.0)
    sh, sleep = shutil.which("sh"), shutil.which("sleep")
    assert sh is not None and sleep is not None
    proc = subprocess.Popen(
        [sh, "-c", f"read x; exec {sleep} 3210.5"], stdin=subprocess.PIPE, text=True
    )
    try:
        collector = ProcfsCollector(REAL, NO_TOP)
        got: set[int] = set()
        collector.collect(tick([proc.pid], listener.take_execs()))
        assert collector._known[proc.pid].comm == "sh"
        execs = listener.take_execs()
        assert execs is not None and proc.pid not in execs
        collector.collect(tick([proc.pid], execs))
        assert collector._known[proc.pid].comm == "sh"  # nothing exec'd yet: same entry
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        wait_for(proc.pid, listener, got)
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sleep"
        collector.collect(tick([proc.pid], frozenset(got)))
        assert collector._known[proc.pid].comm == "sleep"
    finally:
        proc.kill()
        proc.wait()
