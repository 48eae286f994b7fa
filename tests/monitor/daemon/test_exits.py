"""How real processes ended, as the daemon records it (issue 19): exit 0, exit 3, SIGTERM
(after load and during load), SIGKILL and SIGSEGV of processes named llama-server, each
classified with its code or signal in `vramscope events --json`; only the crash alerts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import gguf_models as g
import pytest

from collectors.proc_events import ProcEventListener

ROOT = Path(__file__).resolve().parents[3]

CHILD = """
import os, sys, threading, time
if sys.argv[1] == "grow":   # still loading: its memory never holds steady
    def grow():
        import random
        while True:
            block = bytearray(random.randint(1, 64) * 1024 * 1024)
            block[::4096] = b"\\x01" * len(block[::4096])
            time.sleep(0.05)
    threading.Thread(target=grow, daemon=True).start()
print("ready", flush=True)
action = sys.stdin.readline().strip()
if action == "exit0":
    sys.exit(0)
if action == "exit3":
    sys.exit(3)
if action == "segv":
    import signal
    os.kill(os.getpid(), signal.SIGSEGV)
time.sleep(600)
"""


def _rows(db: Path, sql: str, *args: object) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _wait(what: str, check, timeout_s: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _event_pids(db: Path, kind: str) -> set[int]:
    return {
        json.loads(d).get("pid")
        for (d,) in _rows(db, "SELECT data FROM events WHERE kind = ?", kind)
    }


@pytest.mark.slow  # a real daemon for many seconds: the default suite stays under 5 min
def test_every_way_of_ending_is_classified(tmp_path: Path, wait_for_ticks) -> None:
    probe = ProcEventListener()
    if not probe.open():
        pytest.skip(f"no process-event connector here: {probe.error}")
    probe.close()
    md, tensors = g.qwen3_8b(n_layer=2)
    md["qwen3.block_count"] = 2
    model = g.write_model(tmp_path / "m.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    db = tmp_path / "v.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)  # looks like an inference server: tracked at once
    ways = ["exit0", "exit3", "term", "kill", "segv", "grow"]
    kids: dict[str, subprocess.Popen[str]] = {}
    try:
        wait_for_ticks(db, 3)
        for way in ways:
            kids[way] = subprocess.Popen(
                [str(exe), "-c", CHILD, way, "-m", str(model)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        for kid in kids.values():
            assert kid.stdout is not None and kid.stdout.readline().strip() == "ready"
        steady = {kids[w].pid for w in ways if w != "grow"}
        _wait("the servers to finish loading", lambda: steady <= _event_pids(db, "load_finished"))
        assert kids["grow"].pid not in _event_pids(db, "load_finished")
        assert kids["grow"].pid in _event_pids(db, "load_started")
        for way in ("exit0", "exit3", "segv"):
            assert kids[way].stdin is not None
            kids[way].stdin.write(f"{way}\n")
            kids[way].stdin.flush()
        kids["term"].send_signal(signal.SIGTERM)
        kids["grow"].send_signal(signal.SIGTERM)
        kids["kill"].send_signal(signal.SIGKILL)
        for kid in kids.values():
            kid.wait(timeout=60)
        pids = {k.pid for k in kids.values()}
        _wait("the exits to be recorded", lambda: pids <= _event_pids(db, "process_exit"))
        _wait(
            "the crash alert",
            lambda: any(
                f"[{kids['segv'].pid}]" in s
                for (s,) in _rows(
                    db,
                    "SELECT json_extract(data, '$.subject') FROM events WHERE kind = 'alert_fired'",
                )
            ),
        )
    finally:
        for kid in kids.values():
            if kid.poll() is None:
                kid.kill()
                kid.wait()
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)
    listed = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "monitor",
                "events",
                "--since",
                "1h",
                "--kind",
                "process_exit",
                "--json",
                "--db",
                str(db),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
            check=True,
        ).stdout
    )
    by_pid = {e["data"]["pid"]: e for e in listed}
    expected = {  # way: (cause, exit code, signal, severity)
        "exit0": ("exited", 0, None, "info"),
        "exit3": ("exited_error", 3, None, "warning"),
        "term": ("stopped", None, signal.SIGTERM, "info"),
        "grow": ("stopped_during_load", None, signal.SIGTERM, "info"),
        "kill": ("killed", None, signal.SIGKILL, "warning"),
        "segv": ("crashed", None, signal.SIGSEGV, "critical"),
    }
    for way, (cause, code, sig, severity) in expected.items():
        e = by_pid[kids[way].pid]
        d = e["data"]
        assert (d["cause"], d["exit_code"], d["exit_signal"], e["severity"]) == (
            cause,
            code,
            sig,
            severity,
        ), (way, e)
        assert d["exit_source"] == "connector"
    assert "stopped during load (SIGTERM)" in by_pid[kids["grow"].pid]["message"]
    assert "crashed (SIGSEGV)" in by_pid[kids["segv"].pid]["message"]
    # the processes table keeps the status too
    stored = dict(
        ((pid, (cause, code, sig)))
        for pid, cause, code, sig in _rows(
            db, "SELECT pid, exit_cause, exit_code, exit_signal FROM processes"
        )
    )
    assert stored[kids["exit3"].pid] == ("exited_error", 3, None)
    assert stored[kids["kill"].pid] == ("killed", None, 9)
    # alerts: the crash only; stops, exits and an unexplained SIGKILL page no one
    fired = [
        s
        for (s,) in _rows(
            db, "SELECT json_extract(data, '$.subject') FROM events WHERE kind = 'alert_fired'"
        )
    ]
    alerted = {p for p in pids if any(f"[{p}]" in s for s in fired)}
    assert alerted == {kids["segv"].pid}
    crashes = _event_pids(db, "crash")
    assert crashes & pids == {kids["segv"].pid}
    # post-mortems are titled by the real cause
    for way, title in (("segv", "crash post-mortem"), ("term", "exit post-mortem")):
        doc = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "monitor",
                    "postmortem",
                    "--pid",
                    str(kids[way].pid),
                    "--json",
                    "--db",
                    str(db),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=env,
                timeout=60,
                check=True,
            ).stdout
        )
        assert (doc["title"], doc["victim"]["comm"]) == (title, "llama-server"), way


ENGINE_OOM = """
import sys
print("ready", flush=True)
sys.stdin.readline()
with open(sys.argv[1], "a") as log:
    log.write("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on "
              "device 0: cudaMalloc failed: out of memory\\n")
