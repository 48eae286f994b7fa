"""More architecture families of the real-architecture tier (issue 33): the ``llama`` arch
(Mistral-Small-24B), Gemma-2, OLMo-2, Command-R7B (cohere2), Phi-3 and Granite-4.0-H.
Built like tests/fakes/arch_models.py: tensor names, shapes and keys from
``src/models/<arch>.cpp`` of llama.cpp 0c1e57098 (every ``create_tensor`` that is not
``TENSOR_NOT_REQUIRED``), sizes from the published config.json.
"""

from __future__ import annotations

from collections.abc import Callable

from arch_parts import ArchModel, attn, bpe_vocab, common_meta, experts, ffn, head, spm_vocab
from gguf_models import F32, Q4_K, Q6_K, Q8_0, Tensor

__all__ = ["MORE_MODELS"]


def _norm(name: str, n: int) -> Tensor:
    return (name, (n,), F32)


def _llama_dense(
    key: str, name: str, source: str, shape: tuple[int, ...], n_ctx: int, rope: float, pre: str
) -> ArchModel:
    """A dense model of the ``llama`` arch (src/models/llama.cpp), Q4_K_M-like weights."""
    arch = "llama"
    n_layer, n_embd, n_head, n_head_kv, hd, n_ff, n_vocab = shape
    meta = common_meta(arch, name, n_layer, n_ctx, n_embd, n_head, n_head_kv, hd, n_ff, 1e-5, rope)
    meta.update({f"{arch}.rope.dimension_count": hd, f"{arch}.vocab_size": n_vocab})
    meta.update(bpe_vocab(n_vocab, pre, eos=2, bos=1))
    first, last = head(n_embd, n_vocab, Q4_K, False, Q6_K)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [_norm(b + "attn_norm.weight", n_embd)]
        tensors += attn(b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q8_0)
        tensors += [_norm(b + "ffn_norm.weight", n_embd)]
        tensors += ffn(b, n_embd, n_ff, Q4_K, down_type=Q6_K)
    return ArchModel(key, arch, source, meta, tensors + last)


def mistral_small_24b() -> ArchModel:
    """Mistral-Small-24B-Instruct-2501: a head size of 128 below ``n_embd / n_head``
    (key_length), so the query (4096) is narrower than the residual (5120)."""
    return _llama_dense(
        "mistral-small-24b",
        "Mistral Small 24B",
        "mistralai/Mistral-Small-24B-Instruct-2501 config.json: 40 layers, hidden 5120, "
        "32/8 heads of 128 (head_dim), intermediate 32768, vocab 131072, rope_theta 1e8, "
        "rms eps 1e-5, max_position 32768, untied",
        (40, 5120, 32, 8, 128, 32768, 131072),
        32768,
        1e8,
        "tekken",
    )


def llama31_8b() -> ArchModel:
    """Llama-3.1-8B: the query as wide as the residual (no rope_freqs tensor: optional)."""
    return _llama_dense(
        "llama31-8b",
        "Llama 3.1 8B",
        "meta-llama/Llama-3.1-8B-Instruct config.json: 32 layers, hidden 4096, 32/8 heads "
        "of 128, intermediate 14336, vocab 128256, rope_theta 500000, rms eps 1e-5, "
        "max_position 131072, untied",
        (32, 4096, 32, 8, 128, 14336, 128256),
        131072,
        5e5,
        "llama-bpe",
    )


def gemma2_9b() -> ArchModel:
    """Gemma-2-9B (src/models/gemma2.cpp): iSWA (sliding window 4096 on every other layer,
    ``load_swa_pattern(ml, 2)``), post-attention and post-FFN norms, logit soft-capping,
    the output tied to the token embeddings."""
    arch = "gemma2"
    n_layer, n_embd, n_head, n_head_kv, hd, n_ff, n_vocab = 42, 3584, 16, 8, 256, 14336, 256000
    meta = common_meta(arch, "Gemma 2 9B", n_layer, 8192, n_embd, n_head, n_head_kv, hd, n_ff)
    meta.update(
        {
            f"{arch}.attention.sliding_window": 4096,
            f"{arch}.attn_logit_softcapping": 50.0,
            f"{arch}.final_logit_softcapping": 30.0,
            f"{arch}.rope.freq_base": 10000.0,
        }
    )
    meta.update(spm_vocab(n_vocab))
    first, last = head(n_embd, n_vocab, Q8_0, True)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [_norm(b + "attn_norm.weight", n_embd)]
        tensors += attn(b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q8_0)
        tensors += [
            _norm(b + "post_attention_norm.weight", n_embd),
            _norm(b + "ffn_norm.weight", n_embd),
            _norm(b + "post_ffw_norm.weight", n_embd),
        ]
        tensors += ffn(b, n_embd, n_ff, Q8_0)
    return ArchModel(
        "gemma2-9b",
        arch,
        "google/gemma-2-9b config.json: 42 layers, hidden 3584, 16/8 heads of 256, "
        "intermediate 14336, vocab 256000, sliding_window 4096 on alternating layers, "
        "attn_logit_softcapping 50, final_logit_softcapping 30, rope_theta 10000, "
        "max_position 8192, tied",
        meta,
        tensors + last,
    )


def olmo2_7b() -> ArchModel:
    """OLMo-2-7B (src/models/olmo2.cpp): no pre-norms, Q/K norms over the whole projection
    (``attn_q_norm`` {n_embd}, ``attn_k_norm`` {n_head_kv * head}), post-attention and
    post-FFN norms, full multi-head attention (32/32)."""
    arch = "olmo2"
    n_layer, n_embd, n_head, n_ff, n_vocab = 32, 4096, 32, 11008, 100352
    meta = common_meta(
        arch, "OLMo 2 7B", n_layer, 4096, n_embd, n_head, n_head, None, n_ff, 1e-6, 5e5
    )
    meta.update(bpe_vocab(n_vocab, "dbrx", eos=100257, bos=100257))
    first, last = head(n_embd, n_vocab, Q8_0, False)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += attn(b, n_embd, n_embd, n_embd, n_embd, n_embd, Q8_0)
        tensors += [
            _norm(b + "attn_q_norm.weight", n_embd),
            _norm(b + "attn_k_norm.weight", n_embd),
            _norm(b + "post_attention_norm.weight", n_embd),
        ]
        tensors += ffn(b, n_embd, n_ff, Q8_0)
        tensors += [_norm(b + "post_ffw_norm.weight", n_embd)]
    return ArchModel(
        "olmo2-7b",
        arch,
        "allenai/OLMo-2-1124-7B config.json: 32 layers, hidden 4096, 32/32 heads of 128, "
        "intermediate 11008, vocab 100352, rope_theta 500000, rms eps 1e-6, max_position "
        "4096, untied",
        meta,
        tensors + last,
    )


def command_r7b() -> ArchModel:
    """Command-R7B (src/models/cohere2.cpp): iSWA with pattern 4 (three sliding layers of
    4096, then a global one), attention and FFN in parallel on one layer norm, tied
    output scaled by ``logit_scale``."""
    arch = "cohere2"
    n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab = 32, 4096, 32, 8, 14336, 256000
    hd = n_embd // n_head
    meta = common_meta(
        arch, "Command R7B", n_layer, 8192, n_embd, n_head, n_head_kv, None, n_ff, 1e-5, 5e4
    )
    meta.update(
        {
            f"{arch}.attention.sliding_window": 4096,
            f"{arch}.logit_scale": 0.25,
            f"{arch}.attention.layer_norm_epsilon": 1e-5,
            f"{arch}.rope.dimension_count": hd,
        }
    )
    meta.update(bpe_vocab(n_vocab, "command-r", eos=255001, bos=5))
    first, last = head(n_embd, n_vocab, Q8_0, True)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [_norm(b + "attn_norm.weight", n_embd)]
        tensors += attn(b, n_embd, n_embd, n_head_kv * hd, n_head_kv * hd, n_embd, Q8_0)
        tensors += ffn(b, n_embd, n_ff, Q8_0)
    return ArchModel(
        "command-r7b",
        arch,
        "CohereForAI/c4ai-command-r7b-12-2024 config.json: 32 layers, hidden 4096, 32/8 "
        "heads of 128, intermediate 14336, vocab 256000, sliding_window 4096 with "
        "sliding_window_pattern 4, rope_theta 50000, logit_scale 0.25, layer_norm_eps 1e-5, "
        "tied",
        meta,
        tensors + last,
    )


def phi3_mini() -> ArchModel:
    """Phi-3-mini-4k (src/models/phi3.cpp): fused ``attn_qkv`` {n_embd, n_embd + 2
    n_embd_gqa} and fused ``ffn_up`` {n_embd, 2 n_ff} (gate and up, split in the graph),
    head size 96; its sliding_window key is read and SWA switched off."""
    arch = "phi3"
    n_layer, n_embd, n_head, n_ff, n_vocab = 32, 3072, 32, 8192, 32064
    meta = common_meta(
        arch, "Phi 3 mini 4k", n_layer, 4096, n_embd, n_head, n_head, None, n_ff, 1e-5, 1e4
    )
    meta.update(
        {
            f"{arch}.rope.dimension_count": n_embd // n_head,
            f"{arch}.attention.sliding_window": 2047,
        }
    )
    meta.update(spm_vocab(n_vocab))
    first, last = head(n_embd, n_vocab, Q8_0, False)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [
            _norm(b + "attn_norm.weight", n_embd),
            (b + "attn_qkv.weight", (n_embd, 3 * n_embd), Q8_0),
            (b + "attn_output.weight", (n_embd, n_embd), Q8_0),
            _norm(b + "ffn_norm.weight", n_embd),
            (b + "ffn_up.weight", (n_embd, 2 * n_ff), Q8_0),
            (b + "ffn_down.weight", (n_ff, n_embd), Q8_0),
        ]
    return ArchModel(
        "phi3-mini",
        arch,
        "microsoft/Phi-3-mini-4k-instruct config.json: 32 layers, hidden 3072, 32/32 heads "
        "of 96, intermediate 8192, vocab 32064, rope_theta 10000, sliding_window 2047, "
        "max_position 4096, untied",
        meta,
        tensors + last,
    )


