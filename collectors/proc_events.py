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

A pid is reused: at thousands of processes a minute a server's pid can belong to a new
process (which may exit 0) before the daemon asks how the server ended. So every event of
a pid is kept (``PROC_EVENT_FORK`` of a child with that pid, its ``EXEC``, its ``EXIT``),
with the kernel's ``timestamp_ns`` (``ktime_get_ns()``: CLOCK_MONOTONIC), and
:func:`pick_exit` chooses the exit of the process that was sampled, from its start time
and its fork. Only the kernel's messages count: a datagram whose sender port id
(``nl_pid``) is not 0 was sent by a user-space process and is dropped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from collectors import proc_filter

log = logging.getLogger(__name__)

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_EXIT = 0x80000000
PROC_EVENT_EXEC = 0x00000002
PROC_EVENT_FORK = 0x00000001
EXEC_EVENT = struct.Struct("=ii")  # pid, tgid
FORK_EVENT = struct.Struct("=iiii")  # parent pid, parent tgid, child pid, child tgid
MAX_YOUNG = 256  # servers exec'd and not yet seen exiting, remembered at most
NLMSG_DONE = 3
NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
EVENT_HEAD = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
EXIT_EVENT = struct.Struct("=iiIIii")  # pid, tgid, exit_code, exit_signal, ppid, ptgid
# pids whose events are remembered (oldest dropped first), ~700 bytes each (fork, exec and
# exit measured with tracemalloc): 2.8 MiB at most, 50 s of a box forking 80 a second. The
# daemon asks for an exit the tick after the process left /proc.
MAX_KEPT = 4096
# a pid with no event for this long is forgotten, so the map holds what a box forks in a
# minute and is full within a minute; it filled to 8192 pids (5.6 MiB) over tens of
# minutes before (issue 32: the soak's slow RSS rise)
KEEP_S = 60.0

MAX_PER_PID = 8  # events kept per pid (fork, exec, exit of the last few holders)
MAX_MESSAGES = 64  # per datagram parsed at most
# After a wake-up the reader lets the next events queue this long, then reads them all: on
# a box starting dozens of processes a second one wake-up carries many datagrams (each
# wake-up of a Python thread costs ~80-100 us of CPU here, its parsing ~20 us). An exit is
# read this much later at most; the daemon waits up to 0.2 s for one (monitor/daemon/exits.py).
COALESCE_S = 0.1
MAX_DRAIN = 512  # datagrams read per wake-up at most
_RECV_TIMEOUT = struct.pack("@ll", 0, 500_000)  # SO_RCVTIMEO (struct timeval): 0.5 s