sys.exit(1)
"""


def test_an_engine_oom_then_exit_is_an_engine_oom_with_one_alert(
    tmp_path: Path, wait_for_ticks
) -> None:
    probe = ProcEventListener()
    if not probe.open():
        pytest.skip(f"no process-event connector here: {probe.error}")
    probe.close()
    log = tmp_path / "llama.log"
    log.write_text("")
    cfg = tmp_path / "vramscope.toml"
    cfg.write_text(f'[logs]\nfiles = ["{log}"]\n')
    db = tmp_path / "v.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "monitor",
            "daemon",
            "--config",
            str(cfg),
            "--db",
            str(db),
            "--interval",
            "0.2",
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    kid = None
    try:
        wait_for_ticks(db, 3)
        kid = subprocess.Popen(
            [str(exe), "-c", ENGINE_OOM, str(log), "-m", "/m/none.gguf"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert kid.stdout is not None and kid.stdout.readline().strip() == "ready"
        _wait(
            "the server to be tracked",
            lambda: _rows(db, "SELECT 1 FROM processes WHERE pid = ?", kid.pid),
        )
        assert kid.stdin is not None
        kid.stdin.write("go\n")
        kid.stdin.flush()
        assert kid.wait(timeout=60) == 1
        _wait("the exit to be recorded", lambda: kid.pid in _event_pids(db, "process_exit"))
    finally:
        if kid is not None and kid.poll() is None:
            kid.kill()
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)
    (data,) = [
        json.loads(d)
        for (d,) in _rows(db, "SELECT data FROM events WHERE kind = 'process_exit'")
        if json.loads(d)["pid"] == kid.pid
    ]
    assert (data["cause"], data["exit_code"]) == ("engine_oom", 1)
    rules = [
        json.loads(d)["rule"]
        for (d,) in _rows(db, "SELECT data FROM events WHERE kind = 'alert_fired'")
    ]
    # once: the log line's engine_oom alert; the exit it explains fires no second one
    assert sorted(r for r in rules if r in ("app_oom", "engine_oom", "crash")) == ["engine_oom"]
    doc = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "monitor",
                "postmortem",
                "--pid",
                str(kid.pid),
                "--json",
                "--db",
                str(db),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
            check=True,
        ).stdout
    )
    assert doc["title"] == "OOM post-mortem"
