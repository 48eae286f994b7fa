"""Real processes with hostile names: comm set through /proc/self/comm (what prctl
PR_SET_NAME does; 15 bytes at most) and a command line that the collectors see as a
llama-server's (argv[0] is ``llama-server``; the program is this Python)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

# Sets its own comm, says so on stdout, then waits for stdin to close.
_CHILD = r"""
import sys
name = sys.argv[sys.argv.index("--comm") + 1].encode("utf-8", "surrogateescape")
with open("/proc/self/comm", "wb") as f:
    f.write(name)
sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.read()
"""

OSC_TITLE = "\x1b]0;pwned\x07"  # retitles a terminal (10 bytes)
MARKUP = "[/]x"  # closes a tag that was never opened: a MarkupError in Rich / Textual
CSI_CLEAR = "\x1b[2J\x9b1m"  # clear the screen (CSI as ESC [ and as the C1 byte)


def comm_of(pid: int) -> str:
    with open(f"/proc/{pid}/comm", "rb") as f:
        return f.read().rstrip(b"\n").decode("utf-8", "replace")


@contextlib.contextmanager
def hostile_server(comm: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """A running process named ``comm`` whose command line is
    ``llama-server -c <program> --comm <comm> *args``; killed on exit."""
    proc = subprocess.Popen(
        ["llama-server", "-c", _CHILD, "--comm", comm, *args],
        executable=sys.executable,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        assert comm_of(proc.pid) == comm, comm_of(proc.pid)
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)
