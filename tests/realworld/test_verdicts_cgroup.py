"""Real-world tier: predict's verdicts against what the kernel does in a real memory cgroup.

A Qwen3-8B-shaped model (8.3 GB of Q8_0 weights, a sparse file with its real header) is
started by the llama-server this project builds, inside a 2 GiB memory cgroup, three ways.
``vramscope predict --cgroup`` judges each first; then the real server runs:

- ``-nr`` (weights mmap'd, never repacked): what must fit (KV, compute, output) fits; the
  weights are clean page cache that memcg reclaim evicts instead of killing. predict says
  THRASH (exit 4); the server loads, runs its warmup through every layer (8 GB read
  through 2 GiB) and answers a completion: slow, not dead.
- ``-lm none`` (weights read into anonymous memory): predict says OOM (exit 1); the kernel
  OOM-kills the server in its cgroup while it loads.
- the defaults (no -nr): what the CPU backend repacks depends on the CPU (AMX packs Q8_0
  into anonymous memory; AVX2 has no Q8_0 layout): predict reads this box's CPU and the
  real outcome must agree, whichever CPU runs the test.
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
from pathlib import Path

import cli_runner
import pytest
from arch_models import model_for
from memcg import make_cgroup

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3
LIMIT = 2 * GIB
LOAD_TIMEOUT_S = 240.0


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(port: int, path: str, body: dict | None = None, timeout: float = 2.0) -> int:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def predict(cgroup: Path, *launch: str) -> tuple[int, dict]:
    out = cli_runner.vramscope(
        "predict", "--json", "--cgroup", str(cgroup), "--margin-gib", "0.25", "--", *launch
    )
    assert out.returncode in (0, 1, 3, 4), out.stderr
    return out.returncode, json.loads(out.stdout)


def run_in(procs: Path, argv: list[str], log: Path) -> tuple[str, int | None]:
    """Start ``argv`` inside the cgroup; ("healthy", None) once it answered /health and a
    one-token completion, or ("exited", returncode) when it died first."""
    port = free_port()
    cmd = [*argv, "--host", "127.0.0.1", "--port", str(port), "-t", "2"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *cmd],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + LOAD_TIMEOUT_S
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    return "exited", proc.returncode
                try:
                    if http(port, "/health", timeout=1.0) == 200:
                        body = {"prompt": "a", "n_predict": 1}
                        status = http(port, "/completion", body, timeout=180)
                        return ("healthy" if status == 200 else f"http {status}"), None
                except (OSError, urllib.error.URLError):
                    pass
                time.sleep(0.5)
            return "timeout", None
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def oom_kills(group: Path) -> int:
    """The cgroup's OOM-kill counter (v1 memory.oom_control, v2 memory.events)."""
    for name, key in (("memory.oom_control", "oom_kill"), ("memory.events", "oom_kill")):
        path = group / name
        if path.exists():
            for line in path.read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    return 0


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(model_for("qwen3-8b").write(tmp_path_factory.mktemp("verdict-models")))


@pytest.mark.parametrize(
    ("name", "args"),
    [("mmap-nr", ("-nr",)), ("read-in", ("-lm", "none")), ("defaults", ())],
)
def test_predict_agrees_with_the_kernel_in_a_2_gib_cgroup(
    llama_server_bin: Path, model: str, tmp_path: Path, name: str, args: tuple[str, ...]
) -> None:
    launch = [str(llama_server_bin), "-m", model, "-c", "4096", "-np", "1", "--cache-ram", "0"]
    launch += args
    group, procs = make_cgroup(LIMIT)
    try:
        code, doc = predict(group, *launch)
        outcome, rc = run_in(procs, launch, tmp_path / f"{name}.log")
        kills = oom_kills(group)
    finally:
        time.sleep(0.5)
        group.rmdir()
    log = (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
    host = next(d for d in doc["devices"] if d["device_id"] == "host")
    said = f"predict exit {code} ({doc['verdict']}), {host}; server: {outcome} rc={rc}\n{log}"
    if name == "mmap-nr":
        assert code == 4 and doc["verdict"] == "thrash", said
    if name == "read-in":
        assert code == 1 and doc["verdict"] == "oom", said
    if code == 1:  # the kernel kills it in its cgroup, as predicted
        assert outcome == "exited" and rc == -signal.SIGKILL and kills >= 1, said
    else:  # it loads and answers, slowly: its page cache was evicted, nothing killed
        assert outcome == "healthy" and kills == 0, said
