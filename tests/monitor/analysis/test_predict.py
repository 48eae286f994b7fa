"""`vramscope predict`: user stories with GGUF headers in realistic shapes and recorded box
states (``status --json`` files built from the collector types)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf_models as g
import pytest
from box_states import APU, EMBED_PID, embedding_server, host, strix_halo, write_state

from collectors.base import DeviceSample, ProcessInfo, ProcessMemory, Snapshot

ROOT = Path(__file__).resolve().parents[3]
GIB, MIB = 1024**3, 1024**2


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


def qwen(
    path: Path,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_kv: int,
    n_ff: int,
    qtype: int,
    ctx: int = 32768,
) -> str:
    md = {
        f"qwen3.{k}": v
        for k, v in {
            "block_count": n_layer,
            "context_length": ctx,
            "embedding_length": n_embd,
            "feed_forward_length": n_ff,
            "attention.head_count": n_head,
            "attention.head_count_kv": n_kv,
            "attention.key_length": 128,
            "attention.value_length": 128,
        }.items()
    }
    tensors = g.dense_tensors(
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_kv,
        head_dim=128,
        n_ff=n_ff,
        n_vocab=151936,
        ggml_type=qtype,
    )
    return str(g.write_model(path, "qwen3", md, tensors, vocab_size=151936)[0])


# -- story 2: an 8 GB laptop GPU, a 27B dense model split with -ngl, drafts ----------------


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("laptop")
    models = {
        # 48 layers, Q4_K: 16.2 GiB of weights (a 27B dense model at ~4.8 bits)
        "27b": qwen(d / "27b.gguf", 48, 5120, 40, 8, 32768, g.Q4_K),
        "0.8b": qwen(d / "0.8b.gguf", 28, 1024, 16, 8, 3072, g.Q8_0),
        "9b": qwen(d / "9b.gguf", 36, 4096, 32, 8, 12288, g.Q4_K),
    }
    gpu = DeviceSample(
        "nvml:GPU-laptop",
        "nvml",
        "nvidia",
        "RTX 4060 Laptop",
        "dedicated",
        8 * GIB,
        50 * MIB,
        free_bytes=8 * GIB - 50 * MIB,
    )
    models["state"] = str(write_state(d / "state.json", [gpu, host(40 * GIB)], []))
    return models


def predict_json(*args: str) -> tuple[int, dict]:
    result = vramscope("predict", "--json", *args)
    assert result.returncode in (0, 1, 3, 4), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_laptop_small_draft_fits_and_big_draft_does_not(laptop: dict[str, str]) -> None:
    base = [
        "--state",
        laptop["state"],
        "--margin-gib",
        "0.25",
        "--",
        "llama-server",
        "-m",
        laptop["27b"],
        "-c",
        "2048",
        "-np",
        "1",
        "-fa",
        "on",
    ]
    code, doc = predict_json(
        *base[:5], *base[5:], "-ngl", "20", "-md", laptop["0.8b"], "-ngld", "99"
    )
    assert (code, doc["verdict"]) == (0, "fits")
    gpu = doc["devices"][0] if doc["devices"][0]["device_id"] != "host" else doc["devices"][1]
    assert 7.0 * GIB < gpu["need_bytes"] < gpu["room_bytes"] - gpu["margin_bytes"]
    code, doc = predict_json(*base, "-ngl", "24", "-md", laptop["9b"], "-ngld", "99")
    assert (code, doc["verdict"]) == (1, "oom")
    fixes = {f["change"]: f for f in doc["fixes"]}
    assert fixes["without the draft model (-md)"]["frees"]["nvml:GPU-laptop"] > 4 * GIB
    ngl = next(f for f in doc["fixes"] if f["change"].startswith("-ngl "))
    assert ngl["verdict"] == "fits" and int(ngl["change"].split()[1]) < 24


def test_laptop_throughput_baseline_beats_every_draft_split(laptop: dict[str, str]) -> None:
    """The draft displaces target layers to host RAM; the baseline is the same model with
    the most layers that fit without it, and it is faster than every split with the draft."""
    common = [
        "--state",
        laptop["state"],
        "--margin-gib",
        "0.25",
        "--bw",
        "gpu=272",
        "--bw",
        "host=76.8",
        "--flops",
        "host=0.4",
        "--",
        "llama-server",
        "-m",
        laptop["27b"],
        "-c",
        "2048",
        "-np",
        "1",
        "-fa",
        "on",
        "--spec-type",
        "draft-simple",
    ]
    speeds = []
    for ngl in ("16", "18", "20"):
        _, doc = predict_json(*common, "-ngl", ngl, "-md", laptop["0.8b"], "-ngld", "99")
        draft = doc["throughput"]["draft"]
        speeds.append(draft["with_draft_tokens_per_s"])
        assert draft["baseline"].startswith("no draft, -ngl ")
        assert int(draft["baseline"].split()[3].rstrip(",")) >= 22
        assert draft["without_draft_tokens_per_s"] > doc["throughput"]["tokens_per_s"]
        assert draft["n_draft"] == 3 and draft["accept"] == 0.7  # the stated defaults
    assert speeds == sorted(speeds) and speeds[0] < speeds[-1]  # more GPU layers, faster


def test_laptop_throughput_unknown_names_the_missing_figure_not_a_guess(
    laptop: dict[str, str],
) -> None:
    """Layers in host RAM and no --bw host: the GPU's figures come from the table by its
    name, the host's bandwidth cannot be known, so the answer is "unknown" with the flag."""
    state = ["--state", laptop["state"], "--margin-gib", "0.25"]
    launch = ["--", "llama-server", "-m", laptop["27b"], "-c", "2048", "-ngl", "20"]
    _, doc = predict_json(*state, "--accept", "0.8", *launch)
    t = doc["throughput"]
    assert t["tokens_per_s"] is None and t["draft"] is None
    assert t["unknown"] == "no bandwidth known for host (give --bw host=GB/s)"
    assert any("table: RTX 4060 Laptop 256 GB/s" in s for s in t["sources"])
    text = vramscope("predict", *state, "--accept", "0.8", *launch).stdout
    assert "throughput (roofline): unknown, no bandwidth known for host" in text
    _, doc = predict_json(*state, "--bw", "hots=76.8", *launch)  # a typo is named, not used
    assert doc["throughput"]["unknown"] == "no bandwidth known for host (give --bw host=GB/s)"
    assert doc["throughput"]["notes"] == [
        "--bw/--flops hots: no such device here (nvml:GPU-laptop, host)"
    ]
    _, doc = predict_json(*state, "--bw", "host=76.8", *launch)
    assert doc["throughput"]["tokens_per_s"] > 0 and doc["throughput"]["unknown"] is None