# layer_types of granite-4.0-h-tiny: one attention layer in ten (M Mamba2, * attention)
GRANITE_H_TINY_PATTERN = ("MMMMM*MMMM" * 4)[:40]


def _granite_mamba2(b: str, n_embd: int, d_inner: int, d_state: int, heads: int) -> list[Tensor]:
    """The Mamba2 mixer of granite-hybrid.cpp, one group (``d_in_proj = 2 d_inner + 2
    d_state + n_ssm_head``)."""
    conv = d_inner + 2 * d_state
    return [
        (b + "ssm_in.weight", (n_embd, 2 * d_inner + 2 * d_state + heads), Q8_0),
        (b + "ssm_conv1d.weight", (4, conv), F32),
        (b + "ssm_conv1d.bias", (conv,), F32),
        (b + "ssm_dt.bias", (heads,), F32),
        (b + "ssm_a", (1, heads), F32),
        (b + "ssm_d", (1, heads), F32),
        (b + "ssm_norm.weight", (d_inner, 1), F32),
        (b + "ssm_out.weight", (d_inner, n_embd), Q8_0),
    ]


def granite_4_h_tiny() -> ArchModel:
    """Granite-4.0-H-Tiny (src/models/granite-hybrid.cpp): Mamba2 layers and a few
    attention layers (a layer is recurrent when its head_count_kv is 0), every layer a
    MoE FFN (64 experts of 512, 6 used) with a shared expert of 1024; no RoPE."""
    arch = "granitehybrid"
    n_embd, n_head, n_head_kv, hd, n_vocab = 1536, 12, 4, 128, 100352
    n_expert, n_ff_exp, n_ff_shexp = 64, 512, 1024
    d_inner, d_state, heads = 2 * n_embd, 128, 48
    pattern = GRANITE_H_TINY_PATTERN
    n_layer = len(pattern)
    meta = common_meta(
        arch, "Granite 4.0 H Tiny", n_layer, 131072, n_embd, n_head, 0, hd, n_ff_exp, 1e-5
    )
    meta.update(
        {
            f"{arch}.attention.head_count_kv": [n_head_kv if c == "*" else 0 for c in pattern],
            f"{arch}.expert_count": n_expert,
            f"{arch}.expert_used_count": 6,
            f"{arch}.expert_shared_feed_forward_length": n_ff_shexp,
            f"{arch}.rope.scaling.finetuned": False,
            f"{arch}.ssm.conv_kernel": 4,
            f"{arch}.ssm.inner_size": d_inner,
            f"{arch}.ssm.state_size": d_state,
            f"{arch}.ssm.time_step_rank": heads,
            f"{arch}.ssm.group_count": 1,
            f"{arch}.vocab_size": n_vocab,
        }
    )
    meta.update(bpe_vocab(n_vocab, "dbrx", eos=100257, bos=100257))
    first, last = head(n_embd, n_vocab, Q8_0, True)
    tensors = list(first)
    for il, kind in enumerate(pattern):
        b = f"blk.{il}."
        tensors += [_norm(b + "attn_norm.weight", n_embd)]
        if kind == "M":
            tensors += _granite_mamba2(b, n_embd, d_inner, d_state, heads)
        else:
            tensors += attn(
                b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q8_0
            )
        tensors += [_norm(b + "ffn_norm.weight", n_embd)]
        tensors += experts(b, n_embd, n_ff_exp, n_expert, Q8_0)
        tensors += ffn(b, n_embd, n_ff_shexp, Q8_0, suffix="_shexp")
    return ArchModel(
        "granite-4-h-tiny",
        arch,
        "ibm-granite/granite-4.0-h-tiny config.json: 40 layers (Mamba2 with one attention "
        "layer in ten), hidden 1536, 12/4 heads of 128, no position embedding, 64 experts "
        "(6 used) of 512 + shared 1024, mamba 48 heads of 64, state 128, 1 group, conv 4, "
        "vocab 100352, tied",
        meta,
        tensors + last,
    )


MORE_MODELS: dict[str, Callable[[], ArchModel]] = {
    "mistral-small-24b": mistral_small_24b,
    "llama31-8b": llama31_8b,
    "gemma2-9b": gemma2_9b,
    "olmo2-7b": olmo2_7b,
    "command-r7b": command_r7b,
    "phi3-mini": phi3_mini,
    "granite-4-h-tiny": granite_4_h_tiny,
}
