"""GGUF headers of real architectures, shaped like published models, with no data on disk.

Every tensor name, shape (ne0 first) and the metadata keys are the ones llama.cpp's loader
asks for (``src/models/<arch>.cpp`` ``load_arch_tensors`` / ``load_arch_hparams`` of the
llama.cpp vendored by llama-cpp-python 0.3.36, commit 0c1e57098). Shapes come from the
models' published HF ``config.json`` (values noted per model). The tokenizer metadata is a
real-sized vocabulary llama.cpp accepts (BPE ``gpt2`` with the model's pre-tokenizer name, or
SentencePiece ``llama`` for Gemma); the tokens are placeholders. The data region is a sparse
hole (``gguf_models.write_model``), so a 30B-shaped file takes a few MiB of disk and
llama-server mmaps it (``--no-warmup -nr``: no token is ever computed, no weight repacked).

    model = ARCH_MODELS["qwen3moe-30b-a3b"]()
    path = model.write(tmp_path)
"""

from __future__ import annotations

from collections.abc import Callable

from arch_models_more import MORE_MODELS
from arch_models_next import NEXT_MODELS
from arch_parts import MXFP4, ArchModel, bpe_vocab, spm_vocab
from arch_parts import attn as _attn
from arch_parts import common_meta as _common
from arch_parts import experts as _experts
from arch_parts import ffn as _ffn
from arch_parts import head as _head
from gguf_models import BF16, F16, F32, Q4_K, Q6_K, Q8_0, Tensor

__all__ = ["ARCH_MODELS", "ArchModel", "model_for"]


# ----------------------------------------------------------------------------- qwen3


def _qwen3_dense(
    key: str,
    name: str,
    source: str,
    *,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
    n_vocab: int,
    n_ctx: int,
    tied: bool,
    pooling: int | None = None,
) -> ArchModel:
    arch, hd = "qwen3", 128
    meta = _common(arch, name, n_layer, n_ctx, n_embd, n_head, n_head_kv, hd, n_ff)
    if pooling is not None:
        meta[f"{arch}.pooling_type"] = pooling
    meta.update(bpe_vocab(n_vocab, "qwen2", eos=151645 if n_vocab > 151645 else n_vocab - 1))
    first, last = _head(n_embd, n_vocab, Q8_0, tied)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (n_embd,), F32)]
        tensors += _attn(
            b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q8_0, qk_norm=hd
        )
        tensors += [(b + "ffn_norm.weight", (n_embd,), F32)]
        tensors += _ffn(b, n_embd, n_ff, Q8_0)
    return ArchModel(key, arch, source, meta, tensors + last)


def qwen3_8b() -> ArchModel:
    return _qwen3_dense(
        "qwen3-8b",
        "Qwen3 8B",
        "Qwen/Qwen3-8B config.json: 36 layers, hidden 4096, 32/8 "
        "heads of 128, intermediate 12288, vocab 151936, untied, max_position 40960",
        n_layer=36,
        n_embd=4096,
        n_head=32,
        n_head_kv=8,
        n_ff=12288,
        n_vocab=151936,
        n_ctx=40960,
        tied=False,
    )


def qwen3_06b() -> ArchModel:
    return _qwen3_dense(
        "qwen3-0.6b",
        "Qwen3 0.6B",
        "Qwen/Qwen3-0.6B config.json: 28 layers, hidden 1024, "
        "16/8 heads of 128, intermediate 3072, vocab 151936, tied, max_position 40960",
        n_layer=28,
        n_embd=1024,
        n_head=16,
        n_head_kv=8,
        n_ff=3072,
        n_vocab=151936,
        n_ctx=40960,
        tied=True,
    )


def qwen3_embedding_06b() -> ArchModel:
    return _qwen3_dense(
        "qwen3-embedding-0.6b",
        "Qwen3 Embedding 0.6B",
        "Qwen/Qwen3-Embedding-0.6B "
        "config.json: 28 layers, hidden 1024, 16/8 heads of 128, intermediate 3072, vocab "
        "151669, tied, max_position 32768; last-token pooling",
        n_layer=28,
        n_embd=1024,
        n_head=16,
        n_head_kv=8,
        n_ff=3072,
        n_vocab=151669,
        n_ctx=32768,
        tied=True,
        pooling=3,
    )


