"""The process-event connector parser (linux/cn_proc.h layout) and the live listener."""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.proc_events import (
    CN_IDX_PROC,
    CN_MSG,
    CN_VAL_PROC,
    EVENT_HEAD,
    EXIT_EVENT,
    MAX_MESSAGES,
    NLMSG_HDR,
    PROC_EVENT_EXIT,
    ExitStatus,
    ProcEventListener,
    decode_wait_status,
    keep_for,
    parse_datagram,
)

PROC_EVENT_FORK = 0x00000001


def message(what: int, pid: int, tgid: int, status: int, idx: int = CN_IDX_PROC) -> bytes:
    event = EVENT_HEAD.pack(what, 0, 123) + EXIT_EVENT.pack(pid, tgid, status, 17, 1, 1)
    cn = CN_MSG.pack(idx, CN_VAL_PROC, 0, 0, len(event), 0)
    body = cn + event
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), 3, 0, 0, 0) + body


def test_wait_status_decoding() -> None:
    assert decode_wait_status(3 << 8) == (3, None, False)
    assert decode_wait_status(0) == (0, None, False)
    assert decode_wait_status(signal.SIGKILL) == (None, 9, False)
    assert decode_wait_status(signal.SIGSEGV | 0x80) == (None, 11, True)


def test_exits_of_processes_are_parsed_threads_and_other_events_are_not() -> None:
    data = (
        message(PROC_EVENT_EXIT, 10, 10, 3 << 8)
        + message(PROC_EVENT_EXIT, 11, 10, 0)  # a thread of process 10
        + message(PROC_EVENT_FORK, 12, 12, 0)
        + message(PROC_EVENT_EXIT, 13, 13, 0x86, idx=7)  # another connector
        + message(PROC_EVENT_EXIT, 14, 14, 0x86)
    )
    assert parse_datagram(data, 5) == [
        ExitStatus(10, 3, None, False, 5),
        ExitStatus(14, None, 6, True, 5),
    ]


def test_truncated_and_lying_lengths_are_skipped() -> None:
    good = message(PROC_EVENT_EXIT, 10, 10, 0)
    assert parse_datagram(good[:-1]) == []
    lying = struct.pack("=I", 10**6) + good[4:]
    assert parse_datagram(lying) == []
    assert parse_datagram(struct.pack("=I", 0) + good[4:]) == []  # no endless loop


def test_the_message_count_is_bounded() -> None:
    many = message(PROC_EVENT_EXIT, 10, 10, 0) * (MAX_MESSAGES * 4)
    assert len(parse_datagram(many)) == MAX_MESSAGES


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes_never_raise(data: bytes) -> None:
    started = time.process_time()
    out = parse_datagram(data)
    assert len(out) <= MAX_MESSAGES
    assert time.process_time() - started < 2  # a hang guard (CPU s), not a speed claim


@settings(max_examples=2000, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64))
def test_mutated_exit_messages_never_raise(status: int, pid: int, tail: bytes) -> None:
    out = parse_datagram(message(PROC_EVENT_EXIT, pid, pid, status) + tail)
    for e in out:
        assert e.pid == pid > 0
        assert (e.exit_code is None) != (e.exit_signal is None)


def test_the_listener_sees_real_exits() -> None:
    listener = ProcEventListener()
    if not listener.open():
        pytest.skip(f"no process-event connector here: {listener.error}")
    try:
        three = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
        sleeper = subprocess.Popen(["sleep", "60"])
        sleeper.send_signal(signal.SIGKILL)
        three.wait(timeout=30)
        sleeper.wait(timeout=30)
        got3 = listener.exit_of(three.pid, wait_s=10)
        got9 = listener.exit_of(sleeper.pid, wait_s=10)
        assert got3 is not None and (got3.exit_code, got3.exit_signal) == (3, None)
        assert got9 is not None and (got9.exit_code, got9.exit_signal) == (None, 9)
    finally:
        listener.close()
    assert not listener.active


