"""Real processes whose ``/proc`` entries read exactly like a server's command line.

:func:`running` starts a Python process that rewrites its own argument area (through
``/proc/self/mem``, as setproctitle does) and its ``comm`` (``prctl(PR_SET_NAME)``), so
``/proc/PID/cmdline`` is exactly the argv given (``llama-server -m x.gguf``) and nothing
else; it can fork a child with the same argv (a helper) that sleeps, or that exits at once
with a code and is never reaped (a zombie: state ``Z``). The process runs in ``cwd`` and
lives until the block ends (its stdin closes; it is killed after a grace period).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

_SCRIPT = r"""
import ctypes, json, os, sys, time
cfg = json.loads(sys.argv[1])
argv = cfg["argv"]
stat = open("/proc/self/stat", "rb").read()
rest = stat[stat.rfind(b")") + 2:].split()
start, end = int(rest[45]), int(rest[46])  # fields 48/49: arg_start, arg_end
new = b"".join(a.encode() + b"\0" for a in argv)
assert len(new) <= end - start, "argument area too small"
with open("/proc/self/mem", "r+b", buffering=0) as mem:
    mem.seek(start)
    mem.write(new.ljust(end - start, b"\0"))
ctypes.CDLL(None).prctl(15, os.path.basename(argv[0]).encode()[:15], 0, 0, 0)
child = None
if cfg["child"] is not None:
    child = os.fork()
    if child == 0:
        if cfg["child"] == "sleep":
            while True:
                time.sleep(60)
        if cfg["child"] == "segv":  # dies by SIGSEGV as a crash does (no core: limit 0)
            import resource
            import signal

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(signal.SIGSEGV, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(int(cfg["child"]))
    if cfg["child"] != "sleep":  # wait for the zombie, never reap it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(f"/proc/{child}/stat", "rb") as f:
                s = f.read()
            if s[s.rfind(b")") + 2:].split()[0] == b"Z":
                break
            time.sleep(0.01)
print(json.dumps({"pid": os.getpid(), "child": child}), flush=True)
sys.stdin.read()
if child is not None and cfg["child"] == "sleep":
    os.kill(child, 9)
    os.waitpid(child, 0)
"""


@dataclass(frozen=True, slots=True)
class FakeServer:
    pid: int
    child_pid: int | None
    process: subprocess.Popen[str]


@contextlib.contextmanager
def running(
    argv: Sequence[str],
    cwd: str | Path | None = None,
    child: str | int | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[FakeServer]:
    """A process with ``argv`` as its command line; ``child``: None, "sleep" (a helper
    with the same argv), an exit code or "segv" (a zombie child with the same argv that
    exited so); ``env`` is added
    to this environment."""
    cfg = json.dumps({"argv": list(argv), "child": child})
    padding = "x" * (sum(len(a) + 1 for a in argv) + 16)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, cfg, padding],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    info: dict = {}
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fake server did not start (exit {proc.wait()})")
        info = json.loads(line)
        yield FakeServer(info["pid"], info["child"], proc)
    finally:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        helper = info.get("child")
        if child == "sleep" and helper:  # the parent kills it; this covers a parent killed
            _kill_if_ours(helper, argv)


def _kill_if_ours(pid: int, argv: Sequence[str]) -> None:
    """SIGKILL ``pid`` only while its command line is still ours (a pid can be reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if cmdline.rstrip(b"\0").split(b"\0")[: len(argv)] == [a.encode() for a in argv]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
