"""A real ``vramscope daemon`` subprocess with its HTTP API on a free loopback port.

Not a fake: the daemon is the real one, sampling this box's real ``/proc``; only the port,
database and config are the test's. Everything it serves is reached on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stopping import STOP_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout_s: float = 10.0, token: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with OPENER.open(urllib.request.Request(url, headers=headers), timeout=timeout_s) as resp:
        return resp.read().decode()


@dataclass
class LiveDaemon:
    url: str
    port: int
    db: Path
    process: subprocess.Popen[str]
    stderr: str = ""  # what it wrote, once stopped (at the end of ``running``)
    token: str | None = None  # its [http] token, sent by metrics()

    def metrics(self) -> str:
        return get(f"{self.url}/metrics", token=self.token)

    def poll(self, what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
        """Call ``check`` until it returns something true (an OSError counts as not yet)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"the daemon exited: {self.process.communicate()[1][-2000:]}")
            try:
                got = check()
            except OSError:
                got = None
            if got:
                return got
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)


@contextlib.contextmanager
def running(
    tmp_path: Path,
    extra_config: str = "",
    interval_s: float = 0.2,
    daemon_args: tuple[str, ...] = (),
    start_timeout_s: float = 60.0,
    python_args: tuple[str, ...] = ("-m", "monitor"),
    token: str | None = None,
) -> Iterator[LiveDaemon]:
    """The daemon, stopped with SIGTERM at the end (its stderr must hold no traceback;
    it is kept on the LiveDaemon). ``daemon_args``: more arguments (``--proc-root``/
    ``--sys-root`` of a recorded box); ``start_timeout_s``: how long its first tick may
    take; ``python_args``: how Python starts the ``vramscope`` command (a ``-c`` that
    swaps a kernel source, :data:`KMSG_FROM_FILE`); ``token``: its ``[http] token``
    (written into its config, and sent by :meth:`LiveDaemon.metrics`)."""
    port = free_port()
    cfg = tmp_path / "vramscope.toml"
    secret = f'token = "{token}"\n' if token else ""
    cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n{secret}{extra_config}')
    db = tmp_path / "v.db"
    process = subprocess.Popen(
        [
            sys.executable,
            *python_args,
            "daemon",
            "--db",
            str(db),
            "--interval",
            str(interval_s),
            "--config",
            str(cfg),
            *daemon_args,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    live = LiveDaemon(f"http://127.0.0.1:{port}", port, db, process, token=token)
    err = ""
    try:
        live.poll(
            "the first tick on /metrics",
            lambda: "vramscope_last_tick_timestamp_seconds" in live.metrics(),
            timeout_s=start_timeout_s,
        )
        yield live
    finally:
        try:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=STOP_GUARD_S)
        finally:
            process.kill()
            live.stderr = err or ""
    assert "Traceback" not in (err or ""), err


KMSG_FROM_FILE = (
    "import functools, pathlib, runpy, sys\n"
    "import monitor.logs.kmsg as kmsg\n"
    "kmsg.KmsgFollower = functools.partial(kmsg.KmsgFollower, path=pathlib.Path(sys.argv.pop(1)))\n"
    "runpy.run_module('monitor', run_name='__main__', alter_sys=True)\n"
)
"""``python -c KMSG_FROM_FILE PATH daemon ...``: the real daemon, its kernel log read from
the regular file PATH instead of ``/dev/kmsg`` (from its end, as ``/dev/kmsg``). A test
appends one ``prio,seq,usec,-;text`` record at a time: ``/dev/kmsg`` gives one record per
read, a file gives what was appended."""


def kmsg_daemon_args(kmsg: Path) -> tuple[str, ...]:
    """``python_args`` of a daemon whose kernel log is the file ``kmsg``."""
    return ("-c", KMSG_FROM_FILE, str(kmsg))


def promtool() -> str | None:
    """The promtool binary (Debian's ``prometheus`` package), or None."""
    return shutil.which("promtool")


_CAMEL = "label names should be written in 'snake_case' not 'camelCase'"


def check_metrics_problems(body: str | bytes) -> list[str]:
    """What ``promtool check metrics`` finds wrong in ``body`` (an exposition), less the
    one lint vramscope breaks on purpose: dcgm-exporter's camelCase GPU labels (``UUID``,
    ``modelName``) on the ``vramscope_device_*`` families, kept so that dashboards join
    on them, and the HELP of an OpenMetrics counter that promtool (which reads the text
    format) does not tie to its ``_total`` sample. A parse error or any other lint stays
    in the list."""
    tool = promtool()
    assert tool is not None
    data = body.encode() if isinstance(body, str) else body
    done = subprocess.run([tool, "check", "metrics"], input=data, capture_output=True, timeout=120)
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    text = data.decode("utf-8", "replace")
    problems = [
        line
        for line in out.splitlines()
        if line.strip()
        and not (line.startswith("vramscope_device_") and line.endswith(_CAMEL))
        and not _openmetrics_counter_help(line, text)
    ]
    if done.returncode not in (0, 3) and not problems:  # 3: lint problems only
        problems.append(f"promtool exited {done.returncode}")
    return problems


def _openmetrics_counter_help(line: str, text: str) -> bool:
    """promtool reads the text format: in OpenMetrics a counter's HELP names the family
    (``x``) and its sample ``x_total``, which promtool calls "no help text"."""
    name, _, rest = line.partition(" ")
    family = name.removesuffix("_total")
    return (
        rest == "no help text"
        and name != family
        and text.rstrip().endswith("# EOF")
        and f"\n# TYPE {family} counter\n" in "\n" + text
    )


PROMTOOL_MISSING = (
    "promtool not found: bash scripts/install --test installs Debian's prometheus package "
    "when run as root with apt-get"
)