def test_vllm_throughput_is_unknown_because_it_places_no_weights(laptop: dict[str, str]) -> None:
    """vLLM's estimate is a budget per GPU, no weights per device: nothing to roofline."""
    _, doc = predict_json(
        "--state", laptop["state"], "--bw", "gpu=272", "--", "vllm", "serve", "Qwen/Qwen3-8B"
    )
    assert doc["throughput"]["unknown"] == "the estimate places no weights (per device)"


# -- story 1: unified memory, an embedding server over budget, a MoE + draft to load -------


def moe(path: Path, n_layer: int = 48) -> str:
    """A 122B-A10B-like MoE at ~Q4_K_M: 256 experts of 768, 8 used."""
    md = {
        f"qwen3moe.{k}": v
        for k, v in {
            "block_count": n_layer,
            "context_length": 262144,
            "embedding_length": 3072,
            "feed_forward_length": 12288,
            "expert_feed_forward_length": 1024,
            "expert_count": 256,
            "expert_used_count": 8,
            "attention.head_count": 32,
            "attention.head_count_kv": 4,
            "attention.key_length": 128,
            "attention.value_length": 128,
        }.items()
    }
    tensors = g.dense_tensors(
        n_layer=n_layer,
        n_embd=3072,
        n_head=32,
        n_head_kv=4,
        head_dim=128,
        n_ff=256,
        n_vocab=151936,
        ggml_type=g.Q4_K,
    )
    for il in range(n_layer):
        for part in ("gate", "up"):
            tensors.append((f"blk.{il}.ffn_{part}_exps.weight", (3072, 1024, 256), g.Q4_K))
        tensors.append((f"blk.{il}.ffn_down_exps.weight", (1024, 3072, 256), g.Q4_K))
    return str(g.write_model(path, "qwen3moe", md, tensors, vocab_size=151936)[0])


@pytest.fixture(scope="module")
def strix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("strix")
    models = {
        "moe": moe(d / "moe.gguf"),
        "4b": qwen(d / "4b.gguf", 36, 2560, 32, 8, 9728, g.Q4_K),
        "0.6b": qwen(d / "0.6b.gguf", 28, 1024, 16, 8, 3072, g.Q4_K),
    }
    # 96.0 GiB for models in all; the embedding server holds 23.8 GiB of GTT already
    embed, used = embedding_server(), int(23.8 * GIB)
    models["state"] = str(
        write_state(
            d / "state.json",
            [strix_halo(used), host(int(72.2 * GIB))],
            [(embed, [ProcessMemory(EMBED_PID, APU, gtt_bytes=used)])],
        )
    )
    # the same box once the embedding server is fixed to its 16 GiB budget
    fixed = 16 * GIB
    models["state_fixed"] = str(
        write_state(
            d / "state-fixed.json",
            [strix_halo(fixed), host(96 * GIB - fixed)],
            [(embed, [ProcessMemory(EMBED_PID, APU, gtt_bytes=fixed)])],
        )
    )
    return models


def test_unified_box_predicts_oom_before_the_load_and_names_the_fixes(
    strix: dict[str, str],
) -> None:
    code, doc = predict_json(
        "--state",
        strix["state"],
        "--margin-gib",
        "0.5",
        "--",
        "llama-server",
        "-m",
        strix["moe"],
        "-c",
        "32768",
        "-np",
        "1",
        "-fa",
        "on",
        "-md",
        strix["4b"],
    )
    # 72.38 GiB in all, 0.45 GiB of it the host's mmap'd weights (token_embd and the
    # rest left on the CPU): page cache the kernel evicts before the GTT allocations
    # fail, so what must fit (71.93 GiB of GTT) is inside the 72.2 GiB room but not the
    # 0.5 GiB margin: TIGHT, not OOM, at load; OOM once the prompt cache fills (exit 3);
    # every fix is still priced
    assert (code, doc["verdict"], doc["grown"]["verdict"]) == (3, "tight", "oom")
    apu = next(d for d in doc["devices"] if d["device_id"] == "drm:0000:c5:00.0")
    assert apu["binding"] == "MemAvailable" and apu["room_bytes"] == int(72.2 * GIB)
    assert apu["need_bytes"] > apu["room_bytes"] > apu["must_fit_bytes"]
    assert apu["must_fit_bytes"] > apu["room_bytes"] - apu["margin_bytes"]
    fixes = {f["change"]: f for f in doc["fixes"]}
    stop = fixes["stop llama-server (qwen3-embedding-8b.gguf) (pid 4242)"]
    assert stop["frees"]["drm:0000:c5:00.0"] == int(23.8 * GIB)
    assert any(f["verdict"] == "fits" for f in doc["fixes"])
    smaller = fixes[f"-md {strix['0.6b']} (a smaller draft beside the current one)"]
    assert smaller["frees"]["drm:0000:c5:00.0"] > GIB
    # the smaller draft alone: price it directly
    code, small = predict_json(
        "--state",
        strix["state"],
        "--",
        "llama-server",
        "-m",
        strix["moe"],
        "-c",
        "32768",
        "-np",
        "1",
        "-fa",
        "on",
        "-md",
        strix["0.6b"],
    )
    apu_small = next(d for d in small["devices"] if d["device_id"] == "drm:0000:c5:00.0")
    assert apu_small["need_bytes"] < apu["need_bytes"] - GIB
    # both suggested changes: the 0.6B draft and the embedding server at its budget
    code, after = predict_json(
        "--state",
        strix["state_fixed"],
        "--",
        "llama-server",
        "-m",
        strix["moe"],
        "-c",
        "32768",
        "-np",
        "1",
        "-fa",
        "on",
        "-md",
        strix["0.6b"],
    )
    assert (code, after["verdict"]) == (0, "fits")
    total_before = 23.8 * GIB + apu["need_bytes"]
    total_after = 16 * GIB + next(
        d["need_bytes"] for d in after["devices"] if d["device_id"] == "drm:0000:c5:00.0"
    )
    assert total_before > 96 * GIB > total_after  # the story: 97.6 -> 87.7 GiB of 96.0


