"""The pieces every real-architecture header is built from (tests/fakes/arch_models.py,
tests/fakes/arch_models_next.py): the model record, vocabularies, and the tensors of the
common blocks, with llama.cpp's names and shapes (ne0 first)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gguf import GGMLQuantizationType
from gguf_models import F32, Tensor, write_model

MXFP4 = int(GGMLQuantizationType.MXFP4)


@dataclass(frozen=True)
class ArchModel:
    key: str  # e.g. "qwen3-8b"
    arch: str  # general.architecture
    source: str  # the published config the shapes come from
    metadata: dict[str, object]
    tensors: list[Tensor]

    def write(self, directory: str | Path) -> Path:
        path = Path(directory) / f"{self.key}.gguf"
        if not path.exists():
            tmp = path.with_suffix(".tmp.gguf")
            write_model(tmp, self.arch, self.metadata, self.tensors)
            tmp.rename(path)
        return path


# ----------------------------------------------------------------------------- vocab


def bpe_vocab(n_vocab: int, pre: str, eos: int, bos: int | None = None) -> dict[str, object]:
    """A byte-level BPE vocabulary of ``n_vocab`` tokens (llama-vocab.cpp ``gpt2``)."""
    meta: dict[str, object] = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": [f"tok{i}" for i in range(n_vocab)],
        "tokenizer.ggml.token_type": [1] * n_vocab,
        "tokenizer.ggml.merges": ["t o", "to k"],
        "tokenizer.ggml.eos_token_id": eos,
        "tokenizer.ggml.padding_token_id": eos,
    }
    if bos is not None:
        meta["tokenizer.ggml.bos_token_id"] = bos
    return meta


def spm_vocab(n_vocab: int) -> dict[str, object]:
    """A SentencePiece vocabulary (``llama``): <pad> <eos> <bos> <unk>, byte tokens, pieces."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [3, 3, 3, 2] + [6] * 256
    tokens += [f"\u2581p{i}" for i in range(n_vocab - len(tokens))]
    types += [1] * (n_vocab - len(types))
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * n_vocab,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 2,
        "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.unknown_token_id": 3,
        "tokenizer.ggml.padding_token_id": 0,
    }


def common_meta(
    arch: str,
    name: str,
    n_layer: int,
    n_ctx: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    head_dim: int | None,
    n_ff: int,
    eps: float = 1e-6,
    rope_base: float = 1e6,
) -> dict[str, object]:
    meta: dict[str, object] = {
        "general.name": name,
        "general.file_type": 7,
        "general.quantization_version": 2,
        f"{arch}.block_count": n_layer,
        f"{arch}.context_length": n_ctx,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head_kv,
        f"{arch}.rope.freq_base": rope_base,
        f"{arch}.attention.layer_norm_rms_epsilon": eps,
    }
    if head_dim is not None:
        meta[f"{arch}.attention.key_length"] = head_dim
        meta[f"{arch}.attention.value_length"] = head_dim
    return meta


def head(
    n_embd: int, n_vocab: int, wtype: int, tied: bool, out_type: int | None = None
) -> tuple[list[Tensor], list[Tensor]]:
    """(token_embd first, output_norm + output last)."""
    first: list[Tensor] = [("token_embd.weight", (n_embd, n_vocab), wtype)]
    last: list[Tensor] = [("output_norm.weight", (n_embd,), F32)]
    if not tied:
        last.append(("output.weight", (n_embd, n_vocab), out_type or wtype))
    return first, last


def attn(
    b: str,
    n_embd: int,
    n_q: int,
    n_k: int,
    n_v: int,
    n_o: int,
    wtype: int,
    qk_norm: int = 0,
    bias: bool = False,
) -> list[Tensor]:
    out: list[Tensor] = [
        (b + "attn_q.weight", (n_embd, n_q), wtype),
        (b + "attn_k.weight", (n_embd, n_k), wtype),
        (b + "attn_v.weight", (n_embd, n_v), wtype),
        (b + "attn_output.weight", (n_o, n_embd), wtype),
    ]
    if bias:
        out += [
            (b + "attn_q.bias", (n_q,), F32),
            (b + "attn_k.bias", (n_k,), F32),
            (b + "attn_v.bias", (n_v,), F32),
        ]
    if qk_norm:
        out += [
            (b + "attn_q_norm.weight", (qk_norm,), F32),
            (b + "attn_k_norm.weight", (qk_norm,), F32),
        ]
    return out


def ffn(
    b: str, n_embd: int, n_ff: int, wtype: int, down_type: int | None = None, suffix: str = ""
) -> list[Tensor]:
    return [
        (b + f"ffn_gate{suffix}.weight", (n_embd, n_ff), wtype),
        (b + f"ffn_up{suffix}.weight", (n_embd, n_ff), wtype),
        (b + f"ffn_down{suffix}.weight", (n_ff, n_embd), down_type or wtype),
    ]


def experts(
    b: str, n_embd: int, n_ff_exp: int, n_expert: int, wtype: int, down_type: int | None = None
) -> list[Tensor]:
    return [
        (b + "ffn_gate_inp.weight", (n_embd, n_expert), F32),
        (b + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), wtype),
        (b + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), wtype),
        (b + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), down_type or wtype),
    ]
