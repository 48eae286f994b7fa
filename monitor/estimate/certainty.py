"""What an estimate has not derived, or assumed: said beside the number, never hidden in it.

KV cache, recurrent state, weights and output buffers follow llama.cpp's own sizing rules
on every architecture. The compute buffer is the peak of ggml-alloc over the graph, which
each architecture builds its own way (``src/models/<arch>.cpp``); it is derived and checked
(within 5 % of the logged buffer, tests/monitor/estimate/test_architectures.py) only for the
architectures in :data:`COMPUTE_CHECKED`, on the CPU backend. Anywhere else the generic
dense/MoE body is a guess, seen 6-50 % off on architectures it was not derived for
(llama4 before its own rule -47 %; before theirs deepseek2 at 128 heads -22 %, nemotron_h
-21 to -28 %, granitehybrid -16 %, phi3 +9 %, cohere2 -6 %, and -7 to -12 % on gemma2,
olmo2, cohere2 and llama with a q8_0 K cache).
"""

from __future__ import annotations

from monitor.estimate.shape import CHUNKED_N_SWA, SHEXP_AS_WIDE_AS_EXPERT, ModelShape

# The architectures whose compute peak the real-architecture tier checks within 5 %
# (tests/fixtures/llamalog/arch: CPU llama-server 0c1e57098), each at the launch variants
# listed there (default, -np 4, -fa off, -ub 2048, q8_0 KV where recorded).
COMPUTE_CHECKED = frozenset(
    {
        "qwen3",
        "qwen3moe",
        "gemma3",
        "gpt-oss",
        "deepseek2",
        "qwen35",
        "qwen35moe",
        "glm4moe",
        "llama4",
        # issue 33: first layers read from ggml-alloc's trace (compute.traced_body_floats)
        "llama",
        "gemma2",
        "olmo2",
        "cohere2",
        "phi3",
        "granitehybrid",
        # the Mamba2 layers replayed through ggml-alloc's rule (monitor/estimate/replay.py)
        "nemotron_h",
    }
)
# ... of which these are checked on dense models only (Mistral-Small-24B for llama): a MoE
# model of the arch (Mixtral) takes the generic MoE peak.
DENSE_ONLY_CHECKED = frozenset({"llama"})
# ... and those of them checked with a quantized K cache (the rotated-K rule,
# the Hadamard rotation of attn_rot_k changes the first layer's holes: one query-wide
# tensor fewer on Qwen3-8B, one more on Mistral-Small-24B, none on Gemma-2 / OLMo-2 /
# Command-R7B / Granite-4.0-H; Phi-3's head of 96 is not rotated).
QUANTIZED_KV_CHECKED = frozenset(
    {
        "qwen3",
        "glm4moe",
        "llama4",
        "llama",
        "gemma2",
        "olmo2",
        "cohere2",
        "phi3",
        "granitehybrid",
        "nemotron_h",
    }
)
# deepseek2's MLA attention with flash attention is replayed through ggml-alloc's rule
# (monitor/estimate/replay.py mla_flash_peak_bytes) and checked at 16 heads (V2-Lite) and
# at 32, 64 and 128 (DeepSeek-V3 slices; at 128 the absorbed query is the peak: 412.01 MiB
# at -ub 512, where the generic MoE body said 320.01). Above that it is not checked.
MLA_FLASH_HEADS_CHECKED = 128
QUANTIZED = frozenset({"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"})
# Said of every launch with its compute on a GPU: not about the model, so a list of models
# does not flag each row with it (model_specific); the estimate's own text still says it.
GPU_BACKEND_LINE = (
    "compute buffer on a GPU: the CPU backend's graph peak is used; the GPU backends' "
    "own buffers (CUDA, ROCm, Vulkan) differ (tests/fixtures/llamalog/hardware)"
)


def model_specific(lines: tuple[str, ...]) -> tuple[str, ...]:
    """The approximations that are about this model or launch, not the backend's."""
    return tuple(line for line in lines if line != GPU_BACKEND_LINE)


def approximations(
    shape: ModelShape, flash: bool, cache_type_k: str, compute_on_gpu: bool
) -> tuple[str, ...]:
    """One line per part of the estimate that is not derived for this launch, or that rests
    on a default llama.cpp applies because the GGUF lacks a key."""
    out: list[str] = []
    arch = shape.arch
    if arch not in COMPUTE_CHECKED or (arch in DENSE_ONLY_CHECKED and shape.n_expert):
        out.append(
            f"compute buffer: {arch}'s graph is not derived here; the generic dense/MoE "
            "peak is used and may be 20-50 % off"
        )
    elif cache_type_k.lower() in QUANTIZED and arch not in QUANTIZED_KV_CHECKED:
        out.append(
            f"compute buffer with a {cache_type_k} K cache: checked on "
            f"{', '.join(sorted(QUANTIZED_KV_CHECKED))} only; may be 5-11 % low on {arch}"
        )
    n_head = max(shape.n_head, default=0)
    if shape.is_mla and flash and n_head > MLA_FLASH_HEADS_CHECKED:
        out.append(
            f"compute buffer: MLA attention with flash attention at {n_head} heads is not "
            f"checked (16 to {MLA_FLASH_HEADS_CHECKED}); may be ~20 % off"
        )
    if compute_on_gpu:
        out.append(GPU_BACKEND_LINE)
    out += _defaulted_keys(shape)
    return tuple(out)


def _defaulted_keys(shape: ModelShape) -> list[str]:
    """Sizes llama.cpp takes from its own defaults when the GGUF says nothing."""
    out = []
    arch = shape.arch
    if arch in CHUNKED_N_SWA and shape.swa and "attention.sliding_window" not in shape.arch_keys:
        out.append(
            f"{arch}: no sliding_window key; llama.cpp's chunked attention of "
            f"{CHUNKED_N_SWA[arch]} tokens on {sum(shape.swa)} of {shape.n_layer} layers assumed"
        )
    if (
        arch in SHEXP_AS_WIDE_AS_EXPERT
        and shape.n_ff_shexp
        and "expert_shared_feed_forward_length" not in shape.arch_keys
    ):
        out.append(
            f"{arch}: no shared-expert size key; llama.cpp's rule (as wide as a routed "
            f"expert, {shape.n_ff_shexp}) assumed"
        )
    return out