# -- story 3: fit-ctx falls as the KV type widens and the draft depth grows ----------------


def test_fit_ctx_falls_with_wider_kv_types(laptop: dict[str, str], tmp_path: Path) -> None:
    gpu = DeviceSample(
        "nvml:GPU-16g", "nvml", "nvidia", "RTX 4080", "dedicated", 16 * GIB, 0, free_bytes=16 * GIB
    )
    state = write_state(tmp_path / "s.json", [gpu, host(60 * GIB)], [])
    fits = []
    for kv in ("q4_0", "q5_1", "q8_0", "f16"):
        code, doc = predict_json(
            "--state",
            str(state),
            "--fit-ctx",
            "--",
            "llama-server",
            "-m",
            laptop["27b"],
            "-np",
            "1",
            "-fa",
            "on",
            "-ctk",
            kv,
            "-ctv",
            kv,
        )
        assert doc["fit_ctx"] is not None and doc["fit_ctx"] % 256 == 0
        fits.append(doc["fit_ctx"])
    assert fits == sorted(fits, reverse=True) and fits[0] > fits[-1]
    # bits per element 4.5 / 6 / 8.5 / 16: the KV share scales inversely with them
    room_q8, room_f16 = fits[2] * 8.5, fits[3] * 16
    assert abs(room_q8 - room_f16) / room_f16 < 0.02


def test_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    result = vramscope("predict", "--", "ls")
    assert result.returncode == 2 and "not an inference server command" in result.stderr
    bad = tmp_path / "state.json"
    bad.write_text("{}")
    result = vramscope("predict", "--state", str(bad), "--", "llama-server", "-m", "x.gguf")
    assert result.returncode == 2 and "not a vramscope status --json document" in result.stderr
    result = vramscope("predict", "--bw", "gpu:272", "--", "llama-server", "-m", "x.gguf")
    assert result.returncode == 2 and "DEVICE=GB/s" in result.stderr


# -- story 4: llama-swap groups decide what is unloaded first -------------------------------


def test_swap_exclusive_group_counts_evictions_and_spares_the_persistent(tmp_path: Path) -> None:
    big_a = qwen(tmp_path / "big-a.gguf", 48, 5120, 40, 8, 32768, g.Q4_K)  # 16.2 GiB
    big_b = qwen(tmp_path / "big-b.gguf", 36, 4096, 32, 8, 12288, g.Q8_0)
    embed = qwen(tmp_path / "embed.gguf", 12, 1024, 16, 8, 3072, g.Q8_0)
    small = qwen(tmp_path / "small.gguf", 28, 1024, 16, 8, 3072, g.Q8_0)
    config = tmp_path / "swap.yaml"
    config.write_text(f"""
models:
  big-a: {{cmd: "llama-server --port ${{PORT}} -m {big_a} -c 4096 -np 1 -fa on"}}
  big-b: {{cmd: "llama-server --port ${{PORT}} -m {big_b} -c 4096 -np 1"}}
  embed: {{cmd: "llama-server --port ${{PORT}} -m {embed} --embedding"}}
  small: {{cmd: "llama-server --port ${{PORT}} -m {small} -c 4096"}}
routing:
  router:
    use: group
    settings:
      groups:
        big: {{swap: true, exclusive: true, members: [big-a, big-b]}}
        forever: {{persistent: true, swap: false, exclusive: false, members: [embed]}}
        side: {{swap: false, exclusive: false, members: [small]}}
""")
    gpu_id = "nvml:GPU-24g"
    uses = {
        "big-b": (101, big_b, 9 * GIB),
        "embed": (102, embed, 1 * GIB),
        "small": (103, small, 2 * GIB),
    }
    procs = []
    for pid, path, held in uses.values():
        info = ProcessInfo(
            pid,
            pid,
            None,
            1,
            1000,
            "llama-server",
            ("llama-server", "--port", "9000", "-m", path),
            "llama.cpp",
            ("inference", "gpu"),
        )
        procs.append((info, [ProcessMemory(pid, gpu_id, vram_bytes=held)]))
    used = sum(h for _, _, h in uses.values())
    gpu = DeviceSample(
        gpu_id,
        "nvml",
        "nvidia",
        "RTX 4090",
        "dedicated",
        24 * GIB,
        used,
        free_bytes=24 * GIB - used,
    )
    state = write_state(tmp_path / "state.json", [gpu, host(60 * GIB)], procs)
    code, doc = predict_json("--state", str(state), "--swap-config", str(config), "big-a")
    assert doc["would_unload"] == ["llama-server (big-b.gguf)", "llama-server (small.gguf)"]
    dev = next(d for d in doc["devices"] if d["device_id"] == gpu_id)
    assert dev["freed_bytes"] == 11 * GIB  # big-b and small; embed is persistent
    assert dev["room_bytes"] == 24 * GIB - used + 11 * GIB
    assert (code, doc["verdict"]) == (0, "fits")
    assert any("llama-swap unloads first: big-b, small" in n for n in doc["notes"])
    # a model of the non-exclusive side group unloads nobody from other groups
    code, side = predict_json("--state", str(state), "--swap-config", str(config), "small")
    assert side["would_unload"] == []