def qwen3moe_30b_a3b() -> ArchModel:
    arch, hd = "qwen3moe", 128
    n_layer, n_embd, n_head, n_head_kv, n_expert, n_ff_exp = 48, 2048, 32, 4, 128, 768
    meta = _common(arch, "Qwen3 30B A3B", n_layer, 40960, n_embd, n_head, n_head_kv, hd, 6144)
    meta.update(
        {
            f"{arch}.expert_count": n_expert,
            f"{arch}.expert_used_count": 8,
            f"{arch}.expert_feed_forward_length": n_ff_exp,
        }
    )
    meta.update(bpe_vocab(151936, "qwen2", eos=151645))
    first, last = _head(n_embd, 151936, Q4_K, False, Q6_K)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (n_embd,), F32)]
        tensors += _attn(
            b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q4_K, qk_norm=hd
        )
        tensors += [(b + "ffn_norm.weight", (n_embd,), F32)]
        tensors += _experts(b, n_embd, n_ff_exp, n_expert, Q4_K, Q6_K)
    return ArchModel(
        "qwen3moe-30b-a3b",
        arch,
        "Qwen/Qwen3-30B-A3B config.json: 48 layers, "
        "hidden 2048, 32/4 heads of 128, 128 experts (8 used) of 768, "
        "intermediate 6144, vocab 151936, max_position 40960",
        meta,
        tensors + last,
    )


# ----------------------------------------------------------------------------- gemma3


def gemma3_4b() -> ArchModel:
    arch, hd = "gemma3", 256
    n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab = 34, 2560, 8, 4, 10240, 262208
    meta = _common(arch, "Gemma 3 4B", n_layer, 131072, n_embd, n_head, n_head_kv, hd, n_ff)
    meta.update(
        {
            f"{arch}.attention.sliding_window": 1024,
            f"{arch}.rope.scaling.type": "linear",
            f"{arch}.rope.scaling.factor": 8.0,
        }
    )
    meta.update(spm_vocab(n_vocab))
    first, last = _head(n_embd, n_vocab, Q8_0, True)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (n_embd,), F32)]
        tensors += _attn(
            b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q8_0, qk_norm=hd
        )
        tensors += [
            (b + "post_attention_norm.weight", (n_embd,), F32),
            (b + "ffn_norm.weight", (n_embd,), F32),
            (b + "post_ffw_norm.weight", (n_embd,), F32),
        ]
        tensors += _ffn(b, n_embd, n_ff, Q8_0)
    return ArchModel(
        "gemma3-4b",
        arch,
        "google/gemma-3-4b-it text_config: 34 layers, hidden "
        "2560, 8/4 heads of 256, intermediate 10240, vocab 262208, sliding window "
        "1024 every 6th layer global, max_position 131072, tied",
        meta,
        tensors + last,
    )


# ----------------------------------------------------------------------------- gpt-oss


def gpt_oss_20b() -> ArchModel:
    arch, hd = "gpt-oss", 64
    n_layer, n_embd, n_head, n_head_kv, n_expert, n_ff_exp = 24, 2880, 64, 8, 32, 2880
    n_vocab = 201088
    meta = _common(
        arch,
        "gpt-oss 20b",
        n_layer,
        131072,
        n_embd,
        n_head,
        n_head_kv,
        hd,
        n_ff_exp,
        eps=1e-5,
        rope_base=150000.0,
    )
    meta.update(
        {
            f"{arch}.expert_count": n_expert,
            f"{arch}.expert_used_count": 4,
            f"{arch}.expert_feed_forward_length": n_ff_exp,
            f"{arch}.attention.sliding_window": 128,
            f"{arch}.rope.dimension_count": hd,
            f"{arch}.rope.scaling.type": "yarn",
            f"{arch}.rope.scaling.factor": 32.0,
            f"{arch}.rope.scaling.original_context_length": 4096,
        }
    )
    meta.update(bpe_vocab(n_vocab, "gpt-4o", eos=200002, bos=199998))
    first, last = _head(n_embd, n_vocab, Q8_0, False)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [
            (b + "attn_norm.weight", (n_embd,), F32),
            (b + "post_attention_norm.weight", (n_embd,), F32),
        ]
        tensors += _attn(
            b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, F16, bias=True
        )
        tensors += [
            (b + "attn_output.bias", (n_embd,), F32),
            (b + "attn_sinks.weight", (n_head,), F32),
        ]
        tensors += _experts(b, n_embd, n_ff_exp, n_expert, MXFP4)
        tensors += [
            (b + "ffn_gate_inp.bias", (n_expert,), F32),
            (b + "ffn_gate_exps.bias", (n_ff_exp, n_expert), F32),
            (b + "ffn_up_exps.bias", (n_ff_exp, n_expert), F32),
            (b + "ffn_down_exps.bias", (n_embd, n_expert), F32),
        ]
    return ArchModel(
        "gpt-oss-20b",
        arch,
        "openai/gpt-oss-20b config.json: 24 layers, hidden "
        "2880, 64/8 heads of 64, 32 experts (4 used) of 2880, sliding window 128 "
        "on every other layer, attention sinks, vocab 201088, max_position "
        "131072; experts MXFP4",
        meta,
        tensors + last,
    )


