"""The next architectures of the real-architecture tier (issue 33): Llama 4 (chunked
attention, a shared expert with no size key) and Nemotron-H (Mamba2 / attention / MLP
layers). Built like tests/fakes/arch_models.py: tensor names, shapes and keys from
``src/models/<arch>.cpp`` of llama.cpp 0c1e57098, sizes from the published config.json.
"""

from __future__ import annotations

from collections.abc import Callable

from arch_parts import ArchModel, attn, bpe_vocab, common_meta, experts, ffn, head
from gguf_models import F32, Q4_K, Q6_K, Q8_0, Tensor

__all__ = ["NEXT_MODELS"]


def llama4_scout() -> ArchModel:
    """Llama-4-Scout-17B-16E: every layer MoE (interleave step 1) with a shared expert as
    wide as a routed one (llama4.cpp: ``n_ff_shexp = n_ff_exp``). Like the published GGUFs
    it has no ``sliding_window`` key, so llama.cpp uses chunked attention (8192 tokens) on
    3 of every 4 layers."""
    arch = "llama4"
    n_layer, n_embd, n_head, n_head_kv, hd = 48, 5120, 40, 8, 128
    n_expert, n_ff_exp, n_ff, n_vocab = 16, 8192, 16384, 202048
    meta = common_meta(
        arch, "Llama 4 Scout", n_layer, 10485760, n_embd, n_head, n_head_kv, hd, n_ff, 1e-5, 5e5
    )
    meta.update(
        {
            f"{arch}.rope.dimension_count": hd,
            f"{arch}.expert_count": n_expert,
            f"{arch}.expert_used_count": 1,
            f"{arch}.expert_feed_forward_length": n_ff_exp,
            f"{arch}.interleave_moe_layer_step": 1,
            f"{arch}.vocab_size": n_vocab,
        }
    )
    meta.update(bpe_vocab(n_vocab, "llama4", eos=200008, bos=200000))
    first, last = head(n_embd, n_vocab, Q8_0, False, Q6_K)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (n_embd,), F32)]
        tensors += attn(b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q8_0)
        tensors += [(b + "ffn_norm.weight", (n_embd,), F32)]
        tensors += experts(b, n_embd, n_ff_exp, n_expert, Q4_K, down_type=Q6_K)
        tensors += ffn(b, n_embd, n_ff_exp, Q8_0, suffix="_shexp")
    return ArchModel(
        "llama4-scout",
        arch,
        "meta-llama/Llama-4-Scout-17B-16E config.json (text_config): 48 layers, hidden "
        "5120, 40/8 heads of 128, 16 experts (1 used) of 8192 + 1 shared, "
        "intermediate_size_mlp 16384, interleave_moe_layer_step 1, attention_chunk_size "
        "8192, vocab 202048, max_position 10485760",
        meta,
        tensors + last,
    )


# hybrid_override_pattern of NVIDIA-Nemotron-Nano-9B-v2: M Mamba2, * attention, - MLP
NEMOTRON_NANO_9B_PATTERN = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"


