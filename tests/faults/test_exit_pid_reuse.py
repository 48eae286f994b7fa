"""How a server ended, when its pid is reused at once, or when a local process forges
process-event datagrams (issue 28 item 6).

A real daemon tracks a real "llama-server" (a copy of the Python interpreter); the test
kills it with SIGKILL, reaps it, and forces the next process onto the same pid by writing
``/proc/sys/kernel/ns_last_pid`` (root; under ``flock`` as CRIU does, retried when another
process took the pid first): that process runs ``true`` and exits 0 before the daemon's
next tick. The daemon must still record the server as killed (SIGKILL), not "exited 0".
A forged exit (code 0, sent to the daemon's connector socket by a root user-space process,
sender port id != 0) before and after the kill must be ignored. The picking is also tested
as a pure function on a recorded fork/exec/exit sequence.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import daemon_harness
import pytest

from collectors.proc_events import (
    CN_IDX_PROC,
    CN_MSG,
    CN_VAL_PROC,
    EVENT_HEAD,
    EXIT_EVENT,
    NETLINK_CONNECTOR,
    NLMSG_HDR,
    PROC_EVENT_EXIT,
    ExitStatus,
    ProcEvent,
    ProcEventListener,
    pick_exit,
)

SERVER = "import time; print('ready', flush=True); time.sleep(600)"
TICK_NS = 10_000_000


def test_the_exit_of_the_sampled_process_is_picked_not_the_last_of_its_pid() -> None:
    """Recorded sequence for pid 500: an old holder forked at 1 s exits 0 at 2 s; the server
    forks at 3 s (/proc start time 2.995 s, floored to a tick), is sampled at 5 s, is killed
    at 6 s; a new holder forks at 6.1 s and exits 0 at 6.2 s."""
    old = ExitStatus(500, 0, None, False, 0)
    killed = ExitStatus(500, None, signal.SIGKILL, False, 0)
    new = ExitStatus(500, 0, None, False, 0)
    events = [
        ProcEvent("fork", 500, 1_000_000_000),
        ProcEvent("exec", 500, 1_100_000_000),
        ProcEvent("exit", 500, 2_000_000_000, old),
        ProcEvent("fork", 500, 3_000_000_000),
        ProcEvent("exec", 500, 3_100_000_000),
        ProcEvent("exit", 500, 6_000_000_000, killed),
        ProcEvent("fork", 500, 6_100_000_000),
        ProcEvent("exit", 500, 6_200_000_000, new),
    ]
    start_ns = 2_990_000_000
    assert pick_exit(events, start_ns, TICK_NS, alive_ns=5_000_000_000) is killed
    assert pick_exit(events, start_ns, TICK_NS) is killed
    # sampled before its fork arrived (the sample's clock a little behind): the fork decides
    assert pick_exit(events, start_ns, TICK_NS, alive_ns=1_500_000_000) is killed
    # the old holder, from its own start time
    assert pick_exit(events, 990_000_000, TICK_NS) is old
    # the new holder, started at 6.1 s
    assert pick_exit(events, 6_095_000_000, TICK_NS) is new
    # an old exit in the same clock tick as the start: the fork after it rules it out
    same_tick = [
        ProcEvent("exit", 7, 3_001_000_000, old),
        ProcEvent("fork", 7, 3_002_000_000),
        ProcEvent("exit", 7, 9_000_000_000, killed),
    ]
    assert pick_exit(same_tick, 3_000_000_000, TICK_NS) is killed
    assert pick_exit([], start_ns, TICK_NS) is None


def _connector_works() -> None:
    probe = ProcEventListener()
    works = probe.open() and probe.verify()
    probe.close()
    if not works:
        pytest.skip(f"no process-event connector here: {probe.error}")


def _start_server(tmp_path: Path) -> subprocess.Popen[str]:
    exe = tmp_path / "llama-server"
    if not exe.exists():
        shutil.copy(sys.executable, exe)  # looks like an inference server: tracked at once
    server = subprocess.Popen(
        [str(exe), "-c", SERVER], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    return server


def _row(db: Path, pid: int) -> tuple[str | None, int | None] | None:
    """(exit cause, exited_ms) of the processes row of ``pid``, or None."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        got = conn.execute(
            "SELECT exit_cause, exited_ms FROM processes WHERE pid = ? ORDER BY id DESC", (pid,)
        ).fetchone()
        return None if got is None else (got[0], got[1])
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()


