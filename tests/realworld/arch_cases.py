"""The real-architecture tier: which model runs with which llama-server arguments.

Each case is one llama-server start (CPU build of scripts/build-llama-server, 127.0.0.1
only, ``--no-warmup -nr``: no token computed, no weight repacked, the sparse file mmapped)
on a header from tests/fakes/arch_models.py. ``arch_capture.py`` runs them and keeps the
memory lines of each log as tests/fixtures/llamalog/arch/<id>.json; the default suite
(tests/monitor/estimate/test_architectures.py) checks ``estimate`` against those fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass

# --numa distribute: llama.cpp then maps the file without MAP_POPULATE (llama-mmap.cpp), so a
# sparse 30 GB file is not faulted in page by page at load (26 s -> 0.3 s for 8 GB).
BASE_ARGS = ("--no-warmup", "-nr", "--numa", "distribute")  # conftest adds -lv 4


@dataclass(frozen=True)
class ArchCase:
    id: str
    model: str  # key of arch_models.ARCH_MODELS, or "<key>-nomtp"
    args: tuple[str, ...]  # "{draft}" stands for the -md model's path
    draft: str | None = None  # model key of the -md draft


def _c(id: str, model: str, *args: str, draft: str | None = None) -> ArchCase:
    return ArchCase(id, model, tuple(args), draft)


Q8KV = ("-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on")


def _family_variants(swa: bool) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The launches every family of issue 33 is captured at."""
    out = (
        ("c4096-np1", ("-c", "4096", "-np", "1")),
        ("c8192-np4", ("-c", "8192", "-np", "4")),
        ("q8kv", (*Q8KV, "-c", "4096", "-np", "1")),
        ("fa-off", ("-c", "4096", "-np", "1", "-fa", "off")),
        ("ub2048", ("-c", "4096", "-np", "1", "-ub", "2048")),
    )
    if swa:
        out += (("swa-full", ("-c", "8192", "-np", "1", "--swa-full")),)
    return out