def test_fit_ctx_falls_as_the_mtp_draft_depth_grows(tmp_path: Path) -> None:
    """A hybrid model with an MTP layer: the recurrent state is kept x (1 + n_max) for
    rollback, so each extra draft token costs context (estimation.md 1b, 1f). qwen35 keeps
    the snapshots (llm_arch_supports_rs_rollback); qwen3next does not."""
    md = {
        f"qwen35.{k}": v
        for k, v in {
            "block_count": 49,
            "context_length": 262144,
            "embedding_length": 2048,
            "feed_forward_length": 5120,
            "attention.head_count": 16,
            "attention.head_count_kv": 2,
            "attention.key_length": 256,
            "attention.value_length": 256,
            "full_attention_interval": 4,
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 4096,
            "ssm.state_size": 128,
            "ssm.group_count": 16,
            "ssm.time_step_rank": 32,
            "nextn_predict_layers": 1,
        }.items()
    }
    tensors = g.dense_tensors(
        n_layer=49,
        n_embd=2048,
        n_head=16,
        n_head_kv=2,
        head_dim=256,
        n_ff=5120,
        n_vocab=151936,
        ggml_type=g.Q4_K,
    )
    model = str(
        g.write_model(tmp_path / "hybrid.gguf", "qwen35", md, tensors, vocab_size=151936)[0]
    )
    gpu = DeviceSample(
        "nvml:GPU-16g", "nvml", "nvidia", "RTX 4080", "dedicated", 16 * GIB, 0, free_bytes=16 * GIB
    )
    state = write_state(tmp_path / "s.json", [gpu, host(60 * GIB)], [])
    fits = []
    for depth in ("1", "3", "6"):
        _, doc = predict_json(
            "--state",
            str(state),
            "--fit-ctx",
            "--",
            "llama-server",
            "-m",
            model,
            "-np",
            "4",
            "-fa",
            "on",
            "--spec-type",
            "draft-mtp",
            "--spec-draft-n-max",
            depth,
        )
        fits.append(doc["fit_ctx"])
    assert fits[0] > fits[1] > fits[2]


def test_predict_at_a_moment_in_the_database(tmp_path: Path, laptop: dict[str, str]) -> None:
    from datetime import datetime

    from monitor.store.database import Store

    used = 6 * GIB
    gpu = DeviceSample(
        "nvml:GPU-laptop",
        "nvml",
        "nvidia",
        "RTX 4060 Laptop",
        "dedicated",
        8 * GIB,
        used,
        free_bytes=8 * GIB - used,
    )
    other = ProcessInfo(
        55,
        55,
        None,
        1,
        1000,
        "llama-server",
        ("llama-server", "-m", laptop["0.8b"]),
        "llama.cpp",
        ("gpu",),
    )
    db = tmp_path / "v.db"
    store = Store.open(db)
    t0 = 1_800_000_000_000
    store.write(
        Snapshot(
            t0,
            (gpu, host(40 * GIB)),
            (other,),
            (ProcessMemory(55, "nvml:GPU-laptop", vram_bytes=used),),
            (),
            (),
            (),
        )
    )
    store.write(Snapshot(t0 + 60_000, (replace_used(gpu, 0), host(40 * GIB)), (), (), (), (), ()))
    store.close()
    at = datetime.fromtimestamp((t0 + 1000) / 1000).strftime("%Y-%m-%d %H:%M:%S")
    cmd = ["--", "llama-server", "-m", laptop["27b"], "-c", "2048", "-np", "1", "-ngl", "20"]
    code, then = predict_json("--db", str(db), "--at", at, *cmd)
    assert (code, then["verdict"]) == (1, "oom")  # 6 GiB were taken then
    assert any(f["change"] == "stop llama-server (0.8b.gguf) (pid 55)" for f in then["fixes"])
    later = datetime.fromtimestamp((t0 + 61_000) / 1000).strftime("%Y-%m-%d %H:%M:%S")
    code, now = predict_json("--db", str(db), "--at", later, *cmd)
    assert now["verdict"] in ("fits", "tight")
    result = vramscope("predict", "--db", str(db), "--at", "1999-01-01 00:00", *cmd)
    assert result.returncode == 2 and "is before the first sample" in result.stderr


def replace_used(d: DeviceSample, used: int) -> DeviceSample:
    from dataclasses import replace

    return replace(d, used_bytes=used, free_bytes=(d.total_bytes or 0) - used)


# -- launch values llama-server would refuse: no verdict, exit 2 ----------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-c", "abc"], "-c abc: expected an integer (llama-server would refuse it)"),
        (["-c", "1e5"], "-c 1e5: expected an integer (llama-server would read it as 1)"),
        (["-np", "abc"], "-np abc: expected an integer (llama-server would refuse it)"),
        (["-ngl", "lots"], "-ngl lots: expected an integer, 'auto' or 'all'"),
        (["--spec-type", "warp"], "--spec-type warp: expected speculative types"),
    ],
)
def test_predict_refuses_what_llama_server_refuses(
    laptop: dict[str, str], flags: list[str], message: str
) -> None:
    result = vramscope(
        "predict", "--state", laptop["state"], "--", "llama-server", "-m", laptop["0.8b"], *flags
    )
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vramscope: error: {message}"), lines