# ----------------------------------------------------------------------------- deepseek2


def deepseek_v2_lite() -> ArchModel:
    arch = "deepseek2"
    n_layer, n_embd, n_head, n_vocab = 27, 2048, 16, 102400
    kv_lora, nope, rope, v_head = 512, 128, 64, 128
    n_expert, n_ff_exp, n_ff = 64, 1408, 10944
    meta = _common(
        arch, "DeepSeek V2 Lite", n_layer, 163840, n_embd, n_head, 1, None, n_ff, rope_base=10000.0
    )
    meta.update(
        {
            f"{arch}.attention.key_length": kv_lora + rope,
            f"{arch}.attention.value_length": kv_lora,
            f"{arch}.attention.key_length_mla": nope + rope,
            f"{arch}.attention.value_length_mla": v_head,
            f"{arch}.attention.kv_lora_rank": kv_lora,
            f"{arch}.rope.dimension_count": rope,
            f"{arch}.leading_dense_block_count": 1,
            f"{arch}.expert_count": n_expert,
            f"{arch}.expert_used_count": 6,
            f"{arch}.expert_shared_count": 2,
            f"{arch}.expert_feed_forward_length": n_ff_exp,
            f"{arch}.expert_weights_scale": 1.0,
            f"{arch}.vocab_size": n_vocab,
            f"{arch}.rope.scaling.type": "yarn",
            f"{arch}.rope.scaling.factor": 40.0,
            f"{arch}.rope.scaling.original_context_length": 4096,
            f"{arch}.rope.scaling.yarn_log_multiplier": 0.0707,
        }
    )
    meta.update(bpe_vocab(n_vocab, "deepseek-llm", eos=100001, bos=100000))
    first, last = _head(n_embd, n_vocab, Q8_0, False, Q8_0)
    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [
            (b + "attn_norm.weight", (n_embd,), F32),
            (b + "attn_kv_a_norm.weight", (kv_lora,), F32),
            (b + "attn_q.weight", (n_embd, n_head * (nope + rope)), Q8_0),
            (b + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), Q8_0),
            (b + "attn_k_b.weight", (nope, kv_lora, n_head), Q8_0),
            (b + "attn_v_b.weight", (kv_lora, v_head, n_head), Q8_0),
            (b + "attn_output.weight", (n_head * v_head, n_embd), Q8_0),
            (b + "ffn_norm.weight", (n_embd,), F32),
        ]
        if il < 1:
            tensors += _ffn(b, n_embd, n_ff, Q8_0)
        else:
            tensors += _experts(b, n_embd, n_ff_exp, n_expert, Q8_0)
            tensors += _ffn(b, n_embd, n_ff_exp * 2, Q8_0, suffix="_shexp")
    return ArchModel(
        "deepseek-v2-lite",
        arch,
        "deepseek-ai/DeepSeek-V2-Lite config.json: 27 "
        "layers (first dense, 10944), hidden 2048, 16 heads, MLA kv_lora_rank "
        "512, qk_nope 128 + rope 64, v_head 128, no q_lora, 64 experts (6 used) "
        "of 1408 + 2 shared, vocab 102400, max_position 163840",
        meta,
        tensors + last,
    )