def keep_for(interval_s: float) -> float:
    """How long a sampler ticking every ``interval_s`` needs a pid's events kept."""
    return max(KEEP_S, 4 * interval_s)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How one process ended, as the kernel reported it (None when not applicable)."""

    pid: int
    exit_code: int | None  # for a normal exit
    exit_signal: int | None  # for a death by signal
    core_dumped: bool
    ts_ms: int  # when it was received (epoch ms)


@dataclass(frozen=True, slots=True)
class ProcEvent:
    """One kernel event about a process: ``kind`` "fork" (a process with this pid was
    created), "exec" or "exit" (then ``status``), at ``ts_ns`` (CLOCK_MONOTONIC)."""

    kind: str
    pid: int
    ts_ns: int
    status: ExitStatus | None = None


def pick_exit(
    events: tuple[ProcEvent, ...] | list[ProcEvent],
    start_ns: int | None,
    tick_ns: int,
    alive_ns: int | None = None,
) -> ExitStatus | None:
    """The exit of the process that started at ``start_ns`` (its /proc start time, floored
    to a clock tick of ``tick_ns``, on CLOCK_MONOTONIC) and was seen alive at ``alive_ns``,
    among the events of its pid in the order the kernel sent them.

    An exit before the process started, or before the fork that created it (the last fork
    of this pid up to two ticks after ``start_ns``), belongs to an older holder of the pid;
    the first exit after both is this process's: a later holder can only exit after it.
    """
    lower = 0
    if start_ns is not None:
        lower = start_ns
        forks = [e.ts_ns for e in events if e.kind == "fork" and e.ts_ns < start_ns + 2 * tick_ns]
        if forks:
            lower = max(lower, forks[-1])
    if alive_ns is not None:
        lower = max(lower, alive_ns)
    for event in events:
        if event.kind == "exit" and event.ts_ns >= lower and event.status is not None:
            return event.status
    return None


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
    events = parse_proc_events(data, ts_ms)
    execs = [e.pid for e in events if e.kind == "exec"]
    return execs, [e.status for e in events if e.status is not None]


def parse_proc_events(data: bytes, ts_ms: int = 0) -> list[ProcEvent]:
    """The fork, exec and exit events of processes (not threads) in one netlink datagram,
    in order; other events and garbage are skipped; never raises."""
    out: list[ProcEvent] = []
    offset = 0
    for _ in range(MAX_MESSAGES):
        if len(data) - offset < NLMSG_HDR.size:
            break
        length = NLMSG_HDR.unpack_from(data, offset)[0]
        if length < NLMSG_HDR.size or offset + length > len(data):
            break
        body = data[offset + NLMSG_HDR.size : offset + length]
        offset += (length + 3) & ~3  # NLMSG_ALIGN
        event = _one_event(body, ts_ms)
        if event is not None:
            out.append(event)
    return out


def _one_event(body: bytes, ts_ms: int) -> ProcEvent | None:
    """The event in one message body (cn_msg + proc_event), or None."""
    head = CN_MSG.size + EVENT_HEAD.size
    if len(body) < head + EXEC_EVENT.size:
        return None
    idx, val = CN_MSG.unpack_from(body, 0)[:2]
    if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC):
        return None
    what, _cpu, ts_ns = EVENT_HEAD.unpack_from(body, CN_MSG.size)
    if what == PROC_EVENT_EXEC:
        pid, tgid = EXEC_EVENT.unpack_from(body, head)
        return ProcEvent("exec", pid, ts_ns) if pid == tgid and pid > 0 else None
    if what == PROC_EVENT_FORK and len(body) >= head + FORK_EVENT.size:
        child, child_tgid = FORK_EVENT.unpack_from(body, head)[2:]
        return ProcEvent("fork", child, ts_ns) if child == child_tgid and child > 0 else None
    if what != PROC_EVENT_EXIT or len(body) < head + EXIT_EVENT.size:
        return None
    pid, tgid, status, _sig, _ppid, _ptgid = EXIT_EVENT.unpack_from(body, head)
    if pid != tgid or pid <= 0:
        return None  # a thread of a process, not the process
    code, signal, core = decode_wait_status(status)
    return ProcEvent("exit", pid, ts_ns, ExitStatus(pid, code, signal, core, ts_ms))


def young_server(pid: int, ts_ms: int, proc: str = "/proc") -> YoungServer | None:
    """The server that ``pid`` just exec'd, or None (another program, or gone already)."""
    try:
        comm = _read_head(f"{proc}/{pid}/comm", 64).decode("utf-8", "replace").strip()
        if not is_server_comm(comm):
            return None
        stat = _read_head(f"{proc}/{pid}/stat", 4096)
        fields = stat[stat.rindex(b")") + 2 :].split()
        return YoungServer(pid, int(fields[19]), comm, ts_ms)
    except (OSError, ValueError, IndexError):
        return None


def _read_head(path: str, size: int) -> bytes:
    """At most ``size`` bytes of a /proc file, through a bare descriptor: this runs for
    every exec on the box, and a Python file object costs twice the syscalls' time."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's time unit


def boot_ticks_to_monotonic_ns(start_ticks: int) -> int:
    """A /proc/PID/stat start time (clock ticks since boot, CLOCK_BOOTTIME since Linux
    5.3) on the connector's clock (CLOCK_MONOTONIC: the same, less time suspended)."""
    suspended_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    return start_ticks * TICK_NS - suspended_ns


