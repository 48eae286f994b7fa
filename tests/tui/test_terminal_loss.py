"""`vramscope tui` on a real pseudo-terminal: it ends when the terminal goes away, and on
SIGTERM even as PID 1 of a PID namespace (where a signal without a handler is ignored).

Each test starts the real console script (tui.entry:main) in a subprocess on a pty of its
own; the hang guards are generous (the app need only notice within them), never timings.
"""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUI = [sys.executable, "-c", "from tui.entry import main; main()", "tui", "--live"]
HANG_GUARD_S = 60.0
EXIT_HANGUP, EXIT_TERMINATED = 129, 143


class Terminal:
    """A pty whose master side this test holds, drained in a thread (so the app never
    blocks writing to a full pty) and remembered (to see the app draw)."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.output = bytearray()
        self._reader = threading.Thread(target=self._drain, daemon=True)

    def start(self, argv: list[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            cwd=ROOT,
            env={**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)},
            start_new_session=True,  # no controlling terminal: no SIGHUP from the kernel
        )
        os.close(self.slave)
        self._reader.start()
        return proc

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.output += data

    def wait_for_screen(self, proc: subprocess.Popen[bytes]) -> None:
        """Until the footer is drawn: the app is mounted (its signal handlers are in)."""
        deadline = time.monotonic() + HANG_GUARD_S
        while b"Help" not in self.output:
            assert proc.poll() is None, self.output.decode(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "the TUI never drew its screen"
            time.sleep(0.1)


def _wait(proc: subprocess.Popen[bytes]) -> int:
    try:
        return proc.wait(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("the TUI kept running")


def test_tui_exits_when_its_terminal_closes() -> None:
    term = Terminal()
    proc = term.start(TUI)
    term.wait_for_screen(proc)
    os.close(term.master)  # the terminal emulator / ssh session went away
    assert _wait(proc) == EXIT_HANGUP


def test_tui_exits_on_sigterm_and_restores_the_terminal() -> None:
    term = Terminal()
    proc = term.start(TUI)
    term.wait_for_screen(proc)
    proc.send_signal(signal.SIGTERM)
    assert _wait(proc) == EXIT_TERMINATED
    assert b"\x1b[?1049l" in term.output  # left the alternate screen: the shell is back
    os.close(term.master)


def _child_of(pid: int) -> int:
    deadline = time.monotonic() + HANG_GUARD_S
    children = Path(f"/proc/{pid}/task/{pid}/children")
    while not children.read_text().split():
        assert time.monotonic() < deadline, "unshare never forked"
        time.sleep(0.05)
    return int(children.read_text().split()[0])


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_tui_as_pid_1_of_a_pid_namespace_stops_on_sigterm() -> None:
    term = Terminal()
    proc = term.start(["unshare", "--pid", "--fork", "--mount-proc", *TUI])
    term.wait_for_screen(proc)
    pid_1 = _child_of(proc.pid)  # the TUI: PID 1 inside, an ordinary pid out here
    nspid = next(
        line
        for line in Path(f"/proc/{pid_1}/status").read_text().splitlines()
        if line.startswith("NSpid:")
    )
    assert nspid.split()[-1] == "1", nspid  # its pid in its own namespace
    os.kill(pid_1, signal.SIGTERM)
    assert _wait(proc) == EXIT_TERMINATED  # unshare exits with its child's status
    os.close(term.master)