def _mamba2(b: str, n_embd: int, d_inner: int, d_state: int, n_group: int, heads: int) -> list:
    """The Mamba2 mixer of nemotron-h.cpp (``d_in_proj = 2 d_inner + 2 n_group d_state +
    n_ssm_head``)."""
    conv = d_inner + 2 * n_group * d_state
    out: list[Tensor] = [
        (b + "ssm_in.weight", (n_embd, 2 * d_inner + 2 * n_group * d_state + heads), Q8_0),
        (b + "ssm_conv1d.weight", (4, conv), F32),
        (b + "ssm_conv1d.bias", (conv,), F32),
        (b + "ssm_dt.bias", (heads,), F32),
        (b + "ssm_a", (1, heads), F32),
        (b + "ssm_d", (1, heads), F32),
        (b + "ssm_norm.weight", (d_inner // n_group, n_group), F32),
        (b + "ssm_out.weight", (d_inner, n_embd), Q8_0),
    ]
    return out


def nemotron_nano_9b_v2() -> ArchModel:
    """NVIDIA-Nemotron-Nano-9B-v2: 27 Mamba2 layers, 4 attention layers and 25 MLP layers
    (squared-ReLU, ungated). A layer is recurrent when it has no KV heads and no FFN."""
    arch = "nemotron_h"
    n_embd, n_head, n_head_kv, hd, n_ff, n_vocab = 4480, 40, 8, 128, 15680, 131072
    d_inner, d_state, n_group, heads = 128 * 80, 128, 8, 128
    pattern = NEMOTRON_NANO_9B_PATTERN
    n_layer = len(pattern)
    meta = common_meta(arch, "Nemotron Nano 9B v2", n_layer, 131072, n_embd, n_head, 0, hd, 0)
    meta.update(
        {
            f"{arch}.attention.head_count_kv": [n_head_kv if c == "*" else 0 for c in pattern],
            f"{arch}.feed_forward_length": [n_ff if c == "-" else 0 for c in pattern],
            f"{arch}.attention.layer_norm_epsilon": 1e-5,
            f"{arch}.ssm.conv_kernel": 4,
            f"{arch}.ssm.inner_size": d_inner,
            f"{arch}.ssm.state_size": d_state,
            f"{arch}.ssm.time_step_rank": heads,
            f"{arch}.ssm.group_count": n_group,
            f"{arch}.vocab_size": n_vocab,
        }
    )
    meta.update(bpe_vocab(n_vocab, "llama-bpe", eos=12, bos=1))
    first, last = head(n_embd, n_vocab, Q8_0, False)
    tensors = list(first)
    for il, kind in enumerate(pattern):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (n_embd,), F32)]
        if kind == "M":
            tensors += _mamba2(b, n_embd, d_inner, d_state, n_group, heads)
        elif kind == "*":
            tensors += attn(
                b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q8_0
            )
        else:
            tensors += [
                (b + "ffn_up.weight", (n_embd, n_ff), Q8_0),
                (b + "ffn_down.weight", (n_ff, n_embd), Q8_0),
            ]
    return ArchModel(
        "nemotron-nano-9b-v2",
        arch,
        "nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json: 56 layers by hybrid_override_pattern "
        "(27 Mamba2, 4 attention, 25 MLP), hidden 4480, 40/8 heads of 128, intermediate "
        "15680, mamba 128 heads of 80, state 128, 8 groups, conv 4, vocab 131072",
        meta,
        tensors + last,
    )


def _mla_v3_block(b: str, n_embd: int, n_head: int) -> list[Tensor]:
    """DeepSeek-V3's attention (deepseek2.cpp, not lite): a low-rank query (q_lora 1536),
    the latent KV (kv_lora 512 + rope 64), per-head k_b / v_b for the absorbed path."""
    q_lora, kv_lora, nope, rope, v_head = 1536, 512, 128, 64, 128
    return [
        (b + "attn_norm.weight", (n_embd,), F32),
        (b + "attn_q_a_norm.weight", (q_lora,), F32),
        (b + "attn_kv_a_norm.weight", (kv_lora,), F32),
        (b + "attn_q_a.weight", (n_embd, q_lora), Q8_0),
        (b + "attn_q_b.weight", (q_lora, n_head * (nope + rope)), Q8_0),
        (b + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), Q8_0),
        (b + "attn_k_b.weight", (nope, kv_lora, n_head), Q8_0),
        (b + "attn_v_b.weight", (kv_lora, v_head, n_head), Q8_0),
        (b + "attn_output.weight", (n_head * v_head, n_embd), Q8_0),
        (b + "ffn_norm.weight", (n_embd,), F32),
    ]