def epoch_ms_to_monotonic_ns(epoch_ms: int) -> int:
    """A wall-clock time (epoch ms) on CLOCK_MONOTONIC, with the offset of now."""
    return epoch_ms * 1_000_000 - (time.time_ns() - time.monotonic_ns())


def _from_kernel(sender: object) -> bool:
    """Whether a datagram's sender address is the kernel's (netlink port id 0)."""
    return isinstance(sender, tuple) and len(sender) >= 1 and sender[0] == 0


def listen_request() -> bytes:
    """The PROC_CN_MCAST_LISTEN message that starts the stream."""
    op = struct.pack("=I", PROC_CN_MCAST_LISTEN)
    cn = CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(op), 0)
    return (
        NLMSG_HDR.pack(NLMSG_HDR.size + len(cn) + len(op), NLMSG_DONE, 0, 0, os.getpid()) + cn + op
    )


def _drain(sock: socket.socket) -> tuple[list[tuple[bytes, object]], bool]:
    """The datagrams already queued on ``sock`` (at most ``MAX_DRAIN``), without waiting,
    and whether the kernel said some were lost (ENOBUFS: the socket's error is cleared by
    reading it, so the loop would not see it again)."""
    out: list[tuple[bytes, object]] = []
    for _ in range(MAX_DRAIN):
        try:
            out.append(sock.recvfrom(65536, socket.MSG_DONTWAIT))
        except OSError as exc:  # EAGAIN: none left; a closed socket: the loop sees it
            return out, exc.errno == 105  # ENOBUFS
    return out, False


