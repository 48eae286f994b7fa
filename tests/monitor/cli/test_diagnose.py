"""`vramscope diagnose`: the '16 GiB' embedding server that really holds 23.8 GiB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cli_runner
import gguf_models as g
import pytest

from collectors.base import DeviceSample, ProcessInfo, ProcessMemory, Snapshot
from monitor.report.status import to_json

ROOT = Path(__file__).resolve().parents[3]
GIB, MIB = 1024**3, 1024**2
DEV = "drm:0000:c5:00.0"


vramscope = cli_runner.vramscope


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("box")
    blobs = d / "models" / "blobs"
    blobs.mkdir(parents=True)
    # Qwen3-Embedding-4B shape (a decoder-based embedder: it has a KV cache), Q8_0
    md = {
        f"qwen3.{k}": v
        for k, v in {
            "block_count": 36,
            "context_length": 40960,
            "embedding_length": 2560,
            "feed_forward_length": 9728,
            "attention.head_count": 32,
            "attention.head_count_kv": 8,
            "attention.key_length": 128,
            "attention.value_length": 128,
            "pooling_type": 3,
        }.items()
    }
    tensors = g.dense_tensors(
        n_layer=36,
        n_embd=2560,
        n_head=32,
        n_head_kv=8,
        head_dim=128,
        n_ff=9728,
        n_vocab=151936,
        ggml_type=g.Q8_0,
        output=False,
    )
    blob = blobs / ("sha256-" + "ab" * 32)
    written = g.write_model(d / "emb.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    written.rename(blob)
    # ollama with OLLAMA_NUM_PARALLEL=16 and num_ctx 8192 starts its runner with
    # -c 131072 -np 16 (llm/llama_server.go: NumCtx x numParallel)
    argv = (
        "/usr/lib/ollama/llama-server",
        "--model",
        str(blob),
        "--port",
        "40123",
        "--host",
        "127.0.0.1",
        "--no-webui",
        "--offline",
        "-c",
        "131072",
        "-np",
        "16",
        "--log-verbosity",
        "4",
        "--embedding",
        "-b",
        "2048",
        "-ub",
        "2048",
    )
    info = ProcessInfo(
        777, 50, None, 700, 997, "llama-server", argv, "ollama", ("inference", "gpu")
    )
    apu = DeviceSample(
        DEV,
        "drm",
        "amd",
        "Strix Halo",
        "unified",
        int(120.5 * GIB),
        int(24.1 * GIB),
        vram_total_bytes=512 * MIB,
        vram_used_bytes=300 * MIB,
        gtt_total_bytes=120 * GIB,
        gtt_used_bytes=int(23.8 * GIB),
        gtt_ceiling_bytes=120 * GIB,
    )
    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 128 * GIB, 40 * GIB, available_bytes=88 * GIB
    )
    snap = Snapshot(
        1_800_000_000_000,
        (apu, host),
        (info,),
        (
            ProcessMemory(777, DEV, vram_bytes=0, gtt_bytes=int(23.8 * GIB)),
            ProcessMemory(777, "host", rss_anon_bytes=200 * MIB, rss_file_bytes=0),
        ),
        (),
        (),
        (),
    )
    state = d / "state.json"
    state.write_text(json.dumps(to_json(snap)))
    config = d / "config.toml"
    config.write_text(f'[budgets]\n"{blob.name}" = 16\n')
    return {"state": state, "config": config}


def test_excess_is_attributed_to_ollamas_context_times_parallel(box: dict[str, Path]) -> None:
    result = vramscope(
        "diagnose", "--json", "--state", str(box["state"]), "--config", str(box["config"])
    )
    assert result.returncode == 0, result.stderr
    (d,) = json.loads(result.stdout)
    assert d["budget_bytes"] == 16 * GIB
    assert d["measured_bytes"] == int(23.8 * GIB) + 200 * MIB
    kv = next(f for f in d["findings"] if f["component"] == "kv")
    # 131072 cells x 36 layers x (K+V) x 8 heads x 128 x 2 B = 18 GiB
    assert kv["bytes"] == 131072 * 36 * 2 * 1024 * 2
    assert "ollama passes -c NumCtx x parallel: 131072 cells" in kv["cause"]
    assert kv["fix"] == "-ctk q8_0 -ctv q8_0" and kv["frees_bytes"] > 8 * GIB
    assert d["findings"][0]["component"] == "kv"  # the biggest part
    assert "over the budget of 16.0 GiB" in d["summary"] and "ollama passes" in d["summary"]
    assert abs(d["estimated_bytes"] - d["measured_bytes"]) < 1.5 * GIB  # estimate explains it


def test_text_output_and_a_server_within_budget(box: dict[str, Path], tmp_path: Path) -> None:
    text = vramscope("diagnose", "--state", str(box["state"]), "--config", str(box["config"]))
    assert text.returncode == 0
    assert text.stdout.startswith("pid 777: sha256-")
    assert "-ctk q8_0 -ctv q8_0 frees" in text.stdout
    generous = tmp_path / "c.toml"
    generous.write_text(box["config"].read_text().replace("= 16", "= 30"))
    ok = json.loads(
        vramscope(
            "diagnose", "--json", "--state", str(box["state"]), "--config", str(generous)
        ).stdout
    )
    assert "as expected" in ok[0]["summary"]


def test_bad_budget_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[budgets]\n"m.gguf" = "lots"\n')
    result = vramscope("diagnose", "--config", str(cfg))
    assert (
        result.returncode == 2 and "[budgets] 'm.gguf' must be a positive number" in result.stderr
    )


def test_daemon_polls_slots_and_diagnose_sizes_the_fix_from_real_use(tmp_path: Path) -> None:
    """A real llama-server-named process, its /slots served on loopback: the daemon stores
    the tokens in use and `diagnose` turns their p99 into a -c that covers it."""
    import shutil
    import threading
    from dataclasses import replace
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from collectors.base import Roots
    from monitor.cli.diagnose import run_diagnose
    from monitor.config import Config
    from monitor.daemon.loop import DaemonContext, poll_slots, tick
    from monitor.daemon.sampler import Sampler
    from monitor.store.database import Store

    use = iter([(1500, 900), (1700, 1200), (1600, 400), (1650, 1000)] * 10)
    served: list[int] = []  # this server's answers: other llama-servers may run on the box

    class Slots(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if not self.path.startswith("/slots"):
                self.send_response(404)
                self.end_headers()
                return
            a, b = next(use)
            served.append(a)
            body = json.dumps(
                [
                    {
                        "id": i,
                        "n_ctx": 8192,
                        "is_processing": t > 0,
                        "n_prompt_tokens": t,
                        "next_token": [{"has_next_token": True, "n_decoded": 10}],
                    }
                    for i, t in enumerate((a, b, 0, 0))
                ]
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slots)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    md, tensors = g.qwen3_8b()
    model = g.write_model(tmp_path / "m.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    port = str(server.server_address[1])
    child = subprocess.Popen(
        [
            str(exe),
            "-c",
            "import time; time.sleep(60)",
            "-m",
            str(model),
            "--port",
            port,
            "-c",
            "32768",
            "-np",
            "4",
        ]
    )
    try:
        cfg = Config(db_path=tmp_path / "v.db")
        store = Store.open(cfg.db_path)
        ctx = DaemonContext(cfg, store, Sampler(Roots()))
        from monitor.integrations.slots import SlotPoller

        ctx.slot_poller = SlotPoller(min_interval_s=10.0, timeout_s=5.0)  # a busy CI box
        import time

        deadline = time.monotonic() + 30  # until the child's command line reads whole
        while (
            b"--port" not in Path(f"/proc/{child.pid}/cmdline").read_bytes()
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        snap = tick(ctx)
        assert any(p.pid == child.pid for p in snap.processes)
        answered = 0
        for i in range(8):  # the poller allows one request per server per 10 s
            ctx.last_snapshot = replace(snap, ts_ms=snap.ts_ms + i * 10_001)
            answered += poll_slots(ctx)
        assert len(served) == 8 and answered >= 8
        stored = store.db.execute(
            "SELECT count(*), sum(busy), max(tokens) FROM slot_usage WHERE model = ?", (str(model),)
        ).fetchone()
        assert stored == (32, 16, 1700)  # 4 slots per poll, 2 of them busy
        store.close()
        (d,) = run_diagnose(cfg, None, None, child.pid)
    finally:
        child.kill()
        child.wait()
        server.shutdown()
    kv = next(f for f in d.findings if f.component == "kv")
    # p99 1700 x 1.25 -> 2304 per slot x 4 streams (non-unified) = 9216 cells
    assert kv.fix == "-c 9216 covers the p99 of 1700 tokens in use"
    assert kv.frees_bytes > 0


@pytest.mark.parametrize("columns", ["80", "200"])
def test_text_fits_columns_and_keeps_every_word(box: dict[str, Path], columns: str) -> None:
    """Piped, COLUMNS lays the text out as a terminal of that width would (issue 34): every
    line fits, every word is there whole (the 71-character blob name included)."""
    args = ("diagnose", "--state", str(box["state"]), "--config", str(box["config"]))
    plain = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    whole = vramscope_env(plain, *args)
    fitted = vramscope_env({**plain, "COLUMNS": columns}, *args)
    assert max(map(len, whole.splitlines())) > 80  # the case is real
    assert all(len(x) <= int(columns) for x in fitted.splitlines()), fitted
    assert fitted.split() == whole.split() and "…" not in fitted


def vramscope_env(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