# ----------------------------------------------------------------------------- qwen3.5


def _qwen35(
    key: str,
    arch: str,
    name: str,
    source: str,
    *,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
    k_heads: int,
    v_heads: int,
    mtp: bool,
    moe: tuple[int, int, int, int] | None = None,
    wtype: int = Q8_0,
    tied: bool = False,
) -> ArchModel:
    """moe = (n_expert, n_used, n_ff_exp, n_ff_shexp); ``wtype``: the matrices' type
    (Q4_K: a Q4_K_M-like file with a Q6_K output)."""
    hd, n_vocab, d_state, d_conv = 256, 248320, 128, 4
    n_all = n_layer + (1 if mtp else 0)
    meta = _common(
        arch, name, n_all, 262144, n_embd, n_head, n_head_kv, hd, n_ff, rope_base=10000000.0
    )
    meta.update(
        {
            f"{arch}.rope.dimension_count": 64,
            f"{arch}.rope.dimension_sections": [11, 11, 10, 0],
            f"{arch}.ssm.conv_kernel": d_conv,
            f"{arch}.ssm.state_size": d_state,
            f"{arch}.ssm.group_count": k_heads,
            f"{arch}.ssm.time_step_rank": v_heads,
            f"{arch}.ssm.inner_size": v_heads * d_state,
            f"{arch}.full_attention_interval": 4,
        }
    )
    if mtp:
        meta[f"{arch}.nextn_predict_layers"] = 1
    if moe:
        n_expert, n_used, n_ff_exp, n_ff_shexp = moe
        meta.update(
            {
                f"{arch}.expert_count": n_expert,
                f"{arch}.expert_used_count": n_used,
                f"{arch}.expert_feed_forward_length": n_ff_exp,
                f"{arch}.expert_shared_feed_forward_length": n_ff_shexp,
            }
        )
    meta.update(bpe_vocab(n_vocab, "qwen35", eos=248046))
    first, last = _head(n_embd, n_vocab, wtype, tied, Q6_K if wtype == Q4_K else None)
    key_dim, value_dim = d_state * k_heads, d_state * v_heads

    def ffn(b: str) -> list[Tensor]:
        if not moe:
            return _ffn(b, n_embd, n_ff, wtype)
        return (
            _experts(b, n_embd, moe[2], moe[0], wtype)
            + [(b + "ffn_gate_inp_shexp.weight", (n_embd,), F32)]
            + _ffn(b, n_embd, moe[3], wtype, suffix="_shexp")
        )

    def full_attn(b: str) -> list[Tensor]:
        return _attn(
            b,
            n_embd,
            n_head * hd * 2,
            n_head_kv * hd,
            n_head_kv * hd,
            n_head * hd,
            wtype,
            qk_norm=hd,
        )

    tensors = list(first)
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [
            (b + "attn_norm.weight", (n_embd,), F32),
            (b + "post_attention_norm.weight", (n_embd,), F32),
        ]
        if (il + 1) % 4 == 0:
            tensors += full_attn(b)
        else:
            tensors += [
                (b + "attn_qkv.weight", (n_embd, key_dim * 2 + value_dim), wtype),
                (b + "attn_gate.weight", (n_embd, value_dim), wtype),
                (b + "ssm_conv1d.weight", (d_conv, key_dim * 2 + value_dim), F32),
                (b + "ssm_dt.bias", (v_heads,), F32),
                (b + "ssm_a", (v_heads,), F32),
                (b + "ssm_beta.weight", (n_embd, v_heads), BF16),
                (b + "ssm_alpha.weight", (n_embd, v_heads), BF16),
                (b + "ssm_norm.weight", (d_state,), F32),
                (b + "ssm_out.weight", (value_dim, n_embd), wtype),
            ]
        tensors += ffn(b)
    tensors += last  # the MTP block comes last, as in the HF checkpoints (mtp.* after lm_head)
    if mtp:
        b = f"blk.{n_layer}."
        tensors += [
            (b + "attn_norm.weight", (n_embd,), F32),
            (b + "post_attention_norm.weight", (n_embd,), F32),
        ]
        tensors += full_attn(b) + ffn(b)
        tensors += [
            (b + "nextn.eh_proj.weight", (2 * n_embd, n_embd), wtype),
            (b + "nextn.enorm.weight", (n_embd,), F32),
            (b + "nextn.hnorm.weight", (n_embd,), F32),
            (b + "nextn.shared_head_norm.weight", (n_embd,), F32),
        ]
    return ArchModel(key, arch, source, meta, tensors)


