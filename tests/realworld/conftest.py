"""Fixtures for the real-world tier: a llama-server binary, tiny models, a server runner.

Everything here talks to 127.0.0.1 only. The binary comes from ``scripts/build-llama-server``
(or ``$VRAMSCOPE_LLAMA_SERVER``); when it cannot be built the tests skip and say why.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import tiny_models

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-llama-server"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
DEFAULT_BINARY = ROOT / ".cache" / "llama.cpp" / LLAMA_CPP_PYTHON_VERSION / "bin" / "llama-server"
BUILD_TIMEOUT_S = 60 * 60
# a larger model (DeepSeek-V3's 380 GB of sparse weights) maps for minutes on 2 cores
HEALTH_TIMEOUT_S = float(os.environ.get("VRAMSCOPE_HEALTH_TIMEOUT_S", "120"))
STOP_TIMEOUT_S = 30.0

# Writer kwargs per model: tests/fakes/tiny_models.py REALWORLD_SIZES.
MODEL_SIZES = tiny_models.REALWORLD_SIZES

# No proxies, ever: every request goes straight to the loopback server we started.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ----------------------------------------------------------------------------- binary


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """The llama-server binary: $VRAMSCOPE_LLAMA_SERVER, the cached build, or a fresh build."""
    env_bin = os.environ.get("VRAMSCOPE_LLAMA_SERVER")
    if env_bin:
        path = Path(env_bin)
        if not (path.is_file() and os.access(path, os.X_OK)):
            pytest.skip(f"VRAMSCOPE_LLAMA_SERVER={env_bin} is not an executable file")
        return path
    if DEFAULT_BINARY.is_file() and os.access(DEFAULT_BINARY, os.X_OK):
        return DEFAULT_BINARY
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot build llama-server with {BUILD_SCRIPT}: {exc}")
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        pytest.skip(
            f"cannot build llama-server (scripts/build-llama-server exit "
            f"{proc.returncode}):\n{tail}"
        )
    lines = proc.stdout.strip().splitlines()
    path = Path(lines[-1]) if lines else DEFAULT_BINARY
    if not path.is_file():
        pytest.skip(f"scripts/build-llama-server succeeded but printed no binary ({lines[-1:]})")
    return path


# ----------------------------------------------------------------------------- models


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tiny_models.TinyModel]:
    """The four test models, written once per session (sizes: MODEL_SIZES)."""
    return tiny_models.write_all(tmp_path_factory.mktemp("models"), **MODEL_SIZES)


@pytest.fixture(scope="session")
def llama_server(llama_server_bin: Path):
    """``llama_server(model, args, log_path, request=None, endpoint=...) -> ServerRun``."""

    def start(
        model: Path,
        args: Sequence[str],
        log_path: Path,
        request: dict | None = None,
        endpoint: str = "/completion",
    ) -> ServerRun:
        return run_llama_server(llama_server_bin, model, args, log_path, request, endpoint)

    return start


# ----------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, str]:
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def http_post(port: int, path: str, body: dict, timeout: float = 60.0) -> tuple[int, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def proc_status_kib(pid: int, key: str) -> int:
    """A ``kB`` field of /proc/PID/status (RssAnon, RssFile, VmRSS, ...), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


@dataclass
class ServerRun:
    argv: list[str]
    log: str  # everything the server printed, start to shutdown
    rss_anon_bytes: int  # /proc/PID/status RssAnon once /health said ok
    rss_file_bytes: int
    rss_anon_work_bytes: int | None  # RssAnon after the request (None: no request made)
    startup_s: float
    returncode: int | None


def run_llama_server(
    binary: Path,
    model: Path,
    args: Sequence[str],
    log_path: Path,
    request: dict | None = None,
    endpoint: str = "/completion",
) -> ServerRun:
    """Start llama-server on 127.0.0.1, wait for /health, read RssAnon, stop it.

    ``request`` (optional) is POSTed to ``endpoint`` once healthy, after RssAnon was read,
    to check that the model really runs; RssAnon is read again after it. Raises
    AssertionError with the log tail when the server exits or is not healthy in time.
    """
    port = free_port()
    argv = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-lv",
        "4",
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    t0 = time.monotonic()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        try:
            _wait_healthy(proc, port, log_path)
            startup_s = time.monotonic() - t0
            time.sleep(0.3)  # let the post-load allocations settle
            rss_anon = max(proc_status_kib(proc.pid, "RssAnon") for _ in range(3)) * 1024
            rss_file = proc_status_kib(proc.pid, "RssFile") * 1024
            rss_work = None
            if request is not None:
                status, body = http_post(port, endpoint, request)
                assert status == 200, f"{endpoint} -> {status}: {body[:500]}"
                time.sleep(0.3)
                rss_work = proc_status_kib(proc.pid, "RssAnon") * 1024
        finally:
            rc = _stop(proc)
    log = log_path.read_text(errors="replace")
    return ServerRun(argv, log, rss_anon, rss_file, rss_work, startup_s, rc)


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _wait_healthy(proc: subprocess.Popen, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"llama-server exited with {proc.returncode} before /health "
                f"was ok; log tail:\n{_tail(log_path)}"
            )
        try:
            status, _ = http_get(port, "/health", timeout=1.0)
            if status == 200:
                return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    raise AssertionError(
        f"llama-server not healthy after {HEALTH_TIMEOUT_S:.0f} s; log tail:\n{_tail(log_path)}"
    )


def _stop(proc: subprocess.Popen) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode
