"""collectors/proc_events.py's reader under a burst (issue 32 item 3, churn): one wake-up
reads every datagram queued while it let them gather (``coalesce_s``), and no exit is lost
or mixed up by it. Real processes, the real connector (skipped where it is refused)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from collectors.proc_events import ProcEventListener


def test_a_burst_of_exits_costs_fewer_wakeups_than_datagrams_and_every_exit_arrives() -> None:
    listener = ProcEventListener(coalesce_s=0.2)
    if not listener.open():
        pytest.skip(f"no process-event connector here: {listener.error}")
    true = shutil.which("true") or "true"
    try:
        codes = {}
        for code in range(30):  # exit codes tell each one's status apart
            p = subprocess.Popen(["sh", "-c", f"exit {code}"] if code else [true])
            p.wait(timeout=30)
            codes[p.pid] = code
        for pid, code in codes.items():
            status = listener.exit_of(pid, wait_s=30)
            assert status is not None, pid
            assert (status.exit_code, status.exit_signal) == (code, None)
        # 30 forks, execs and exits (each its own datagram) came in far fewer wake-ups
        assert listener.datagrams >= 60
        assert listener.wakeups < listener.datagrams / 2
    finally:
        listener.close()


def test_without_coalescing_each_wakeup_is_read_at_once() -> None:
    """The noise case of the counters: ``coalesce_s=0`` reads as before, and still drains
    what is queued; every exit arrives."""
    listener = ProcEventListener(coalesce_s=0.0)
    if not listener.open():
        pytest.skip(f"no process-event connector here: {listener.error}")
    try:
        p = subprocess.Popen(["sh", "-c", "exit 3"])
        p.wait(timeout=30)
        status = listener.exit_of(p.pid, wait_s=30)
        assert status is not None and status.exit_code == 3
        assert 1 <= listener.wakeups <= listener.datagrams
    finally:
        listener.close()