def qwen35_27b(mtp: bool = True) -> ArchModel:
    return _qwen35(
        "qwen35-27b" + ("" if mtp else "-nomtp"),
        "qwen35",
        "Qwen3.5 27B",
        "Qwen/Qwen3.5-27B config.json (text_config): 64 layers (every 4th full attention), "
        "hidden 5120, 24/4 heads of 256, intermediate 17408, gated delta net 16 key / 48 "
        "value heads of 128, conv 4, vocab 248320, 1 MTP layer",
        n_layer=64,
        n_embd=5120,
        n_head=24,
        n_head_kv=4,
        n_ff=17408,
        k_heads=16,
        v_heads=48,
        mtp=mtp,
    )


def qwen35moe_35b_a3b(mtp: bool = True) -> ArchModel:
    return _qwen35(
        "qwen35moe-35b-a3b" + ("" if mtp else "-nomtp"),
        "qwen35moe",
        "Qwen3.5 35B A3B",
        "Qwen/Qwen3.5-35B-A3B config.json (text_config): 40 layers (every 4th full "
        "attention), hidden 2048, 16/2 heads of 256, 256 experts (8 used) of 512 + shared "
        "512, gated delta net 16 key / 32 value heads of 128, vocab 248320, 1 MTP layer",
        n_layer=40,
        n_embd=2048,
        n_head=16,
        n_head_kv=2,
        n_ff=512,
        k_heads=16,
        v_heads=32,
        mtp=mtp,
        moe=(256, 8, 512, 512),
    )


def qwen35_dense_q4(key: str) -> ArchModel:
    """Qwen3.5 dense models as Q4_K_M-like files, no MTP layer (what a box with an 8 GB GPU
    runs): ``27b`` and the drafts ``0.8b``, ``4b``, ``9b``. Shapes from the published model
    cards (hidden, layers, attention heads of 256, FFN, gated delta net heads of 128);
    the 0.8B's FFN (3584) and delta net heads (16/16) are from memory of its config."""
    shapes = {  # n_layer, n_embd, n_head, n_head_kv, n_ff, k_heads, v_heads, tied
        "27b": (64, 5120, 24, 4, 17408, 16, 48, False),
        "9b": (32, 4096, 16, 4, 12288, 16, 32, False),
        "4b": (32, 2560, 16, 4, 9216, 16, 32, True),
        "0.8b": (24, 1024, 8, 2, 3584, 16, 16, True),
    }
    n_layer, n_embd, n_head, n_head_kv, n_ff, k_heads, v_heads, tied = shapes[key]
    return _qwen35(
        f"qwen35-{key}-q4",
        "qwen35",
        f"Qwen3.5 {key.upper()}",
        f"Qwen/Qwen3.5-{key.upper()} model card: {n_layer} layers, hidden {n_embd}, "
        f"{n_head}/{n_head_kv} heads of 256, FFN {n_ff}, delta net {k_heads}/{v_heads}",
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        k_heads=k_heads,
        v_heads=v_heads,
        mtp=False,
        wtype=Q4_K,
        tied=tied,
    )


