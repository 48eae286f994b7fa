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


NEXT_MODELS: dict[str, Callable[[], ArchModel]] = {
    "llama4-scout": llama4_scout,
    "nemotron-nano-9b-v2": nemotron_nano_9b_v2,
}