def test_the_listener_keeps_a_bounded_number_of_exits() -> None:
    listener = ProcEventListener(max_kept=8, coalesce_s=0.0)  # each wake-up read at once
    if not listener.open():
        pytest.skip(f"no process-event connector here: {listener.error}")
    try:
        pids = []
        for _ in range(12):
            p = subprocess.Popen(["true"])
            p.wait(timeout=30)
            pids.append(p.pid)
            # read before the next starts (the reader thread is asynchronous; other exits
            # on the box count too, but 8 of them would have to come in this instant)
            assert listener.exit_of(p.pid, wait_s=30) is not None
            assert len(listener._events) <= 8
        assert len(listener._events) == 8
        # the oldest went first: 11 exits of ours were read after the first one
        assert listener.exit_of(pids[0]) is None
        assert listener.exit_of(pids[-1]) is not None
    finally:
        listener.close()


def test_the_listener_forgets_pids_with_no_event_for_keep_s() -> None:
    """Issue 32: the map filled to MAX_KEPT (8192 pids, ~3 MiB) on a box that forks a few
    processes a second, the soak's slow RSS rise. A pid silent for ``keep_s`` goes; one
    whose exit came within it is still answered."""
    listener = ProcEventListener(keep_s=1.0)
    if not listener.open():
        pytest.skip(f"no process-event connector here: {listener.error}")
    try:
        old = []
        for _ in range(20):
            p = subprocess.Popen(["true"])
            p.wait(timeout=30)
            assert listener.exit_of(p.pid, wait_s=30) is not None
            old.append(p.pid)
        time.sleep(1.5)  # past keep_s: the next event expires them
        p = subprocess.Popen(["true"])
        p.wait(timeout=30)
        assert listener.exit_of(p.pid, wait_s=30) is not None  # inside the window: kept
        with listener._lock:
            kept = set(listener._events)
        assert not kept & set(old) - {p.pid}  # (a pid reused by the box since is fine)
    finally:
        listener.close()


def test_the_window_covers_four_ticks_and_at_least_a_minute() -> None:
    assert keep_for(0.25) == 60.0
    assert keep_for(3600) == 4 * 3600


def test_a_server_that_dies_in_half_a_second_is_seen_from_its_exec(tmp_path) -> None:  # noqa: ANN001
    """A llama-server that refuses its flags exits before any sample could track it: the
    connector's exec event names it (``/proc/PID/comm`` read then) and its exit is kept
    as an early exit; a program of another name is not."""
    import time as _time

    from collectors.proc_events import is_server_comm, parse_events

    listener = ProcEventListener()
    if not listener.open():
        pytest.skip(f"no process-event connector here: {listener.error}")
    try:
        if not listener.verify():
            pytest.skip(f"the connector sends nothing here: {listener.error}")
        listener.take_early_exits()
        server = tmp_path / "llama-server"
        server.write_text('#!/bin/sh\nsleep 0.3\necho "error: invalid argument: $1" >&2\nexit 1\n')
        server.chmod(0o755)
        other = tmp_path / "not-a-server"
        other.write_text("#!/bin/sh\nsleep 0.3\nexit 1\n")
        other.chmod(0o755)
        started = [subprocess.Popen([str(p), "--no-mmap"], stderr=subprocess.DEVNULL)
                   for p in (server, other)]  # fmt: skip
        for p in started:
            p.wait(timeout=30)
        early = []
        deadline = _time.monotonic() + 10
        while _time.monotonic() < deadline and not early:
            early = [e for e in listener.take_early_exits() if e[0].pid == started[0].pid]
            _time.sleep(0.05)
        assert early, "the early exit was not seen"
        (young, status), *_ = early
        assert young.comm == "llama-server" and young.start_ticks > 0
        assert (status.exit_code, status.exit_signal) == (1, None)
        assert not [e for e in listener.take_early_exits() if e[0].pid == started[1].pid]
    finally:
        listener.close()
    assert is_server_comm("llama-server") and is_server_comm("ollama")
    assert not is_server_comm("sh") and not is_server_comm("python3")
    assert parse_events(b"garbage")[0] == []