def glm4moe_air(mtp: bool = True) -> ArchModel:
    """GLM-4.5-Air: one leading dense layer, then MoE layers with a sigmoid-gated router
    (``exp_probs_b``) and one shared expert, biased Q/K/V, partial RoPE, one NextN (MTP)
    layer last (llama.cpp skips it without ``--spec-type draft-mtp``). Q4_K where the row
    length fits its 256-wide blocks, Q8_0 for the 1408/10944-wide down projections (as
    llama.cpp's quantizer falls back)."""
    arch, hd = "glm4moe", 128
    n_layer, n_embd, n_head, n_head_kv = 46, 4096, 96, 8
    n_ff, n_ff_exp, n_expert, n_vocab = 10944, 1408, 128, 151552
    n_all = n_layer + (1 if mtp else 0)
    meta = _common(
        arch, "GLM 4.5 Air", n_all, 131072, n_embd, n_head, n_head_kv, hd, n_ff, eps=1e-5
    )
    meta.update(
        {
            f"{arch}.rope.dimension_count": hd // 2,  # partial_rotary_factor 0.5
            f"{arch}.expert_count": n_expert,
            f"{arch}.expert_used_count": 8,
            f"{arch}.expert_shared_count": 1,
            f"{arch}.expert_feed_forward_length": n_ff_exp,
            f"{arch}.leading_dense_block_count": 1,
            f"{arch}.expert_weights_scale": 1.0,
            f"{arch}.expert_weights_norm": True,
            f"{arch}.expert_gating_func": 2,  # sigmoid
        }
    )
    if mtp:
        meta[f"{arch}.nextn_predict_layers"] = 1
    meta.update(bpe_vocab(n_vocab, "glm4", eos=151329))
    first, last = _head(n_embd, n_vocab, Q4_K, False, Q6_K)

    def block(il: int) -> list[Tensor]:
        b = f"blk.{il}."
        out: list[Tensor] = [(b + "attn_norm.weight", (n_embd,), F32)]
        out += _attn(
            b, n_embd, n_head * hd, n_head_kv * hd, n_head_kv * hd, n_head * hd, Q4_K, bias=True
        )
        out += [(b + "post_attention_norm.weight", (n_embd,), F32)]
        if il == 0:
            return out + _ffn(b, n_embd, n_ff, Q4_K, down_type=Q8_0)
        out += _experts(b, n_embd, n_ff_exp, n_expert, Q4_K, down_type=Q8_0)
        out += [(b + "exp_probs_b.bias", (n_expert,), F32)]
        return out + _ffn(b, n_embd, n_ff_exp, Q4_K, down_type=Q8_0, suffix="_shexp")

    tensors = list(first)
    for il in range(n_layer):
        tensors += block(il)
    tensors += last
    if mtp:
        b = f"blk.{n_layer}."
        tensors += block(n_layer)
        tensors += [
            (b + "nextn.eh_proj.weight", (2 * n_embd, n_embd), Q4_K),
            (b + "nextn.enorm.weight", (n_embd,), F32),
            (b + "nextn.hnorm.weight", (n_embd,), F32),
            (b + "nextn.shared_head_norm.weight", (n_embd,), F32),
        ]
    return ArchModel(
        "glm4moe-air" + ("" if mtp else "-nomtp"),
        arch,
        "zai-org/GLM-4.5-Air config.json: 46 layers (first dense), hidden 4096, 96/8 heads "
        "of 128 with Q/K/V bias, partial rotary 0.5, intermediate 10944, 128 routed experts "
        "(8 used) of 1408 + 1 shared, sigmoid router, vocab 151552, 1 NextN layer",
        meta,
        tensors,
    )


ARCH_MODELS: dict[str, Callable[[], ArchModel]] = {
    "qwen3-8b": qwen3_8b,
    "qwen3-0.6b": qwen3_06b,
    "qwen3-embedding-0.6b": qwen3_embedding_06b,
    "qwen3moe-30b-a3b": qwen3moe_30b_a3b,
    "gemma3-4b": gemma3_4b,
    "gpt-oss-20b": gpt_oss_20b,
    "deepseek-v2-lite": deepseek_v2_lite,
    "qwen35-27b": qwen35_27b,
    "qwen35moe-35b-a3b": qwen35moe_35b_a3b,
    "glm4moe-air": glm4moe_air,
    **NEXT_MODELS,
    **MORE_MODELS,
}


def model_for(key: str) -> ArchModel:
    """A model by key; ``<key>-nomtp`` is the Qwen3.5 file without its MTP layer."""
    if key.endswith("-nomtp"):
        base = key.removesuffix("-nomtp")
        factory = {
            "qwen35-27b": qwen35_27b,
            "qwen35moe-35b-a3b": qwen35moe_35b_a3b,
            "glm4moe-air": glm4moe_air,
        }[base]
        return factory(mtp=False)
    return ARCH_MODELS[key]()