def test_predict_swap_model_with_a_refused_value_names_the_model(
    laptop: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "swap.yaml"
    config.write_text(
        f'models:\n  small: {{cmd: "llama-server --port ${{PORT}} -m {laptop["0.8b"]} -c 4k"}}\n'
    )
    result = vramscope("predict", "--state", laptop["state"], "--swap-config", str(config), "small")
    assert result.returncode == 2, result.stdout
    assert result.stderr.strip() == (
        "vramscope: error: llama-swap model small: -c 4k: "
        "expected an integer (llama-server would read it as 4)"
    )


# -- the exit contract holds on every path: 0 fits, 1 OOM, 2 error ---------------------------

FIXTURES = ROOT / "tests" / "fixtures"


def test_nothing_to_judge_is_an_error_not_fits(tmp_path: Path) -> None:
    """A box whose only device is host RAM (a recorded /proc, an empty /sys, no NVIDIA):
    vLLM takes a share of each GPU, and there is none, so there is no verdict to give."""
    config = tmp_path / "config.toml"
    config.write_text('[collectors]\nenabled = ["procfs"]\n')
    (tmp_path / "sys").mkdir()
    box = [
        "--config",
        str(config),
        "--proc-root",
        str(FIXTURES / "drm" / "rx7900xtx" / "proc"),
        "--sys-root",
        str(tmp_path / "sys"),
    ]
    for extra in ([], ["--json"]):
        result = vramscope("predict", *box, *extra, "--", "vllm", "serve", "Qwen/Qwen3-8B")
        assert result.returncode == 2, result.stdout
        assert result.stdout == ""
        assert result.stderr.strip() == (
            "vramscope: error: nothing to judge: vLLM takes 92% "
            "of each GPU's total; no GPU total known here"
        )


def test_nothing_to_judge_names_the_devices_without_a_free_figure(
    laptop: dict[str, str], tmp_path: Path
) -> None:
    unknown_host = DeviceSample("host", "procfs", "host", "Host RAM", "host", None, None)
    state = write_state(tmp_path / "state.json", [unknown_host], [])
    result = vramscope(
        "predict",
        "--state",
        str(state),
        "--",
        "llama-server",
        "-m",
        laptop["0.8b"],
        "-c",
        "2048",
        "-ngl",
        "0",
    )
    assert result.returncode == 2, result.stdout
    assert result.stderr.strip() == (
        "vramscope: error: nothing to judge: no device with a known free figure holds any "
        "part of this load (the box state has no free memory figure for host)"
    )


def test_a_text_where_a_byte_count_belongs_is_bad_input_exit_2_not_1(
    laptop: dict[str, str], tmp_path: Path
) -> None:
    """A state file of the right schema with a text where a byte count belongs: predict
    used to die in a traceback with exit 1, which a script reads as "OOM predicted"; then
    "predict failed: TypeError" (a bug's line); now the state file's own InputError."""
    state = tmp_path / "odd.json"
    state.write_text(
        json.dumps(
            {
                "schema": "vramscope.status/1",
                "ts_ms": 1_800_000_000_000,
                "processes": [],
                "devices": [
                    {
                        "device_id": "host",
                        "collector": "procfs",
                        "vendor": "host",
                        "name": "Host RAM",
                        "memory_kind": "host",
                        "total_bytes": "lots",
                        "used_bytes": 1,
                        "available_bytes": "x",
                    }
                ],
            }
        )
    )
    result = vramscope(
        "predict", "--state", str(state), "--", "llama-server", "-m", laptop["0.8b"], "-c", "2048"
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"vramscope: error: the state file {state}: DeviceSample.total_bytes is str 'lots', "
        "expected int | None"
    ], lines


# -- predict MODEL_ID reads [llama_swap] config from the config file -------------------------


def test_predict_model_id_uses_the_config_files_llama_swap_config(
    laptop: dict[str, str], tmp_path: Path
) -> None:
    swap = tmp_path / "swap.yaml"
    swap.write_text(
        f'models:\n  small: {{cmd: "llama-server --port ${{PORT}} -m '
        f'{laptop["0.8b"]} -c 4096 -np 1 -fa on"}}\n'
    )
    config = tmp_path / "config.toml"
    config.write_text(f'[llama_swap]\nconfig = "{swap}"\n')
    code, doc = predict_json("--config", str(config), "--state", laptop["state"], "small")
    assert (code, doc["verdict"]) == (0, "fits")
    assert doc["model_path"] == laptop["0.8b"]
    # --swap-config on the command line still wins over the file's
    other = tmp_path / "other.yaml"
    other.write_text(
        f'models:\n  small: {{cmd: "llama-server --port ${{PORT}} -m '
        f'{laptop["27b"]} -c 2048 -np 1 -ngl 99"}}\n'
    )
    code, doc = predict_json(
        "--config", str(config), "--state", laptop["state"], "--swap-config", str(other), "small"
    )
    assert doc["model_path"] == laptop["27b"] and code == 1


def test_predict_model_id_from_the_fixture_config_reaches_its_model(tmp_path: Path) -> None:
    """The llama-swap fixture's qwen alias resolves through the config file's setting to
    its cmd; its model is not on this machine, so the error names that file."""
    config = tmp_path / "config.toml"
    swap = ROOT / "tests" / "fixtures" / "llamaswap" / "default.yaml"
    config.write_text(f'[llama_swap]\nconfig = "{swap}"\n')
    result = vramscope("predict", "--config", str(config), "qwen")
    assert result.returncode == 2, result.stdout
    assert result.stderr.strip() == (
        "vramscope: error: /models/qwen2.5-32b-q4_k_m.gguf: no such file"
    )


# -- issue 18: growth is judged, and llama.cpp's own fit is simulated ----------------------


def run_predict_json(*args: str) -> tuple[int, dict]:
    result = vramscope("predict", "--json", *args)
    assert result.returncode in (0, 1, 3, 4), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_a_load_that_fits_but_whose_prompt_cache_does_not_exits_3(tmp_path: Path) -> None:
    """Host-only box, 6 GiB available: a ~2.2 GiB load fits; the default --cache-ram
    8192 MiB prompt cache does not once it fills. Exit 3, and --cache-ram N that fits."""
    model = qwen(tmp_path / "m.gguf", 4, 4096, 32, 8, 12288, g.Q8_0)
    state = write_state(tmp_path / "state.json", [host(6 * GIB, total=16 * GIB)], [])
    launch = ["--state", str(state), "--", "llama-server", "-m", model, "-c", "4096", "-np", "1"]
    code, doc = run_predict_json(*launch)
    assert code == 3 and doc["verdict"] == "fits"
    grown = doc["grown"]
    assert grown["verdict"] == "oom"
    assert [c["name"] for c in grown["grows"]] == ["cache_ram"]
    load, full = doc["devices"][0], grown["devices"][0]
    assert full["need_bytes"] == load["need_bytes"] + 8192 * MIB
    (bound,) = grown["bounds"]
    n = int(bound["change"].split()[1])
    assert bound["change"] == f"--cache-ram {n}" and bound["verdict"] == "fits"
    # the largest that keeps the margin, with what must stay resident: all but the mmap'd
    # token_embd, read a row at a time (page cache the kernel may evict)
    resident = load["must_fit_bytes"] + load["hot_evictable_bytes"]
    assert load["evictable_bytes"] > load["hot_evictable_bytes"] > 0
    spare = load["room_bytes"] - load["margin_bytes"] - resident
    assert n * MIB <= spare < (n + 1) * MIB
    # the bound it names does fit, and exits 0
    code, doc = run_predict_json(*launch, "--cache-ram", str(n))
    assert code == 0 and doc["grown"]["verdict"] == "fits"
    code, doc = run_predict_json(*launch, "--cache-ram", str(n + 64))  # into the margin
    assert code == 0 and doc["grown"]["verdict"] == "tight"
    # past the room: the prompt cache (anonymous) pushes the mapped weights out first:
    # slow, not killed (exit 4); OOM only once the anonymous part alone passes the room
    code, doc = run_predict_json(*launch, "--cache-ram", str(n + 600))
    assert code == 4 and doc["grown"]["verdict"] == "thrash"
    short = (load["room_bytes"] - load["must_fit_bytes"]) // MIB
    code, doc = run_predict_json(*launch, "--cache-ram", str(short + 64))
    assert code == 3 and doc["grown"]["verdict"] == "oom"
    text = vramscope("predict", *launch).stdout
    assert "once the caches fill" in text and f"    --cache-ram {n}: frees " in text
    assert "verdict: FITS, OOM once the caches fill" in text


def test_a_load_that_does_not_fit_at_all_exits_1_not_3(tmp_path: Path) -> None:
    """1 GiB available for ~2.2 GiB of weights: read into memory (-lm none) it is OOM at
    load (exit 1); mmap'd (the default) the kernel evicts the weights' page cache instead
    of killing, so it loads and thrashes (exit 4), and its growth is no kill either."""
    model = qwen(tmp_path / "m.gguf", 4, 4096, 32, 8, 12288, g.Q8_0)
    state = write_state(tmp_path / "state.json", [host(1 * GIB, total=16 * GIB)], [])
    launch = ["--state", str(state), "--", "llama-server", "-m", model, "-c", "4096", "-np", "1"]
    code, doc = run_predict_json(*launch, "-lm", "none", "--cache-ram", "0")
    assert code == 1 and doc["verdict"] == "oom"
    code, doc = run_predict_json(*launch, "--cache-ram", "0")
    assert code == 4 and doc["verdict"] == "thrash"
    host_ = doc["devices"][0]
    assert host_["must_fit_bytes"] < host_["room_bytes"] < host_["need_bytes"]
    text = vramscope("predict", *launch, "--cache-ram", "0").stdout
    assert "will not stay resident" in text and "re-reads them from disk" in text
    assert "give --bw disk=GB/s" in text
    # at 2 GB/s from disk, the ~1.2 GiB it re-reads per token bounds it to ~1.5 tokens/s
    code, doc = run_predict_json("--bw", "disk=2", *launch, "--cache-ram", "0")
    reread = doc["devices"][0]["not_resident_bytes"]
    note = next(n for n in doc["notes"] if "re-reads" in n)
    assert f"at most ~{2e9 / reread:.2f} tokens/s" in note, note
    assert not any("no such device" in n for n in doc["notes"])


def fit_box(tmp_path: Path, gpu_gib: int) -> tuple[str, str]:
    """A 36-layer Qwen3-8B shape at Q4_K (n_ctx_train 40960: 5.6 GiB of f16 KV at full
    context) and a box with one empty dedicated GPU of ``gpu_gib`` GiB."""
    model = qwen(tmp_path / "m.gguf", 36, 4096, 32, 8, 12288, g.Q4_K, ctx=40960)
    gpu = DeviceSample(
        "nvml:GPU-fit",
        "nvml",
        "nvidia",
        "RTX",
        "dedicated",
        gpu_gib * GIB,
        0,
        free_bytes=gpu_gib * GIB,
    )
    state = write_state(tmp_path / "state.json", [gpu, host(40 * GIB)], [])
    return model, str(state)


def test_no_c_is_judged_at_the_context_llama_cpp_fit_will_choose(tmp_path: Path) -> None:
    model, state = fit_box(tmp_path, 10)
    launch = ["--state", state, "--", "llama-server", "-m", model, "-np", "1", "-fa", "on"]
    code, doc = run_predict_json(*launch)
    fit = doc["llama_fit"]
    assert (code, doc["verdict"]) == (0, "fits"), doc
    assert fit["full_ctx"] == 40960 and fit["min_ctx"] == 4096
    assert fit["target_mib"] == [1024] and fit["devices"] == ["nvml:GPU-fit"]
    ctx = fit["ctx"]
    assert 4096 <= ctx < 40960 and ctx % 256 == 0
    gpu = next(d for d in doc["devices"] if d["device_id"] == "nvml:GPU-fit")
    assert gpu["room_bytes"] - gpu["need_bytes"] >= 1024 * MIB  # fit's target left free
    # one step more leaves less than the target free: the largest, as fit picks it
    _, more = run_predict_json(
        "--state",
        state,
        "--",
        "llama-server",
        "-m",
        model,
        "-np",
        "1",
        "-fa",
        "on",
        "-c",
        str(ctx + 256),
    )
    gpu_more = next(d for d in more["devices"] if d["device_id"] == "nvml:GPU-fit")
    assert gpu_more["room_bytes"] - gpu_more["need_bytes"] < 1024 * MIB
    assert any(f"-c {ctx}" in n and "fit" in n for n in doc["notes"])
    # -fitt 2048 leaves more free, so a smaller context
    _, wider = run_predict_json(*launch, "-fitt", "2048")
    assert wider["llama_fit"]["ctx"] < ctx
    # the full context, asked for with -c 0 (never reduced), does not fit
    code, full = run_predict_json(*launch, "-c", "0")
    assert code == 1 and full["llama_fit"] is None


def test_no_c_is_oom_only_when_even_the_minimum_context_does_not_fit(tmp_path: Path) -> None:
    model, state = fit_box(tmp_path, 4)  # 4.3 GiB of weights on a 4 GiB GPU
    code, doc = run_predict_json(
        "--state", state, "--", "llama-server", "-m", model, "-np", "1", "-fa", "on", "-ngl", "99"
    )
    assert code == 1 and doc["verdict"] == "oom"
    assert doc["llama_fit"]["ctx"] == 4096  # it ran out of room at -fitc
    assert any("even at -fitc 4096" in n for n in doc["notes"])


def test_context_checkpoints_that_outgrow_the_room_are_bounded_with_ctxcp(tmp_path: Path) -> None:
    """A sliding-window model: each of the 32 default checkpoints per slot copies one
    sequence's SWA cache (4096-token window) into host RAM. Exit 3 and -ctxcp N that fits."""
    import tiny_models

    model = tiny_models.write_gemma3(
        tmp_path / "swa.gguf", n_head_kv=8, head_dim=256, sliding_window=4096, n_ctx_train=32768
    ).path
    state = write_state(tmp_path / "state.json", [host(4 * GIB, total=16 * GIB)], [])
    launch = [
        "--state",
        str(state),
        "--",
        "llama-server",
        "-m",
        str(model),
        "-c",
        "16384",
        "-np",
        "1",
        "--cache-ram",
        "0",
    ]
    code, doc = run_predict_json(*launch)
    grown = doc["grown"]
    assert (code, doc["verdict"], grown["verdict"]) == (3, "fits", "oom"), doc
    assert [c["name"] for c in grown["grows"]] == ["checkpoints"]
    (bound,) = grown["bounds"]
    n = int(bound["change"].split()[1])
    assert bound["change"] == f"-ctxcp {n}" and 0 <= n < 32
    assert run_predict_json(*launch, "-ctxcp", str(n))[0] == 0
    assert run_predict_json(*launch, "-ctxcp", str(n + 4))[0] in (0, 3)  # margin, then room
    code, more = run_predict_json(*launch, "-ctxcp", "32")
    assert code == 3 and more["grown"]["bounds"] == grown["bounds"]


# -- issue 15: one typed result, two renderings ---------------------------------------------


def test_text_and_json_render_the_typed_result_and_text_does_not_parse_json(
    laptop: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text is written from the PredictResult itself (it used to parse the JSON
    document back); both renderings carry the same figures."""
    from monitor.analysis.picture import load_state
    from monitor.analysis.predict import answer
    from monitor.analysis.predict_request import PredictRequest
    from monitor.device_names import short_device_name
    from monitor.estimate.model import devices_from_samples
    from monitor.report.predict import render_text
    from monitor.report.predict import to_json as predict_json_doc

    snap = load_state(Path(laptop["state"]))
    req = PredictRequest(
        ["llama-server", "-m", laptop["27b"], "-c", "131072", "-np", "1", "-ngl", "12"],
        bandwidth_gbs={"gpu": 272.0, "host": 76.8},
        want_fit_ctx=True,
    )
    result = answer(req, snap, devices_from_samples(snap.devices, 300 * MIB))
    doc = json.loads(predict_json_doc(result))

    def no_json(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the text renderer went through JSON")

    monkeypatch.setattr(json, "loads", no_json)
    monkeypatch.setattr(json, "dumps", no_json)
    text = render_text(result)
    monkeypatch.undo()
    assert doc["verdict"] == "oom" and result.exit_code == 1
    assert doc["fixes"] and doc["fit_ctx"] is not None and doc["throughput"]["tokens_per_s"]
    assert text.splitlines()[-1] == "verdict: OOM"
    gpu = next(d for d in doc["devices"] if d["device_id"] == "nvml:GPU-laptop")
    name = result.picture.devices["nvml:GPU-laptop"].name
    label = short_device_name("nvml:GPU-laptop", name, 0)  # the one name status prints
    assert "nvml:GPU-laptop" not in text
    assert (
        f"{label}: needs {round(gpu['need_bytes'] / GIB, 2)} GiB, can get "
        f"{round(gpu['room_bytes'] / GIB, 2)} GiB"
    ) in text
    assert [f["change"] for f in doc["fixes"]] == [
        line.split(": frees")[0].strip() for line in text.splitlines() if ": frees " in line
    ]
    assert f"largest context that fits: -c {doc['fit_ctx']}" in text
    assert f"throughput (roofline): {doc['throughput']['tokens_per_s']} tokens/s" in text


def test_a_fix_that_frees_nothing_where_it_is_short_is_not_offered(
    strix: dict[str, str], tmp_path: Path
) -> None:
    """Issue 18.7: "stop boom: frees 0.0 GiB on host -> oom" helped nobody. A stop (or a
    change) is offered only when it gives a device that does not fit relevant room."""
    embed = ProcessInfo(
        4242,
        1000,
        None,
        1,
        1000,
        "llama-server",
        ("llama-server", "-m", "/models/qwen3-embedding-8b.gguf", "-c", "8192"),
        "llama.cpp",
        ("inference", "gpu"),
    )
    tiny = ProcessInfo(
        77,
        1000,
        None,
        1,
        1000,
        "llama-server",
        ("llama-server", "-m", "/models/boom.gguf", "-c", "512"),
        "llama.cpp",
        ("inference", "gpu"),
    )
    big, small = int(23.8 * GIB), 20 * MIB
    apu = DeviceSample(
        "drm:0000:c5:00.0",
        "drm",
        "amd",
        "Strix Halo",
        "unified",
        total_bytes=int(120.5 * GIB),
        used_bytes=big + small + 300 * MIB,
        vram_total_bytes=512 * MIB,
        vram_used_bytes=300 * MIB,
        gtt_total_bytes=120 * GIB,
        gtt_used_bytes=big + small,
        gtt_ceiling_bytes=120 * GIB,
    )
    state = write_state(
        tmp_path / "state.json",
        [apu, host(int(72.2 * GIB))],
        [
            (embed, [ProcessMemory(4242, "drm:0000:c5:00.0", gtt_bytes=big)]),
            (tiny, [ProcessMemory(77, "drm:0000:c5:00.0", gtt_bytes=small)]),
        ],
    )
    code, doc = predict_json(
        "--state",
        str(state),
        "--",
        "llama-server",
        "-m",
        strix["moe"],
        "-c",
        "32768",
        "-np",
        "1",
        "-fa",
        "on",
        "-md",
        strix["4b"],
        "-lm",
        "none",  # the CPU-side weights read into memory: all of it must fit, OOM
    )
    assert (code, doc["verdict"]) == (1, "oom")
    changes = [f["change"] for f in doc["fixes"]]
    assert "stop llama-server (qwen3-embedding-8b.gguf) (pid 4242)" in changes
    assert not any("pid 77" in c for c in changes), changes  # 20 MiB of a GiBs shortfall
    assert all(sum(f["frees"].values()) >= 64 * MIB for f in doc["fixes"]), doc["fixes"]


def test_a_prompt_cache_that_overflows_only_past_the_horizon_is_a_note(tmp_path: Path) -> None:
    """llama-server's prompt cache fills to --cache-ram at the KV state of each cached
    token (server_prompt_cache::update): 4 layers x 8 KV heads x 128 x (K + V) x 2 B = 16
    KiB per token, so the default 8 GiB takes ~524,000 distinct prompt tokens, and on this
    6 GiB box it passes the room after ~230,000. Within the horizon (default 1,000,000)
    that is exit 3; with --growth-horizon 100000 it is a note and exit 0; the tokens are
    said either way."""
    model = qwen(tmp_path / "m.gguf", 4, 4096, 32, 8, 12288, g.Q8_0)
    state = write_state(tmp_path / "state.json", [host(6 * GIB, total=16 * GIB)], [])
    launch = ["--state", str(state), "--", "llama-server", "-m", model, "-c", "4096", "-np", "1"]
    code, doc = run_predict_json(*launch)
    assert code == 3 and doc["grown"]["verdict"] == "oom"
    fills = next(n for n in doc["notes"] if "prompt cache (--cache-ram) fills after" in n)
    assert "~524,288 distinct prompt tokens (16 KiB of KV state each)" in fills, fills
    passes = next(n for n in doc["notes"] if n.startswith("it passes the room after"))
    tokens = int(passes.split("~")[1].split()[0].replace(",", ""))
    assert 150_000 < tokens < 300_000
    code, doc = run_predict_json("--growth-horizon", str(tokens - 1), *launch)
    assert code == 0 and doc["grown"]["verdict"] == "oom"  # the verdict stays, said
    assert any("beyond the growth horizon of" in n for n in doc["notes"])
    code, _ = run_predict_json("--growth-horizon", str(tokens), *launch)
    assert code == 3
    config = tmp_path / "c.toml"
    config.write_text(f"[predict]\ngrowth_horizon_tokens = {tokens - 1}\n")
    code, _ = run_predict_json("--config", str(config), *launch)
    assert code == 0
    config.write_text("[predict]\ngrowth_horizon_tokens = -5\n")
    bad = vramscope("predict", "--config", str(config), *launch)
    assert bad.returncode == 2 and "growth_horizon_tokens" in bad.stderr


def test_a_host_that_is_short_gets_more_layers_on_the_gpu_as_a_fix(tmp_path: Path) -> None:
    """-ngl 0 with the weights read into host memory (-lm none) on a box with 3 GiB of host
    RAM available and an empty 16 GiB GPU: OOM on the host; the fix is the fewest GPU
    layers that make it fit, priced in what the host gets back."""
    model = qwen(tmp_path / "m.gguf", 36, 4096, 32, 8, 12288, g.Q4_K)
    gpu = DeviceSample(
        "nvml:GPU-big", "nvml", "nvidia", "RTX", "dedicated", 16 * GIB, 0, free_bytes=16 * GIB
    )
    state = write_state(tmp_path / "state.json", [gpu, host(3 * GIB)], [])
    launch = ["--state", str(state), "--", "llama-server", "-m", model, "-c", "4096", "-np", "1"]
    code, doc = run_predict_json(*launch, "-ngl", "0", "-lm", "none", "--cache-ram", "0")
    assert code == 1 and doc["verdict"] == "oom"
    fix = next(f for f in doc["fixes"] if "more layers on the GPU" in f["change"])
    n = int(fix["change"].split()[1])
    assert 0 < n <= 37 and fix["verdict"] == "fits" and fix["frees"]["host"] > GIB
    code, doc = run_predict_json(*launch, "-ngl", str(n), "-lm", "none", "--cache-ram", "0")
    assert code == 0 and doc["verdict"] in ("fits", "tight")
    # all layers already on the GPU (the default): nothing to add
    code, doc = run_predict_json(*launch, "-lm", "none", "--cache-ram", "0")
    assert not any("more layers" in f["change"] for f in doc["fixes"])
