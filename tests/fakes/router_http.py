"""Talking to a real llama-server router in the slow tests (tests/realworld/test_router*):
its HTTP API on loopback (no proxy), its children from /proc, and `vramscope predict
--json` as a user runs it."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cli_runner

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 180.0  # a generous guard for a load on a busy 2-core box, not a timing
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(port: int, path: str, body: dict | None = None) -> tuple[int, str]:
    """(status, text) of GET ``path`` (POST ``body`` as JSON); (0, "") when unreachable."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    try:
        with _OPENER.open(req, timeout=120) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError):
        return 0, ""


def wait_for(what: str, check: Callable[[], Any], log: Path) -> Any:
    """``check()``'s first true answer; the router log's tail in the failure otherwise."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    raise AssertionError(f"timed out waiting for {what}; router log tail:\n{tail}")


def loaded(port: int) -> set[str]:
    """The ids the router's ``GET /models`` says are loaded."""
    status, body = http(port, "/models")
    if status != 200:
        return set()
    return {m["id"] for m in json.loads(body)["data"] if m["status"]["value"] == "loaded"}


def child_of(router_pid: int, model_id: str) -> int | None:
    """The router's child serving ``model_id`` (its --alias), from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == router_pid and model_id.encode() in argv:
            return int(entry)
    return None


def predict(*args: str) -> tuple[int, dict, str]:
    """``vramscope predict --json ARGS``: (exit code, its JSON or {}, stderr)."""
    result = cli_runner.vramscope("predict", "--json", *args, timeout_s=300)
    doc = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.returncode, doc, result.stderr
