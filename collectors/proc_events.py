"""Exit status of every process, from the kernel's process-event connector.

Source: netlink ``NETLINK_CONNECTOR`` (11), multicast group ``CN_IDX_PROC`` (1), after a
``PROC_CN_MCAST_LISTEN`` request (linux/cn_proc.h, drivers/connector/cn_proc.c). Each
message is ``struct nlmsghdr`` (16 bytes) + ``struct cn_msg`` (20 bytes) + ``struct
proc_event``: ``what`` (u32), ``cpu`` (u32), ``timestamp_ns`` (u64), then the union; for
``PROC_EVENT_EXIT`` (0x80000000) that is ``exit_proc_event {pid, tgid, exit_code,
exit_signal, parent_pid, parent_tgid}``. ``exit_code`` is the wait(2) status: the exit
code is ``(status >> 8) & 0xff``, the terminating signal ``status & 0x7f``, a core dump
``status & 0x80``. Only the thread-group leader's exit (``pid == tgid``) is kept: that is
the process. Needs CAP_NET_ADMIN in the initial network namespace; without it
:meth:`ProcEventListener.open` returns False and says why in ``error``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_EXIT = 0x80000000
PROC_EVENT_EXEC = 0x00000002
EXEC_EVENT = struct.Struct("=ii")  # pid, tgid
MAX_YOUNG = 256  # servers exec'd and not yet seen exiting, remembered at most
NLMSG_DONE = 3
NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
EVENT_HEAD = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
EXIT_EVENT = struct.Struct("=iiIIii")  # pid, tgid, exit_code, exit_signal, ppid, ptgid
MAX_KEPT = 8192  # exits remembered (oldest dropped first): minutes on a busy host
MAX_MESSAGES = 64  # per datagram parsed at most


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How one process ended, as the kernel reported it (None when not applicable)."""

    pid: int
    exit_code: int | None  # for a normal exit
    exit_signal: int | None  # for a death by signal
    core_dumped: bool
    ts_ms: int  # when it was received (epoch ms)


def decode_wait_status(status: int) -> tuple[int | None, int | None, bool]:
    """wait(2) status -> (exit code, signal, core dumped)."""
    if status & 0x7F:
        return None, status & 0x7F, bool(status & 0x80)
    return (status >> 8) & 0xFF, None, False


@dataclass(frozen=True, slots=True)
class YoungServer:
    """An inference server seen at its exec (``/proc/PID/comm`` read then), so that its exit
    is known even when it dies before any sample tracked it (a refused flag: half a second)."""

    pid: int
    start_ticks: int
    comm: str
    exec_ms: int


def is_server_comm(comm: str) -> bool:
    """llama.cpp's programs (comm is cut at 15 characters: llama-server, llama-cli, ...) and
    ollama's runner."""
    return comm.startswith("llama-") or comm in ("llama", "ollama", "ollama_llama_se")


def parse_datagram(data: bytes, ts_ms: int = 0) -> list[ExitStatus]:
    """The process exits in one netlink datagram (other events and garbage are skipped;
    never raises; at most ``MAX_MESSAGES`` messages are looked at)."""
    return parse_events(data, ts_ms)[1]


def parse_events(data: bytes, ts_ms: int = 0) -> tuple[list[int], list[ExitStatus]]:
    """(pids that exec'd, process exits) in one netlink datagram; never raises."""
    execs: list[int] = []
    out: list[ExitStatus] = []
    offset = 0
    for _ in range(MAX_MESSAGES):
        if len(data) - offset < NLMSG_HDR.size:
            break
        length = NLMSG_HDR.unpack_from(data, offset)[0]
        if length < NLMSG_HDR.size or offset + length > len(data):
            break
        body = data[offset + NLMSG_HDR.size : offset + length]
        offset += (length + 3) & ~3  # NLMSG_ALIGN
        if len(body) < CN_MSG.size + EVENT_HEAD.size + EXEC_EVENT.size:
            continue
        idx, val = CN_MSG.unpack_from(body, 0)[:2]
        if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC):
            continue
        what = EVENT_HEAD.unpack_from(body, CN_MSG.size)[0]
        if what == PROC_EVENT_EXEC:
            pid, tgid = EXEC_EVENT.unpack_from(body, CN_MSG.size + EVENT_HEAD.size)
            if pid == tgid and pid > 0:
                execs.append(pid)
            continue
        if what != PROC_EVENT_EXIT or len(body) < CN_MSG.size + EVENT_HEAD.size + EXIT_EVENT.size:
            continue
        pid, tgid, status, _sig, _ppid, _ptgid = EXIT_EVENT.unpack_from(
            body, CN_MSG.size + EVENT_HEAD.size
        )
        if pid != tgid or pid <= 0:
            continue  # a thread of a process, not the process
        code, signal, core = decode_wait_status(status)
        out.append(ExitStatus(pid, code, signal, core, ts_ms))
    return execs, out


