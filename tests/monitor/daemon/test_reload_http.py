"""SIGHUP with a changed ``[http] listen`` (issue 34): the daemon keeps serving on the old
address and says, in one warning, that the new one needs a restart; it does not log a
plain "configuration reloaded" as if the new address were in force."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return bool(r.status)
    except urllib.error.HTTPError:
        return True  # an HTTP answer (503 while starting) still is this server
    except OSError:
        return False


def test_sighup_with_a_new_listen_address_says_it_needs_a_restart(
    tmp_path: Path, stop_with_sigterm: Callable[[subprocess.Popen[str]], str]
) -> None:
    old, new = free_port(), free_port()
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[daemon]\ninterval_s = 0.2\n[http]\nlisten = "127.0.0.1:{old}"\n')
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(tmp_path / "v.db"),
         "--config", str(cfg)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    assert daemon.stderr is not None
    stream = daemon.stderr
    threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True).start()

    def wait_for(text: str) -> str:
        deadline = time.monotonic() + 60  # a hang guard, not a timing
        while time.monotonic() < deadline:
            seen = [x for x in list(lines) if text in x]
            if seen:
                return seen[0]
            if daemon.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not logged; log: {lines}")

    try:
        wait_for(f"HTTP on http://127.0.0.1:{old}")
        cfg.write_text(f'[daemon]\ninterval_s = 0.2\n[http]\nlisten = "127.0.0.1:{new}"\n')
        daemon.send_signal(signal.SIGHUP)
        said = wait_for("reload: [http] listen changed")
        assert said.rstrip().endswith(
            f"reload: [http] listen changed from 127.0.0.1:{old} to 127.0.0.1:{new}: needs a "
            f"restart (systemctl restart vramscope); HTTP stays on 127.0.0.1:{old}"
        )
        wait_for("configuration reloaded")  # the rest of the file still applies
        assert answers(old)
        assert not answers(new)
    finally:
        stop_with_sigterm(daemon)
