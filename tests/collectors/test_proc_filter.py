"""The kernel-side filter of the process-event connector (collectors/proc_filter.py): real
sockets, the real kernel running the BPF program; the datagrams are sent by this test to
an unsubscribed socket, so nothing else on the box reaches it."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys

import pytest

from collectors import proc_filter
from collectors.proc_events import (
    CN_IDX_PROC,
    CN_MSG,
    CN_VAL_PROC,
    EVENT_HEAD,
    EXEC_EVENT,
    EXIT_EVENT,
    FORK_EVENT,
    NETLINK_CONNECTOR,
    NLMSG_HDR,
    PROC_EVENT_EXEC,
    PROC_EVENT_EXIT,
    PROC_EVENT_FORK,
    ProcEventListener,
    parse_proc_events,
)

PROC_EVENT_COMM = 0x00000200


def datagram(what: int, union: bytes) -> bytes:
    event = EVENT_HEAD.pack(what, 0, 123) + union
    cn = CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(event), 0)
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(cn) + len(event), 3, 0, 0, 0) + cn + event


CASES = {
    "thread fork": (datagram(PROC_EVENT_FORK, FORK_EVENT.pack(10, 10, 11, 10)), False),
    "process fork": (datagram(PROC_EVENT_FORK, FORK_EVENT.pack(10, 10, 12, 12)), True),
    "exec": (datagram(PROC_EVENT_EXEC, EXEC_EVENT.pack(12, 12)), True),
    "thread exit": (datagram(PROC_EVENT_EXIT, EXIT_EVENT.pack(11, 10, 0, 17, 10, 10)), False),
    "process exit": (datagram(PROC_EVENT_EXIT, EXIT_EVENT.pack(12, 12, 3 << 8, 17, 10, 10)), True),
    "comm change": (datagram(PROC_EVENT_COMM, EXEC_EVENT.pack(12, 12) + b"x" * 16), False),
    "truncated exit": (datagram(PROC_EVENT_EXIT, struct.pack("=i", 12)), False),
}


def _received(sent: list[bytes]) -> list[bytes]:
    """What a filtered, unsubscribed connector socket receives of ``sent`` (in order)."""
    try:
        rx = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        tx = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
    except OSError as exc:
        pytest.skip(f"no netlink connector here: {exc}")
    with rx, tx:
        rx.bind((0, 0))  # no multicast group: only what is sent to it
        assert proc_filter.attach(rx)
        port = rx.getsockname()[0]
        try:
            for data in sent:
                tx.sendto(data, (port, 0))
        except PermissionError as exc:
            pytest.skip(f"cannot send to a connector socket: {exc}")
        tx.sendto(datagram(PROC_EVENT_EXEC, EXEC_EVENT.pack(99, 99)), (port, 0))  # end mark
        got = []
        rx.settimeout(30)  # hang guard; the end mark is already queued
        while (data := rx.recv(65536)) and parse_proc_events(data)[0].pid != 99:
            got.append(data)
        return got


def test_the_kernel_drops_threads_and_other_events_and_passes_processes() -> None:
    got = _received([data for data, _ in CASES.values()])
    assert got == [data for data, kept in CASES.values() if kept]
    assert [(e.kind, e.pid) for d in got for e in parse_proc_events(d)] == [
        ("fork", 12),
        ("exec", 12),
        ("exit", 12),
    ]


def test_a_thousand_thread_events_wake_nothing_and_the_process_exit_still_passes() -> None:
    noise = [CASES["thread fork"][0], CASES["thread exit"][0]] * 500
    assert _received([*noise, CASES["process exit"][0]]) == [CASES["process exit"][0]]


def test_the_live_listener_is_filtered_and_still_sees_a_threaded_process_exit() -> None:
    listener = ProcEventListener()
    if not listener.open():
        pytest.skip(f"no process-event connector here: {listener.error}")
    try:
        assert listener.filtered
        code = "import threading,sys\n[threading.Thread(target=int).start() for _ in range(50)]\n"
        child = subprocess.Popen([sys.executable, "-c", code + "sys.exit(7)"])
        child.wait(timeout=60)
        got = listener.exit_of(child.pid, wait_s=30)
        assert got is not None and got.exit_code == 7
    finally:
        listener.close()
