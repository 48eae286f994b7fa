"""Issue 18's seed stories, end to end through `vramscope predict`, on GGUF headers of the
real Qwen3.5 architecture (tests/fakes/arch_models.py: the estimator's KV, recurrent and
MTP figures for it were checked against the real llama-server's log, issue 17) and
recorded box states (``status --json`` files built from the collector types).

- A 16 GB card running Qwen3.5-27B (the published 27B shapes at Q3_K, 10.8 GiB of
  weights): the largest context with and without MTP (``--spec-type draft-mtp``), with
  f16 and q8_0 KV.
- A 128 GB unified box (Strix Halo: GTT, MemAvailable binds) already running an
  embedding server with 16 slots that holds 23.8 GiB, asked to load a Qwen3.5 122B-A10B
  MoE (Q4_K) with a 0.8B draft: it fits at load, not once the prompt cache and the
  context checkpoints fill (exit 3), and each fix says the GiB it frees.

The 122B-A10B and 0.8B shapes are the Qwen3.5 family's layout (hybrid, every 4th layer
full attention, 256-wide heads) at those sizes; their exact published configs were not
at hand here, so they stand for "a 122B MoE" and "a 0.8B draft", not for byte-exact files.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import arch_models as am
import cli_runner
import gguf_models as g
import pytest
from box_states import APU, EMBED_PID, embedding_server, host, strix_halo, write_state
from gguf import GGMLQuantizationType

from collectors.base import DeviceSample, ProcessMemory

ROOT = Path(__file__).resolve().parents[3]
GIB, MIB = 1024**3, 1024**2
Q3_K, Q4_K = int(GGMLQuantizationType.Q3_K), int(GGMLQuantizationType.Q4_K)
CTX_STEP = 256  # --fit-ctx answers in steps of 256 cells


def requant(model: am.ArchModel, qtype: int, suffix: str) -> am.ArchModel:
    """The same file at another quant: every Q8_0 tensor whose rows fit the type's blocks."""
    tensors = [(n, s, qtype if t == g.Q8_0 and s[0] % 256 == 0 else t) for n, s, t in model.tensors]
    return dataclasses.replace(model, key=model.key + suffix, tensors=tensors)


run_predict = functools.partial(cli_runner.vramscope, "predict")


def predict(*args: str) -> tuple[int, dict, str]:
    run = run_predict("--json", *args)
    assert run.returncode in (0, 1, 3, 4), run.stderr
    return run.returncode, json.loads(run.stdout), run.stderr


def predict_text(*args: str) -> str:
    return run_predict(*args).stdout


def device(result: dict, device_id: str, moment: str = "load") -> dict:
    rows = result["devices"] if moment == "load" else result["grown"]["devices"]
    return next(d for d in rows if d["device_id"] == device_id)


# -- a 16 GB card, Qwen3.5-27B with and without MTP, f16 and q8_0 KV -----------------------

CARD = "nvml:GPU-16g"