class ProcEventListener:
    """A background thread reading events into a bounded ``pid -> events`` map (at most
    ``max_kept`` pids, ``MAX_PER_PID`` events each, none whose last event was received more
    than ``keep_s`` seconds ago)."""

    def __init__(
        self, max_kept: int = MAX_KEPT, coalesce_s: float = COALESCE_S, keep_s: float = KEEP_S
    ) -> None:
        self.max_kept = max_kept
        self.coalesce_s = coalesce_s
        self.keep_s = keep_s  # the daemon sets it from its interval (monitor/daemon/loop.py)
        self.wakeups = 0  # reads that waited for a datagram (each then drains the queue)
        self.datagrams = 0  # datagrams read
        self.error: str | None = None
        self.forged_dropped = 0  # datagrams from a user-space sender (nl_pid != 0)
        self.filtered = False  # whether the kernel drops threads' events (proc_filter)
        # pid -> (time.monotonic() of its last event, its events); oldest touched first
        self._events: OrderedDict[int, tuple[float, tuple[ProcEvent, ...]]] = OrderedDict()
        self._young: OrderedDict[int, YoungServer] = OrderedDict()
        self._early: list[tuple[YoungServer, ExitStatus]] = []
        # pids that exec'd since the last take_execs(); None: some may be missing (events
        # lost, too many, or not taken yet), so the reader checks every young process
        self._execs: set[int] | None = set()
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
            self.filtered = proc_filter.attach(sock)
            sock.send(listen_request())
            # a blocking socket with a kernel receive timeout: no poll() before each read
            # (as a Python timeout costs), and MSG_DONTWAIT drains what is queued
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _RECV_TIMEOUT)
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
        since_ms = int(time.time() * 1000) - 1000
        try:
            child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            child.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.error = f"cannot check the process events connector: {exc}"
            return False
        if self.exit_of(child.pid, wait_s=timeout_s, since_ms=since_ms) is not None:
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
                batch = [sock.recvfrom(65536)]  # waits up to SO_RCVTIMEO for the first
            except (BlockingIOError, TimeoutError, InterruptedError):
                continue
            except OSError as exc:
                if exc.errno == 105:  # ENOBUFS: we fell behind and lost some; go on
                    with self._lock:
                        self._execs = None
                    continue
                if not self._closed:
                    self.error = f"process events connector failed: {exc}"
                break
            if self.coalesce_s > 0:
                time.sleep(self.coalesce_s)
            more, lost = _drain(sock)
            batch += more
            self.wakeups += 1
            self.datagrams += len(batch)
            now_ms = int(time.time() * 1000)
            events: list[ProcEvent] = []
            for data, sender in batch:
                if _from_kernel(sender):
                    events += parse_proc_events(data, now_ms)
                else:
                    self._forged(sender)
            execs = [e.pid for e in events if e.kind == "exec"]
            young = [y for pid in execs if (y := young_server(pid, now_ms)) is not None]
            if events or lost:
                self._keep(young, events, lost)

    def _forged(self, sender: object) -> None:
        """A datagram another process sent to our socket: not the kernel's word; counted,
        said once at debug level."""
        self.forged_dropped += 1
        if self.forged_dropped == 1:
            log.debug("dropped a process-event datagram from user space (sender %r)", sender)

    def _keep(self, young: list[YoungServer], events: list[ProcEvent], lost: bool = False) -> None:
        now_s = time.monotonic()
        with self._lock:
            self._note_execs(events, lost)
            for y in young:
                self._young[y.pid] = y
                while len(self._young) > MAX_YOUNG:
                    self._young.popitem(last=False)
            for event in events:
                _, kept = self._events.pop(event.pid, (now_s, ()))
                self._events[event.pid] = (now_s, (*kept, event)[-MAX_PER_PID:])
                if event.status is None:
                    continue
                server = self._young.pop(event.pid, None)
                if server is not None and len(self._early) < MAX_YOUNG:
                    self._early.append((server, event.status))
            while len(self._events) > self.max_kept:
                self._events.popitem(last=False)
            while self._events and next(iter(self._events.values()))[0] < now_s - self.keep_s:
                self._events.popitem(last=False)
            self._lock.notify_all()

    def _note_execs(self, events: list[ProcEvent], lost: bool) -> None:
        """Remember the pids that exec'd (under the lock); forget them all when some were
        lost or more than ``max_kept`` gathered: the reader then checks every young one."""
        if self._execs is None:
            return
        self._execs.update(e.pid for e in events if e.kind == "exec")
        if lost or len(self._execs) > self.max_kept:
            self._execs = None

    def take_execs(self) -> frozenset[int] | None:
        """The pids that exec'd since the last call (read by the procfs collector in place
        of re-reading every young process's ``/proc/PID/stat``), or None when that is not
        known: the thread is not running, or events were lost since the last call."""
        with self._lock:
            execs, self._execs = self._execs, set()
        running = self.active and self._thread is not None and self._thread.is_alive()
        return frozenset(execs) if execs is not None and running else None

    def take_early_exits(self) -> list[tuple[YoungServer, ExitStatus]]:
        """The servers that exited since the last call, each with its exec and its exit."""
        with self._lock:
            out, self._early = self._early, []
            return out

    def exit_of(
        self,
        pid: int,
        wait_s: float = 0.0,
        since_ms: int | None = None,
        start_ticks: int | None = None,
    ) -> ExitStatus | None:
        """The exit of the process ``pid`` that started at ``start_ticks`` (/proc/PID/stat
        field 22) and was alive at ``since_ms`` (epoch ms), chosen by :func:`pick_exit`
        among every exit of that pid kept; waits up to ``wait_s`` for a datagram the thread
        has not read yet. Without either bound: the first exit kept."""
        deadline = time.monotonic() + wait_s
        start_ns = None if start_ticks is None else boot_ticks_to_monotonic_ns(start_ticks)
        alive_ns = None if since_ms is None else epoch_ms_to_monotonic_ns(since_ms)
        with self._lock:
            while True:
                _, kept = self._events.get(pid, (0.0, ()))
                found = pick_exit(kept, start_ns, TICK_NS, alive_ns)
                if found is not None:
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
