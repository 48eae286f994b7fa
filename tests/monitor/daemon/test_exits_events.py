"""Exit events without noise (issue 19), on a real database file: an inference server's
exit is always an event; vramscope's own CLI runs and short-lived other processes are
not (their rows are still marked exited); a crash is, whoever crashed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from stopping import STOP_GUARD_S

from collectors.base import DeviceSample, ExitedProcess, ProcessInfo, ProcessMemory, Snapshot
from monitor.analysis.exits_judged import JUDGE
from monitor.store.database import Store

GIB = 1024**3
T0 = 1_800_000_000_000
HOST = DeviceSample("host", "procfs", "host", "Host RAM", "host", 64 * GIB, 20 * GIB)
PROCS = {
    1: ProcessInfo(
        1,
        10,
        None,
        0,
        0,
        "llama-server",
        ("llama-server", "-m", "m.gguf"),
        "llama.cpp",
        ("inference",),
    ),
    2: ProcessInfo(2, 20, None, 0, 0, "python3", ("python3", "job.py"), None, ("top",)),
    3: ProcessInfo(
        3,
        30,
        None,
        0,
        0,
        "vramscope",
        ("/usr/bin/python3", "/usr/local/bin/vramscope", "status"),
        None,
        ("top",),
    ),
    4: ProcessInfo(
        4, 40, None, 0, 0, "python3", ("python3", "-m", "monitor", "events"), None, ("top",)
    ),
    5: ProcessInfo(5, 50, None, 0, 0, "python3", ("python3", "hog.py"), None, ("top",)),
    6: ProcessInfo(6, 60, None, 0, 0, "sort", ("sort", "big"), None, ("top",)),
}


def tick(ts: int, pids: list[int], exited: tuple = ()) -> Snapshot:
    return Snapshot(
        ts,
        (HOST,),
        tuple(PROCS[p] for p in pids),
        tuple(ProcessMemory(p, "host", rss_anon_bytes=GIB) for p in pids),
        (),
        exited,
        (),
    )


def gone(pid: int, ts: int, **kw) -> ExitedProcess:  # noqa: ANN003
    return ExitedProcess(pid, PROCS[pid].start_ticks, ts, **kw)


def test_only_exits_worth_telling_become_events(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    store = Store.open(db, exit_judge=JUDGE)
    store.write(tick(T0, [6]))  # 6 lives for two minutes
    store.write(tick(T0 + 117_000, [1, 2, 3, 4, 5, 6]))  # the rest for 3 s (two ticks:
    store.write(tick(T0 + 118_000, [1, 2, 3, 4, 5, 6]))  # one tick is not even a row)
    end = T0 + 120_000
    store.write(
        tick(
            end,
            [],
            exited=(
                gone(1, end, exit_code=0, cause="exited"),
                gone(2, end, exit_code=0, cause="exited"),
                gone(3, end, exit_code=0, cause="exited"),
                gone(4, end, exit_code=1, cause="exited_error"),
                gone(5, end, exit_signal=11, cause="crashed"),
                gone(6, end, exit_code=0, cause="exited"),
            ),
        )
    )
    store.close()
    conn = sqlite3.connect(db)
    events = {
        json.loads(d)["pid"]
        for (d,) in conn.execute("SELECT data FROM events WHERE kind = 'process_exit'")
    }
    assert events == {1, 5, 6}  # the server, the crash, the long-lived one
    rows = dict(
        conn.execute("SELECT pid, exit_cause FROM processes WHERE exited_ms = ?", (end,)).fetchall()
    )
    assert rows == {
        1: "exited",
        2: "exited",
        3: "exited",
        4: "exited_error",
        5: "crashed",
        6: "exited",
    }
    conn.close()


def test_doctor_names_the_exit_status_source() -> None:
    from collectors.proc_events import ProcEventListener
    from monitor.cli.doctor import exit_status_check

    probe = ProcEventListener()
    works = probe.open() and probe.verify()
    probe.close()
    (check,) = exit_status_check(kernel_log_readable=True)
    assert check.name == "exit status"
    if works:
        assert check.level == "ok" and check.detail.startswith("source: connector")
    else:
        assert check.level == "warn" and "zombie" in check.detail and "kernel log" in check.detail


def test_an_alerting_exit_of_a_process_with_no_row_still_has_its_events(tmp_path: Path) -> None:
    """A server OOM-killed before the tick that would have written its row (the counter
    and the alert saw it): its process_exit and crash events are still recorded; so is a
    server the connector saw exec and exit at once (a refused flag); a quiet exit of any
    other such process leaves nothing (there is nothing to tell)."""
    db = tmp_path / "v.db"
    store = Store.open(db, exit_judge=JUDGE)
    store.write(tick(T0, [6]))
    end = T0 + 1_000
    store.write(
        tick(
            end,
            [6],
            exited=(
                ExitedProcess(
                    77,
                    700,
                    end - 300,
                    comm="llama-server",
                    exit_signal=9,
                    exit_source="connector",
                    cause="oom_killed",
                ),
                ExitedProcess(78, 800, end - 300, comm="sh", exit_code=0, cause="exited"),
                # a server the connector saw exec and die at once (a refused flag): told
                ExitedProcess(
                    79,
                    900,
                    end - 500,
                    comm="llama-server",
                    exit_code=1,
                    exit_source="connector",
                    cause="exited_error",
                ),
            ),
        )  # fmt: skip
    )
    store.close()
    conn = sqlite3.connect(db)
    kinds = sorted(
        (kind, json.loads(d)["pid"], json.loads(d)["comm"])
        for kind, d in conn.execute("SELECT kind, data FROM events")
        if kind in ("process_exit", "crash")
    )
    conn.close()
    assert kinds == [
        ("crash", 77, "llama-server"),
        ("process_exit", 77, "llama-server"),
        ("process_exit", 79, "llama-server"),
    ]


def test_a_real_daemon_records_a_server_that_died_before_its_first_tick(tmp_path: Path) -> None:
    """A real daemon ticking every 2 s; a 'llama-server' that refuses its flag and exits
    with code 1 after 0.3 s, between two ticks: never sampled, yet its exit is an event
    (seen by the kernel's process-event connector from its exec)."""
    import subprocess as sp
    import time

    import daemon_harness

    from collectors.proc_events import ProcEventListener

    probe = ProcEventListener()
    works = probe.open() and probe.verify()
    probe.close()
    if not works:
        pytest.skip(f"no process-event connector here: {probe.error}")
    server = tmp_path / "bin" / "llama-server"
    server.parent.mkdir()
    server.write_text('#!/bin/sh\nsleep 0.3\necho "error: invalid argument: $1" >&2\nexit 1\n')
    server.chmod(0o755)
    with daemon_harness.running(tmp_path, interval_s=2.0) as d:
        time.sleep(0.5)  # just after a tick: the server lives and dies between two
        proc = sp.Popen([str(server), "--no-mmap"], stderr=sp.DEVNULL)
        proc.wait(timeout=STOP_GUARD_S)

        def recorded() -> list[dict]:
            conn = sqlite3.connect(d.db)
            try:
                rows = conn.execute("SELECT data FROM events WHERE kind = 'process_exit'")
                return [e for (x,) in rows if (e := json.loads(x))["pid"] == proc.pid]
            finally:
                conn.close()

        (event,) = d.poll("the early exit's event", recorded, timeout_s=30)
    assert event["comm"] == "llama-server" and event["exit_code"] == 1
    assert event["exit_source"] == "connector"