def _exit_event(db: Path, pid: int) -> dict | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute("SELECT data FROM events WHERE kind = 'process_exit'").fetchall()
    finally:
        conn.close()
    found = [e for (d,) in rows if (e := json.loads(d)).get("pid") == pid]
    return found[-1] if found else None


def _spawn_at(pid: int, argv: list[str], tries: int = 50) -> subprocess.Popen[bytes] | None:
    """A process with exactly ``pid`` (the pid cursor set under the lock CRIU uses);
    None when other processes kept taking it first."""
    for _ in range(tries):
        with open("/proc/sys/kernel/ns_last_pid", "r+") as cursor:
            fcntl.flock(cursor, fcntl.LOCK_EX)
            cursor.write(str(pid - 1))
            cursor.flush()
            child = subprocess.Popen(argv)
        child.wait()
        if child.pid == pid:
            return child
    return None


def _tracked(d: daemon_harness.LiveDaemon, pid: int) -> None:
    d.poll("the server's row", lambda: _row(d.db, pid) is not None, timeout_s=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="forcing a pid needs root (ns_last_pid)")
def test_a_killed_server_whose_pid_is_reused_at_once_is_recorded_killed(tmp_path: Path) -> None:
    _connector_works()
    with daemon_harness.running(tmp_path, interval_s=1.0) as d:
        server = _start_server(tmp_path)
        pid = server.pid
        try:
            _tracked(d, pid)
            server.kill()
            server.wait()
            reused = _spawn_at(pid, ["true"])  # exits 0 at once, before the next tick
            assert reused is not None and reused.returncode == 0, "could not reuse the pid"
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        cause, _ = d.poll("the exit recorded", lambda: (r := _row(d.db, pid)) and r[1] and r)
        event = d.poll("the exit event", lambda: _exit_event(d.db, pid))
    print(f"pid {pid} reused by `true` (exit 0); recorded: {cause}, {event.get('how')}")
    assert cause == "killed", (cause, event)
    assert event["exit_signal"] == signal.SIGKILL and event["exit_source"] == "connector"


def _connector_port(daemon_pid: int) -> int:
    """The netlink port id of the daemon's NETLINK_CONNECTOR socket (/proc/net/netlink,
    matched by socket inode with the daemon's open files)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{daemon_pid}/fd"):
        try:
            target = os.readlink(f"/proc/{daemon_pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    with open("/proc/net/netlink") as f:
        rows = [line.split() for line in f.read().splitlines()[1:]]
    ports = [int(r[2]) for r in rows if int(r[1]) == NETLINK_CONNECTOR and int(r[9]) in inodes]
    assert len(ports) == 1, ports
    return ports[0]


def _forged_exit(pid: int, code: int) -> bytes:
    event = EVENT_HEAD.pack(PROC_EVENT_EXIT, 0, time.monotonic_ns())
    event += EXIT_EVENT.pack(pid, pid, code << 8, 17, 1, 1)
    cn = CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(event), 0)
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(cn) + len(event), 3, 0, 0, os.getpid()) + cn + event


@pytest.mark.skipif(os.geteuid() != 0, reason="sending to a connector socket needs root")
def test_a_forged_exit_datagram_from_user_space_is_ignored(tmp_path: Path) -> None:
    _connector_works()
    with daemon_harness.running(tmp_path, interval_s=1.0) as d:
        server = _start_server(tmp_path)
        pid = server.pid
        try:
            _tracked(d, pid)
            port = _connector_port(d.process.pid)
            with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR) as s:
                s.sendto(_forged_exit(pid, 0), (port, 0))  # before the real exit
                server.kill()
                server.wait()
                s.sendto(_forged_exit(pid, 0), (port, 0))  # and after it
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        cause, _ = d.poll("the exit recorded", lambda: (r := _row(d.db, pid)) and r[1] and r)
        event = d.poll("the exit event", lambda: _exit_event(d.db, pid))
    print(f"forged exit 0 for pid {pid} sent to port {port}; recorded: {cause}")
    assert cause == "killed", (cause, event)
    assert event["exit_signal"] == signal.SIGKILL