def deepseek_v3(n_layer: int = 61, n_head: int = 128) -> ArchModel:
    """DeepSeek-V3 (arch deepseek2, MLA with 128 heads): 3 dense layers, then 58 MoE
    layers of 256 experts (8 used, sigmoid router with a correction bias) + 1 shared. The
    nextn (MTP) layer is left out: llama.cpp skips it unless asked. ``n_layer`` < 61 gives
    a slice with every per-layer size as published (the 380 GB sparse file takes over ten
    minutes to map on 2 cores; the compute, KV-per-layer and output buffers do not depend
    on the layer count)."""
    arch = "deepseek2"
    n_embd, n_vocab = 7168, 129280
    n_expert, n_ff_exp, n_ff, n_dense = 256, 2048, 18432, 3
    meta = common_meta(arch, "DeepSeek V3", n_layer, 163840, n_embd, n_head, 1, None, n_ff)
    meta.update(
        {
            f"{arch}.rope.freq_base": 10000.0,
            f"{arch}.attention.key_length": 512 + 64,
            f"{arch}.attention.value_length": 512,
            f"{arch}.attention.key_length_mla": 128 + 64,
            f"{arch}.attention.value_length_mla": 128,
            f"{arch}.attention.q_lora_rank": 1536,
            f"{arch}.attention.kv_lora_rank": 512,
            f"{arch}.rope.dimension_count": 64,
            f"{arch}.leading_dense_block_count": n_dense,
            f"{arch}.expert_count": n_expert,
            f"{arch}.expert_used_count": 8,
            f"{arch}.expert_shared_count": 1,
            f"{arch}.expert_feed_forward_length": n_ff_exp,
            f"{arch}.expert_weights_scale": 2.5,
            f"{arch}.expert_weights_norm": True,
            f"{arch}.expert_gating_func": 2,
            f"{arch}.expert_group_count": 8,
            f"{arch}.expert_group_used_count": 4,
            f"{arch}.vocab_size": n_vocab,
            f"{arch}.rope.scaling.type": "yarn",
            f"{arch}.rope.scaling.factor": 40.0,
            f"{arch}.rope.scaling.original_context_length": 4096,
            f"{arch}.rope.scaling.yarn_log_multiplier": 0.1,
        }
    )
    meta.update(bpe_vocab(n_vocab, "deepseek-v3", eos=1, bos=0))
    first, last = head(n_embd, n_vocab, Q8_0, False, Q6_K)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += _mla_v3_block(b, n_embd, n_head)
        if il < n_dense:
            tensors += ffn(b, n_embd, n_ff, Q8_0)
            continue
        tensors += experts(b, n_embd, n_ff_exp, n_expert, Q4_K, down_type=Q6_K)
        tensors += [(b + "exp_probs_b.bias", (n_expert,), F32)]
        tensors += ffn(b, n_embd, n_ff_exp, Q8_0, suffix="_shexp")
    return ArchModel(
        ("deepseek-v3" if n_layer == 61 else f"deepseek-v3-{n_layer}l")
        + ("" if n_head == 128 else f"-{n_head}h"),
        arch,
        f"deepseek-ai/DeepSeek-V3 config.json ({n_layer} of its 61 layers): first 3 dense "
        "(18432), hidden "
        "7168, 128 heads, MLA q_lora 1536, kv_lora 512, qk_nope 128 + rope 64, v_head 128, "
        "256 experts (8 used, 8 groups, top 4) of 2048 + 1 shared, vocab 129280, "
        "max_position 163840 (yarn x40 of 4096)",
        meta,
        tensors + last,
    )


NEXT_MODELS: dict[str, Callable[[], ArchModel]] = {
    "llama4-scout": llama4_scout,
    "nemotron-nano-9b-v2": nemotron_nano_9b_v2,
    "deepseek-v3": deepseek_v3,
    "deepseek-v3-5l": lambda: deepseek_v3(5),
    # the same slice at fewer heads: MLA with flash attention below 128 heads, where the
    # first MoE layer's FFN is the peak, not the absorbed query (replay.py)
    "deepseek-v3-5l-64h": lambda: deepseek_v3(5, 64),
    "deepseek-v3-5l-32h": lambda: deepseek_v3(5, 32),
}