CASES: tuple[ArchCase, ...] = (
    # Qwen3-8B dense
    _c("qwen3-8b-c4096-np1", "qwen3-8b", "-c", "4096", "-np", "1"),
    _c("qwen3-8b-c8192-np4", "qwen3-8b", "-c", "8192", "-np", "4"),
    _c("qwen3-8b-c8192-np4-kvu", "qwen3-8b", "-c", "8192", "-np", "4", "-kvu"),
    _c(
        "qwen3-8b-q8kv",
        "qwen3-8b",
        "-c",
        "4096",
        "-np",
        "1",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-fa",
        "on",
    ),
    _c("qwen3-8b-fa-off", "qwen3-8b", "-c", "4096", "-np", "1", "-fa", "off"),
    _c("qwen3-8b-ub2048", "qwen3-8b", "-c", "4096", "-np", "1", "-ub", "2048"),
    _c("qwen3-8b-md", "qwen3-8b", "-c", "4096", "-np", "1", "-md", "{draft}", draft="qwen3-0.6b"),
    _c(
        "qwen3-8b-md-np4",
        "qwen3-8b",
        "-c",
        "8192",
        "-np",
        "4",
        "-md",
        "{draft}",
        draft="qwen3-0.6b",
    ),
    _c(
        "qwen3-8b-md-nmax16",
        "qwen3-8b",
        "-c",
        "4096",
        "-np",
        "1",
        "-md",
        "{draft}",
        "--spec-draft-n-max",
        "16",
        draft="qwen3-0.6b",
    ),
    _c(
        "qwen3-8b-md-nmax64-np4",
        "qwen3-8b",
        "-c",
        "8192",
        "-np",
        "4",
        "-md",
        "{draft}",
        "--spec-draft-n-max",
        "64",
        draft="qwen3-0.6b",
    ),
    # -md alone loads the draft but enables no speculative type (n_outputs_max = np);
    # --spec-type draft-simple drafts up to --spec-draft-n-max tokens (default 3)
    _c(
        "qwen3-8b-md-simple",
        "qwen3-8b",
        "-c",
        "4096",
        "-np",
        "1",
        "-md",
        "{draft}",
        "--spec-type",
        "draft-simple",
        draft="qwen3-0.6b",
    ),
    _c(
        "qwen3-8b-md-simple-nmax16",
        "qwen3-8b",
        "-c",
        "4096",
        "-np",
        "1",
        "-md",
        "{draft}",
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        "16",
        draft="qwen3-0.6b",
    ),
    _c(
        "qwen3-8b-md-simple-nmax64-np4",
        "qwen3-8b",
        "-c",
        "8192",
        "-np",
        "4",
        "-md",
        "{draft}",
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        "64",
        draft="qwen3-0.6b",
    ),
    # Qwen3-Embedding (decoder embedder, last-token pooling)
    _c(
        "qwen3-emb-last",
        "qwen3-embedding-0.6b",
        "-c",
        "4096",
        "-np",
        "1",
        "--embedding",
        "--pooling",
        "last",
    ),
    _c(
        "qwen3-emb-last-ub2048",
        "qwen3-embedding-0.6b",
        "-c",
        "8192",
        "-np",
        "4",
        "--embedding",
        "--pooling",
        "last",
        "-ub",
        "2048",
        "-b",
        "2048",
    ),
    # Qwen3-30B-A3B MoE
    _c("qwen3moe-c4096-np1", "qwen3moe-30b-a3b", "-c", "4096", "-np", "1"),
    _c("qwen3moe-c8192-np4", "qwen3moe-30b-a3b", "-c", "8192", "-np", "4"),
    _c("qwen3moe-fa-off", "qwen3moe-30b-a3b", "-c", "4096", "-np", "1", "-fa", "off"),
    _c("qwen3moe-ub2048", "qwen3moe-30b-a3b", "-c", "4096", "-np", "1", "-ub", "2048"),
    _c(
        "qwen3moe-q8kv",
        "qwen3moe-30b-a3b",
        "-c",
        "4096",
        "-np",
        "1",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-fa",
        "on",
    ),
    # Gemma-3 (iSWA)
    _c("gemma3-c8192-np2", "gemma3-4b", "-c", "8192", "-np", "2"),
    _c("gemma3-swa-full", "gemma3-4b", "-c", "8192", "-np", "2", "--swa-full"),
    _c("gemma3-fa-off", "gemma3-4b", "-c", "4096", "-np", "1", "-fa", "off"),
    _c("gemma3-kvu-np4", "gemma3-4b", "-c", "8192", "-np", "4", "-kvu"),
    # gpt-oss (SWA 128, sinks, MXFP4 experts with biases)
    _c("gpt-oss-c4096-np1", "gpt-oss-20b", "-c", "4096", "-np", "1"),
    _c("gpt-oss-c8192-np4", "gpt-oss-20b", "-c", "8192", "-np", "4"),
    _c("gpt-oss-swa-full", "gpt-oss-20b", "-c", "4096", "-np", "1", "--swa-full"),
    _c("gpt-oss-fa-off", "gpt-oss-20b", "-c", "4096", "-np", "1", "-fa", "off"),
    _c("gpt-oss-ub2048", "gpt-oss-20b", "-c", "4096", "-np", "1", "-ub", "2048"),
    # DeepSeek-V2-Lite (MLA, shared experts, a dense first layer)
    _c("deepseek2-c4096-np1", "deepseek-v2-lite", "-c", "4096", "-np", "1"),
    _c("deepseek2-fa-off", "deepseek-v2-lite", "-c", "4096", "-np", "1", "-fa", "off"),
    _c("deepseek2-ub2048", "deepseek-v2-lite", "-c", "4096", "-np", "1", "-ub", "2048"),
    _c("deepseek2-c8192-np4", "deepseek-v2-lite", "-c", "8192", "-np", "4"),
    # Qwen3.5-27B (hybrid gated delta net + attention), without and with MTP
    _c("qwen35-nomtp", "qwen35-27b-nomtp", "-c", "4096", "-np", "1"),
    _c("qwen35-mtp-file-off", "qwen35-27b", "-c", "4096", "-np", "1"),
    _c("qwen35-mtp", "qwen35-27b", "-c", "4096", "-np", "1", "--spec-type", "draft-mtp"),
    _c(
        "qwen35-mtp-nmax8-np2",
        "qwen35-27b",
        "-c",
        "8192",
        "-np",
        "2",
        "--spec-type",
        "draft-mtp",
        "--spec-draft-n-max",
        "8",
    ),
    _c(
        "qwen35-mtp-nmax8-np1",
        "qwen35-27b",
        "-c",
        "4096",
        "-np",
        "1",
        "--spec-type",
        "draft-mtp",
        "--spec-draft-n-max",
        "8",
    ),
    _c("qwen35-mtp-np2", "qwen35-27b", "-c", "8192", "-np", "2", "--spec-type", "draft-mtp"),
    _c(
        "qwen35-mtp-nmax17-np1",
        "qwen35-27b",
        "-c",
        "4096",
        "-np",
        "1",
        "--spec-type",
        "draft-mtp",
        "--spec-draft-n-max",
        "17",
    ),
    _c("qwen35-mtp-np4", "qwen35-27b", "-c", "8192", "-np", "4", "--spec-type", "draft-mtp"),
    _c("qwen35-fa-off", "qwen35-27b-nomtp", "-c", "4096", "-np", "1", "-fa", "off"),
    # the rollback snapshots of the first delta-net layer (compute.py delta_net_peak_bytes)
    _c(
        "qwen35-mtp-nmax5-np3",
        "qwen35-27b",
        *("-c", "6144", "-np", "3", "--spec-type", "draft-mtp", "--spec-draft-n-max", "5"),
    ),
    _c(
        "qwen35-mtp-nmax12-np1",
        "qwen35-27b",
        *("-c", "4096", "-np", "1", "--spec-type", "draft-mtp", "--spec-draft-n-max", "12"),
    ),
    # Qwen3.5-35B-A3B (hybrid MoE)
    _c("qwen35moe-c4096-np1", "qwen35moe-35b-a3b-nomtp", "-c", "4096", "-np", "1"),
    _c("qwen35moe-c8192-np4", "qwen35moe-35b-a3b-nomtp", "-c", "8192", "-np", "4"),
    _c("qwen35moe-mtp", "qwen35moe-35b-a3b", "-c", "4096", "-np", "1", "--spec-type", "draft-mtp"),
    _c("qwen35moe-ub2048", "qwen35moe-35b-a3b-nomtp", "-c", "4096", "-np", "1", "-ub", "2048"),
    # either side of the point where the delta net's output no longer fits the conv hole
    _c(
        "qwen35moe-mtp-nmax6",
        "qwen35moe-35b-a3b",
        *("-c", "4096", "-np", "1", "--spec-type", "draft-mtp", "--spec-draft-n-max", "6"),
    ),
    _c(
        "qwen35moe-mtp-nmax7",
        "qwen35moe-35b-a3b",
        *("-c", "4096", "-np", "1", "--spec-type", "draft-mtp", "--spec-draft-n-max", "7"),
    ),
    _c(
        "qwen35moe-mtp-nmax16-np2",
        "qwen35moe-35b-a3b",
        *("-c", "4096", "-np", "2", "--spec-type", "draft-mtp", "--spec-draft-n-max", "16"),
    ),
    # GLM-4.5-Air (a leading dense layer, MoE with a shared expert, Q/K/V bias, NextN)
    _c("glm4moe-c4096-np1", "glm4moe-air", "-c", "4096", "-np", "1"),
    _c("glm4moe-c8192-np4", "glm4moe-air", "-c", "8192", "-np", "4"),
    _c("glm4moe-fa-off", "glm4moe-air", "-c", "4096", "-np", "1", "-fa", "off"),
    _c("glm4moe-ub2048", "glm4moe-air", "-c", "4096", "-np", "1", "-ub", "2048"),
    _c(
        "glm4moe-q8kv",
        "glm4moe-air",
        "-c",
        "4096",
        "-np",
        "1",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-fa",
        "on",
    ),
    _c("glm4moe-mtp", "glm4moe-air", "-c", "4096", "-np", "1", "--spec-type", "draft-mtp"),
    # Llama 4 Scout (chunked attention on 3 of 4 layers, a shared expert, no SWA key)
    _c("llama4-c32768-np1", "llama4-scout", "-c", "32768", "-np", "1"),
    _c("llama4-c32768-np4", "llama4-scout", "-c", "32768", "-np", "4"),
    _c("llama4-q8kv", "llama4-scout", *Q8KV, "-c", "8192", "-np", "1"),
    _c("llama4-fa-off", "llama4-scout", "-c", "8192", "-np", "1", "-fa", "off"),
    _c("llama4-ub2048", "llama4-scout", "-c", "8192", "-np", "1", "-ub", "2048"),
    _c("llama4-swa-full", "llama4-scout", "-c", "16384", "-np", "1", "--swa-full"),
    # Nemotron Nano 9B v2 (Mamba2, attention and MLP layers)
    _c("nemotron-h-c4096-np1", "nemotron-nano-9b-v2", "-c", "4096", "-np", "1"),
    _c("nemotron-h-c32768-np4", "nemotron-nano-9b-v2", "-c", "32768", "-np", "4"),
    _c("nemotron-h-q8kv", "nemotron-nano-9b-v2", *Q8KV, "-c", "4096", "-np", "1"),
    _c("nemotron-h-fa-off", "nemotron-nano-9b-v2", "-c", "4096", "-np", "1", "-fa", "off"),
    _c("nemotron-h-ub2048", "nemotron-nano-9b-v2", "-c", "4096", "-np", "1", "-ub", "2048"),
    # DeepSeek-V3 (MLA at 128 heads, q_lora, 256 experts): the MLA peak with flash attention;
    # 5 of its 61 layers (3 dense, 2 MoE), every size per layer as published
    _c("deepseek-v3-c4096-np1", "deepseek-v3-5l", "-c", "4096", "-np", "1"),
    _c("deepseek-v3-c16384-np4", "deepseek-v3-5l", "-c", "16384", "-np", "4"),
    _c("deepseek-v3-fa-off", "deepseek-v3-5l", "-c", "4096", "-np", "1", "-fa", "off"),
    _c("deepseek-v3-ub2048", "deepseek-v3-5l", "-c", "4096", "-np", "1", "-ub", "2048"),
    _c("deepseek-v3-h64-c4096-np1", "deepseek-v3-5l-64h", "-c", "4096", "-np", "1"),
    _c("deepseek-v3-h32-ub2048", "deepseek-v3-5l-32h", "-c", "4096", "-np", "1", "-ub", "2048"),
    # Issue 33, more families: Mistral-Small-24B (llama), Gemma-2, OLMo-2, Command-R7B
    # (cohere2), Phi-3 and Granite-4.0-H
    *(
        _c(f"{prefix}-{name}", model, *args)
        for prefix, model, swa in (
            ("mistral-small", "mistral-small-24b", False),
            ("gemma2", "gemma2-9b", True),
            ("olmo2", "olmo2-7b", False),
            ("cohere2", "command-r7b", True),
            ("phi3", "phi3-mini", False),
            ("granitehybrid", "granite-4-h-tiny", False),
        )
        for name, args in _family_variants(swa)
    ),
    # Llama-3.1-8B: the llama rule where the query is as wide as the residual
    _c("llama31-c4096-np1", "llama31-8b", "-c", "4096", "-np", "1"),
    _c("llama31-q8kv", "llama31-8b", *Q8KV, "-c", "4096", "-np", "1"),
)