@pytest.fixture(scope="module")
def card(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("card16")
    gpu = DeviceSample(
        CARD,
        "nvml",
        "nvidia",
        "RTX 4060 Ti 16GB",
        "dedicated",
        16 * GIB,
        300 * MIB,
        free_bytes=16 * GIB - 300 * MIB,
    )
    return {
        "model": str(requant(am.qwen35_27b(mtp=True), Q3_K, "-q3k").write(d)),
        "state": str(write_state(d / "state.json", [gpu, host(44 * GIB, 64 * GIB)], [])),
    }


def launch(card: dict[str, str], kv: str, mtp: bool, *extra: str) -> list[str]:
    return [
        "--state",
        card["state"],
        "--",
        "llama-server",
        "-m",
        card["model"],
        "-np",
        "1",
        "-fa",
        "on",
        "-ctk",
        kv,
        "-ctv",
        kv,
        *(["--spec-type", "draft-mtp"] if mtp else []),
        *extra,
    ]


@pytest.mark.slow  # a real daemon for many seconds: the default suite stays under 5 min
def test_16_gb_card_largest_context_with_and_without_mtp_at_f16_and_q8_0(
    card: dict[str, str],
) -> None:
    fit: dict[tuple[str, bool], int] = {}
    for kv in ("f16", "q8_0"):
        for mtp in (False, True):
            code, doc, _ = predict("--fit-ctx", *launch(card, kv, mtp))
            assert code == 0, doc
            assert doc["fit_ctx"] is not None and doc["fit_ctx"] % CTX_STEP == 0
            fit[kv, mtp] = doc["fit_ctx"]
    # MTP costs context (its layer's weights, KV, compute and output buffers, and the
    # recurrent state kept for rollback); q8_0 KV buys context (8.5 bits, not 16)
    for kv in ("f16", "q8_0"):
        assert fit[kv, True] < fit[kv, False]
    for mtp in (False, True):
        assert fit["q8_0", mtp] > 1.5 * fit["f16", mtp]
    # the room left for context is the same whatever the KV type: 16 full-attention
    # layers x 4 KV heads x 256 x (K + V) per cell, at 16 or 8.5 bits
    per_cell = {"f16": 16 * 4 * 256 * 2 * 2, "q8_0": 16 * 4 * 256 * 2 * 17 / 16}
    room_f16 = fit["f16", False] * per_cell["f16"]
    room_q8 = fit["q8_0", False] * per_cell["q8_0"]
    assert abs(room_q8 - room_f16) / room_f16 < 0.02
    # each answer is the largest: that context fits the card, one step more does not
    for (kv, mtp), ctx in fit.items():
        _, at, _ = predict(*launch(card, kv, mtp, "-c", str(ctx)))
        _, past, _ = predict(*launch(card, kv, mtp, "-c", str(ctx + CTX_STEP)))
        assert device(at, CARD)["verdict"] == "fits", (kv, mtp, at)
        assert device(past, CARD)["verdict"] != "fits", (kv, mtp, past)
        # the MTP launch carries its own context: weights, KV, compute and output
        assert (at["estimate_by_device"][CARD] > 14 * GIB) and (
            at["estimate_by_device"][CARD] <= 16 * GIB
        )
    # without --spec-type draft-mtp llama.cpp skips the MTP layer: the note says so
    _, plain, _ = predict(*launch(card, "f16", False, "-c", "4096"))
    assert any("MTP layer" in n and "not loaded" in n for n in plain["notes"])


# -- a 128 GB unified box: 122B MoE + draft beside a 16-slot embedding server --------------


@pytest.fixture(scope="module")
def unified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("unified128")
    moe = am._qwen35(
        "qwen35moe-122b-a10b",
        "qwen35moe",
        "Qwen3.5 122B A10B",
        "Qwen3.5 layout at 122B-A10B: 48 layers, hidden 3072, 32/2 heads of 256, 256 "
        "experts (8 used) of 1024 + shared 1024, gated delta net 16 key / 64 value heads",
        n_layer=48,
        n_embd=3072,
        n_head=32,
        n_head_kv=2,
        n_ff=1024,
        k_heads=16,
        v_heads=64,
        mtp=True,
        moe=(256, 8, 1024, 1024),
    )
    draft = am._qwen35(
        "qwen35-0.8b",
        "qwen35",
        "Qwen3.5 0.8B",
        "Qwen3.5 layout at 0.8B: 24 layers, hidden 1024, 8/2 heads of 256, 3584",
        n_layer=24,
        n_embd=1024,
        n_head=8,
        n_head_kv=2,
        n_ff=3584,
        k_heads=16,
        v_heads=16,
        mtp=False,
    )
    held = int(23.8 * GIB)  # the "16 GiB" embedding server, as measured (GTT)
    apu_mem = [ProcessMemory(EMBED_PID, APU, gtt_bytes=held)]
    return {
        "moe": str(requant(moe, Q4_K, "-q4k").write(d)),
        "draft": str(draft.write(d)),
        "state": str(
            write_state(
                d / "state.json",
                [strix_halo(held), host(int(72.2 * GIB))],
                [(embedding_server(), apu_mem)],
            )
        ),
    }


def test_128_gb_unified_box_fits_at_load_not_once_caches_fill_and_prices_each_fix(
    unified: dict[str, str],
) -> None:
    run = [
        "--state",
        unified["state"],
        "--",
        "llama-server",
        "-m",
        unified["moe"],
        "-md",
        unified["draft"],
        "-c",
        "65536",
        "-np",
        "2",
        "-fa",
        "on",
    ]
    code, doc, _ = predict(*run)
    # at load: weights + KV + recurrent state + compute, target and draft, in MemAvailable
    load = device(doc, APU)
    assert (code, doc["verdict"], load["verdict"]) == (3, "fits", "fits"), doc
    assert load["binding"] == "MemAvailable" and load["room_bytes"] == int(72.2 * GIB)
    # once the caches fill: llama.cpp's default 8 GiB prompt cache and 32 checkpoints per
    # slot of the recurrent state grow in the same pool
    grown = doc["grown"]
    assert grown["verdict"] == "oom"
    grows = {c["name"]: c["bytes"] for c in grown["grows"]}
    assert grows["cache_ram"] == 8192 * MIB
    assert grows["checkpoints"] > 4 * GIB
    full = device(doc, APU, "grown")
    assert full["need_bytes"] == load["need_bytes"] + sum(grows.values())
    # short by what must stay resident (the mmap'd token_embd, read a row at a time, is
    # page cache the kernel may evict)
    resident = full["must_fit_bytes"] + full["hot_evictable_bytes"]
    short = resident - (full["room_bytes"] - full["margin_bytes"])
    assert short > 0 and full["need_bytes"] > resident
    fixes = {f["change"]: f for f in grown["bounds"]}
    # stopping the embedding server gives back what it holds, and the full caches fit
    stop = fixes["stop llama-server (qwen3-embedding-8b.gguf) (pid 4242)"]
    assert stop["frees"][APU] == int(23.8 * GIB) and stop["verdict"] == "fits"
    # or the bounds on what grows, each freeing at least the shortfall
    (bound,) = [f for f in grown["bounds"] if not f["change"].startswith("stop ")]
    assert bound["frees"][APU] >= short and bound["verdict"] == "fits"
    flags = bound["change"].split()
    assert "-ctxcp" in flags or "--cache-ram" in flags
    # the bound it names does fit, exit 0, once full too
    code, after, _ = predict(*run[:-4], *flags, *run[-4:])
    assert (code, after["grown"]["verdict"]) == (0, "fits"), after["grown"]
    # the text says the GiB each fix frees
    text = predict_text(*run)
    assert "verdict: FITS, OOM once the caches fill" in text
    assert f"{bound['change']}: frees " in text and "stop llama-server" in text
