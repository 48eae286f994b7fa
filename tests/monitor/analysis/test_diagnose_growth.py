"""Issue 18 point 5: `diagnose` names the true cause of growth from the server's own word.

A real server grew by 300 MiB of prompt cache (its log said so) and `diagnose` blamed
"driver context, allocations outside llama.cpp" and offered ``-ctk q8_0``. Here a real
process named llama-server holds 300 MiB more than its estimate, its ``--log-file`` is a
recorded llama.cpp log (tests/fixtures/llamalog/real-cpu-gemma3-iswa.log) followed by the
lines llama.cpp prints when its prompt cache fills (prompt-cache-grown.tail: the printf
formats of tools/server/server-task.cpp ``server_prompt_cache::update``), and
`vramscope diagnose` must name the prompt cache, quote the line and offer ``--cache-ram``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import tiny_models

ROOT = Path(__file__).resolve().parents[3]
MIB = 1024**2
REAL_LOG = ROOT / "tests/fixtures/llamalog/real-cpu-gemma3-iswa.log"
GROWN_TAIL = ROOT / "tests/fixtures/llamalog/prompt-cache-grown.tail"


def vramscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


@contextlib.contextmanager
def server_holding_300_mib(tmp_path: Path, *args: str) -> Iterator[int]:
    """A real process whose /proc reads as ``llama-server -m tiny.gguf -c 4096 -np 2 ARGS``
    holding 300 MiB of anonymous memory beyond what the model needs at load."""
    model = tiny_models.write_gemma3(tmp_path / "tiny-gemma3.gguf")
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    hold = "x = b'\\x01' * (300 << 20); print('held', flush=True); import sys; sys.stdin.read()"
    proc = subprocess.Popen(
        [str(exe), "-c", hold, "-m", str(model.path), "-c", "4096", "-np", "2", *args],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def grown_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The server with ``--log-file llama.log`` (relative: read against its cwd)."""
    log = tmp_path / "llama.log"
    log.write_text(
        "".join(
            ln
            for f in (REAL_LOG, GROWN_TAIL)
            for ln in f.read_text().splitlines(True)
            if not ln.startswith("#")
        )
    )
    with server_holding_300_mib(tmp_path, "--log-file", "llama.log") as pid:
        yield pid, log


def test_prompt_cache_growth_is_named_from_the_servers_log(grown_server) -> None:
    pid, _ = grown_server
    result = vramscope("diagnose", "--json", "--pid", str(pid))
    assert result.returncode == 0, result.stderr
    (d,) = json.loads(result.stdout)
    assert d["verdict"] == "over"
    growth = d["measured_bytes"] - d["estimated_bytes"]
    assert abs(growth - 300 * MIB) < 128 * MIB  # the interpreter's own few MiB
    by = {f["component"]: f for f in d["findings"]}
    cache = by["prompt_cache"]
    assert cache["bytes"] == 300 * MIB
    assert "cache state: 3 prompts, 300.000 MiB (limits: 8192.000 MiB" in cache["evidence"]
    assert cache["evidence"].startswith("llama.cpp log ")
    assert cache["fix"].startswith("--cache-ram ")
    assert "unaccounted" not in by  # the rest is within the tolerance
    assert "driver context" not in result.stdout
    assert "-ctk" not in d["summary"] and "prompt cache: 300 MiB" in d["summary"]
    assert "--cache-ram" in d["summary"]
    assert any("prompt cache holds 300 MiB" in c for c in d["checked"])


def test_text_output_quotes_the_evidence(grown_server) -> None:
    pid, log = grown_server
    text = vramscope("diagnose", "--pid", str(pid))
    assert text.returncode == 0, text.stderr
    line = next(ln for ln in text.stdout.splitlines() if "evidence:" in ln)
    assert f"llama.cpp log {log}: 'srv        update:  - cache state: 3 prompts" in line
    assert "-> --cache-ram 0 (off) frees 300 MiB" in text.stdout  # not 0.3 GiB


def test_log_option_needs_pid_and_an_existing_file(tmp_path: Path) -> None:
    alone = vramscope("diagnose", "--log", str(REAL_LOG))
    assert alone.returncode == 2
    assert (
        alone.stderr.strip() == "vramscope: error: --log needs --pid: the server that wrote the log"
    )
    missing = vramscope("diagnose", "--pid", "1", "--log", str(tmp_path / "none.log"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "does not exist" in missing.stderr


def test_a_hostile_log_given_by_log_is_quoted_escaped(grown_server, tmp_path: Path) -> None:
    pid, _ = grown_server
    hostile = tmp_path / "hostile.log"
    hostile.write_bytes(
        b"\xff" * 100
        + b"\nsrv update:  - cache state: 3 prompts, 300.000 MiB (limits: 8192.000 MiB\x1b]52;c;"
        + b"cGF5bG9hZA==\x07\x1b[2J"
        + b"z" * 20_000
        + b"\n"
    )
    text = vramscope("diagnose", "--pid", str(pid), "--log", str(hostile))
    assert text.returncode == 0, text.stderr
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout
    line = next(ln for ln in text.stdout.splitlines() if "evidence:" in ln)
    assert f"llama.cpp log {hostile}: 'srv update:  - cache state: 3 prompts" in line
    assert "\\x1b]52;c;" in line and len(line) < 600  # escaped, and cut


def test_without_a_log_the_rest_is_unaccounted_with_what_was_checked(tmp_path: Path) -> None:
    """No log known, /slots answered on loopback: nothing names the 300 MiB, so it is
    unaccounted, with the sources checked and the prompt cache's bound, never a KV fix."""
    served: list[str] = []

    class Slots(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            served.append(self.path)
            body = json.dumps(
                [
                    {"id": 0, "n_ctx": 2048, "is_processing": True, "n_prompt_tokens": 1500},
                    {"id": 1, "n_ctx": 2048, "is_processing": False},
                ]
            ).encode()
            self.send_response(200 if self.path == "/slots" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slots)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = str(server.server_address[1])
    try:
        with server_holding_300_mib(tmp_path, "--host", "127.0.0.1", "--port", port) as pid:
            result = vramscope("diagnose", "--json", "--pid", str(pid))
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    (d,) = json.loads(result.stdout)
    assert "/slots" in served
    by = {f["component"]: f for f in d["findings"]}
    assert "prompt_cache" not in by
    rest = by["unaccounted"]
    assert abs(rest["bytes"] - 300 * MIB) < 128 * MIB
    assert "driver context" not in rest["cause"]
    assert (
        "+0.3 GiB in host RAM)" in rest["cause"]
        and "GPU" not in rest["cause"]
        and "checkpoints may hold up to " in rest["cause"]
    )
    assert d["checked"] == [
        "no llama.cpp log known (start llama-server with --log-file, or pass --log)",
        f"http://127.0.0.1:{port}/slots: 1 of 2 slot(s) busy, 1500 tokens cached in them "
        "(KV allocated at load: not growth)",
    ]
    assert "-ctk" not in d["summary"]
