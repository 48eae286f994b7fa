"""collectors/proc_events.py ``take_execs``: the pids that exec'd since the last call,
for the procfs collector's exec check (issue 32 item 3), and None whenever some may be
missing, so the collector falls back to re-reading every young process. Real processes,
the real connector (skipped where it is refused)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from collectors.proc_events import ProcEvent, ProcEventListener


def opened(**kwargs: int) -> ProcEventListener:
    listener = ProcEventListener(**kwargs)  # type: ignore[arg-type]
    if not listener.open() or not listener.verify():
        listener.close()
        pytest.skip(f"no process-event connector here: {listener.error}")
    return listener


@pytest.fixture
def listener() -> Iterator[ProcEventListener]:
    events = opened()
    try:
        yield events
    finally:
        events.close()


def run_true() -> int:
    true = shutil.which("true")
    assert true is not None
    proc = subprocess.Popen([true])
    proc.wait()
    return proc.pid


def test_an_exec_is_taken_once(listener: ProcEventListener) -> None:
    listener.take_execs()
    pid = run_true()
    got: set[int] = set()
    deadline = time.monotonic() + 30  # hang guard
    while pid not in got and time.monotonic() < deadline:
        execs = listener.take_execs()
        assert execs is not None
        got |= execs
        time.sleep(0.05)
    assert pid in got
    again = listener.take_execs()
    assert again is not None and pid not in again  # taken: not given twice


def test_too_many_execs_between_two_takes_make_it_unknown() -> None:
    listener = opened(max_kept=4)
    try:
        listener.take_execs()
        pids = [run_true() for _ in range(6)]
        deadline = time.monotonic() + 30  # hang guard: until the exits are read too
        while listener.exit_of(pids[-1]) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.take_execs() is None
        assert listener.take_execs() is not None  # known again from the next call on
    finally:
        listener.close()


def test_lost_events_make_it_unknown(listener: ProcEventListener) -> None:
    listener.take_execs()
    listener._keep([], [ProcEvent("exec", 4242, 0)], lost=True)  # as after ENOBUFS
    assert listener.take_execs() is None


def test_a_closed_or_unopened_listener_knows_no_execs(listener: ProcEventListener) -> None:
    assert ProcEventListener().take_execs() is None
    listener.close()
    assert listener.take_execs() is None