def young_server(pid: int, ts_ms: int, proc: str = "/proc") -> YoungServer | None:
    """The server that ``pid`` just exec'd, or None (another program, or gone already)."""
    try:
        with open(f"{proc}/{pid}/comm", "rb") as f:
            comm = f.read(64).decode("utf-8", "replace").strip()
        if not is_server_comm(comm):
            return None
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read(4096)
        fields = stat[stat.rindex(b")") + 2 :].split()
        return YoungServer(pid, int(fields[19]), comm, ts_ms)
    except (OSError, ValueError, IndexError):
        return None


def listen_request() -> bytes:
    """The PROC_CN_MCAST_LISTEN message that starts the stream."""
    op = struct.pack("=I", PROC_CN_MCAST_LISTEN)
    cn = CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(op), 0)
    return (
        NLMSG_HDR.pack(NLMSG_HDR.size + len(cn) + len(op), NLMSG_DONE, 0, 0, os.getpid()) + cn + op
    )


class ProcEventListener:
    """A background thread reading exits into a bounded ``pid -> ExitStatus`` map."""

    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        self.max_kept = max_kept
        self.error: str | None = None
        self._exits: OrderedDict[int, ExitStatus] = OrderedDict()
        self._young: OrderedDict[int, YoungServer] = OrderedDict()
        self._early: list[tuple[YoungServer, ExitStatus]] = []
        self._lock = threading.Condition()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def active(self) -> bool:
        return self._sock is not None and not self._closed

    def open(self) -> bool:
        """Subscribe; False (with ``error``) when the kernel or our rights say no."""
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        except (OSError, AttributeError) as exc:
            self.error = f"netlink connector unavailable: {exc}"
            return False
        try:
            sock.bind((0, CN_IDX_PROC))
            sock.send(listen_request())
            sock.settimeout(0.5)
        except OSError as exc:
            sock.close()
            self.error = (
                f"process events connector refused ({exc.strerror or exc}); "
                "needs CAP_NET_ADMIN in the host network namespace"
            )
            return False
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="proc-events", daemon=True)
        self._thread.start()
        return True

    def verify(self, timeout_s: float = 2.0) -> bool:
        """Whether exits really arrive: a kernel before 6.6 accepts the subscription of a
        process without CAP_NET_ADMIN and then sends nothing. Runs ``true`` once and waits
        for its exit; False (with ``error``) when it never comes."""
        import shutil
        import subprocess
        import sys

        argv = [shutil.which("true") or sys.executable] + (
            [] if shutil.which("true") else ["-c", "pass"]
        )
        try:
            child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            child.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.error = f"cannot check the process events connector: {exc}"
            return False
        if self.exit_of(child.pid, wait_s=timeout_s) is not None:
            return True
        self.error = (
            "subscribed to the process events connector but no exit arrived "
            "(before Linux 6.6 it needs CAP_NET_ADMIN)"
        )
        return False

    def _run(self) -> None:
        sock = self._sock
        while not self._closed and sock is not None:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                if exc.errno == 105:  # ENOBUFS: we fell behind and lost some; go on
                    continue
                if not self._closed:
                    self.error = f"process events connector failed: {exc}"
                break
            now_ms = int(time.time() * 1000)
            execs, found = parse_events(data, now_ms)
            young = [y for pid in execs if (y := young_server(pid, now_ms)) is not None]
            if found or young:
                self._keep(young, found)

    def _keep(self, young: list[YoungServer], found: list[ExitStatus]) -> None:
        with self._lock:
            for y in young:
                self._young[y.pid] = y
                while len(self._young) > MAX_YOUNG:
                    self._young.popitem(last=False)
            for status in found:
                self._exits.pop(status.pid, None)
                self._exits[status.pid] = status
                server = self._young.pop(status.pid, None)
                if server is not None and len(self._early) < MAX_YOUNG:
                    self._early.append((server, status))
            while len(self._exits) > self.max_kept:
                self._exits.popitem(last=False)
            self._lock.notify_all()

    def take_early_exits(self) -> list[tuple[YoungServer, ExitStatus]]:
        """The servers that exited since the last call, each with its exec and its exit."""
        with self._lock:
            out, self._early = self._early, []
            return out

    def exit_of(
        self, pid: int, wait_s: float = 0.0, since_ms: int | None = None
    ) -> ExitStatus | None:
        """The exit recorded for ``pid`` (received at or after ``since_ms``), waiting up to
        ``wait_s`` for a datagram the thread has not read yet."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while True:
                found = self._exits.get(pid)
                if found is not None and (since_ms is None or found.ts_ms >= since_ms):
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or not self.active:
                    return None
                self._lock.wait(left)

    def close(self) -> None:
        self._closed = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout=2)
