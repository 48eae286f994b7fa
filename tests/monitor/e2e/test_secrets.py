"""No secret of a real process reaches the database, ``events --json`` or a post-mortem
(issue 14, item 7).

A real process (a copy of the Python binary named ``llama-server``, so it is tracked at
once) runs with secrets in every spelling of collectors.redact.SPELLINGS on its command
line and in its environment; the real daemon samples it into a real SQLite file, the
process is killed, and the whole database (and its WAL), ``vramscope events --json`` and
``vramscope postmortem --pid PID --json`` are searched for each secret's bytes.
"""

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

import pytest

ROOT = Path(__file__).resolve().parents[3]
CODE = "import sys, time; print('ready', flush=True); time.sleep(120)"
# grows by 4 MiB every 50 ms: its memory never settles, so it is still loading when killed
GROW = (
    "import sys, time\nheld = []\nprint('ready', flush=True)\nwhile True:\n"
    "    held.append(bytearray(4 << 20)); time.sleep(0.05)"
)
SECRETS = [f"zq{i}x{'s3cr3t'}v{i:02d}" for i in range(22)]


def _argv(exe: Path, code: str = CODE, model: list[str] | None = None) -> list[str]:
    s = SECRETS
    return [
        str(exe),
        "-c",
        code,  # python runs the code; the rest is llama-server-like argv
        *(model or []),  # without -m the model comes from LLAMA_ARG_MODEL
        "--port",
        "18080",
        "--api-key",
        s[0],
        f"--api-key={s[1]}",
        "--passphrase",
        s[2],
        "--password",
        s[3],
        "--secret",
        s[4],
        "--hf-token",
        s[5],
        "-H",
        f"Authorization: Bearer {s[6][:5]}",  # a short bearer token
        "--header",
        json.dumps({"Authorization": f"Bearer {s[7]}"}),
        "-o",
        json.dumps({"api_key": s[8], "token": s[9]}, separators=(",", ":")),
        f"TOKEN={s[10]}",
        f"API_KEY={s[11]}",
        f"PASSWORD={s[12]}",
        f"FOO_TOKEN={s[13]}",
        f"https://user:{s[14]}@127.0.0.1/m.gguf?token={s[15]}&key={s[16]}",
    ]


def _env() -> dict[str, str]:
    s = SECRETS
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LLAMA_ARG_API_KEY": s[17],
        "HF_TOKEN": s[18],
        "LLAMA_ARG_MODEL_URL": f"https://user:{s[19]}@127.0.0.1/m.gguf",
        "LLAMA_ARG_CTX_SIZE": "4096",
        # a key the estimator reads (its model's name is stored): its value is redacted
        "LLAMA_ARG_MODEL": f"/models/tiny.gguf?token={s[20]}&sig={s[21]}",
        "SOME_UNRELATED": "zqleakedenvironmentvalue",
    }


def _vramscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def _found(blob: bytes) -> list[str]:
    words = [*SECRETS, "zqleakedenvironmentvalue", SECRETS[6][:5]]
    return [w for w in words if w.encode() in blob]


@pytest.mark.slow  # a real daemon for many seconds: the default suite stays under 5 min
def test_no_secret_of_a_real_process_is_stored_or_shown(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    import gguf_models as g

    md, tensors = g.qwen3_8b(n_layer=2, n_vocab=300)
    model = g.write_model(tmp_path / "m.gguf", "qwen3", md, tensors, vocab_size=300)[0]
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    server = grower = None
    try:
        deadline = time.monotonic() + 60
        while not db.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # the daemon's first ticks: the server is then new to it
        server = subprocess.Popen(_argv(exe), env=_env(), stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        seen = False
        while not seen and time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                with sqlite3.connect(db, timeout=5) as conn:
                    seen = bool(
                        conn.execute(  # ours: other servers may run on the box
                            "SELECT 1 FROM events WHERE kind = 'load_started'"
                            " AND json_extract(data, '$.pid') = ?",
                            (server.pid,),
                        ).fetchall()
                    )
            except sqlite3.OperationalError:
                pass
        assert seen, "the daemon never saw the server start loading"
        grower = subprocess.Popen(
            _argv(exe, GROW, ["-m", str(model)]), env=_env(), stdout=subprocess.PIPE, text=True
        )
        assert grower.stdout is not None and grower.stdout.readline().strip() == "ready"
        time.sleep(1.5)  # seen, estimated, still loading
        grower.send_signal(signal.SIGKILL)  # died during load: a crash to explain
        grower.wait(timeout=10)
        time.sleep(1.5)  # a few ticks to see the exit
    finally:
        for proc in (server, grower):
            if proc is not None:
                proc.kill()
                proc.wait()
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)
    with sqlite3.connect(db) as conn:
        argv_rows = [r[0] for r in conn.execute("SELECT argv FROM processes")]
    ours = [a for a in argv_rows if "--passphrase" in (a or "")]
    assert ours, "the server's command line was not stored"
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("v.db*"))
    assert _found(stored) == [], ours
    events = _vramscope("events", "--since", "1h", "--json", "--db", str(db))
    assert events.returncode == 0, events.stderr
    listed = json.loads(events.stdout)
    loads = [e["message"] for e in listed if e["kind"] == "load_started"]
    assert any("tiny.gguf" in m for m in loads), loads  # the model from LLAMA_ARG_MODEL
    assert _found(events.stdout.encode()) == []
    assert grower is not None
    post = _vramscope("postmortem", "--pid", str(grower.pid), "--json", "--db", str(db))
    assert post.returncode == 0, post.stderr
    assert "llama-server" in post.stdout  # the report is about our server
    assert _found((post.stdout + post.stderr).encode()) == []
