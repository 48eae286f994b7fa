"""Small GGUF models with random (seeded) weights that llama-server can load and run.

Used by the real-world tier (tests/realworld): the weights are noise, but every tensor,
hyper-parameter and tokenizer field is what llama.cpp's loader expects, so llama-server
starts, allocates its KV cache and compute buffers, warms up and answers requests.

- ``write_llama``: arch ``llama`` (GQA), SentencePiece ("llama") vocab.
- ``write_gemma3``: arch ``gemma3`` with a sliding window; with the default period 6,
  layers 0-4 of every 6 are SWA and layer 5 is full attention.
- ``write_bert``: arch ``bert`` encoder (WordPiece vocab, mean pooling); no KV cache.
- ``write_llama_draft``: a smaller ``llama`` with the same vocab as ``write_llama``,
  usable as ``-md`` for it.

Every writer returns a :class:`TinyModel` with the path and the shape it wrote, so tests
can compute expected sizes without re-reading the file.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

# SentencePiece token types (llama.cpp llama_token_type / gguf.TokenType)
_NORMAL = int(gguf.TokenType.NORMAL)
_UNKNOWN = int(gguf.TokenType.UNKNOWN)
_CONTROL = int(gguf.TokenType.CONTROL)
_BYTE = int(gguf.TokenType.BYTE)
_UNUSED = int(gguf.TokenType.UNUSED)

_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "hello",
    "world",
    "memory",
    "model",
    "cache",
    "token",
    "llama",
    "gemma",
    "server",
    "test",
)


@dataclass(frozen=True)
class TinyModel:
    """What a writer produced: enough to predict llama.cpp's sizes by hand."""

    path: Path
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    n_swa: int = 0
    swa_layers: tuple[int, ...] = ()
    dtype: str = "f16"
    extra: dict = field(default_factory=dict)

    @property
    def file_bytes(self) -> int:
        return self.path.stat().st_size

    @property
    def kv_layers(self) -> int:
        """Layers that hold KV (all of them for the decoders, none for bert)."""
        return 0 if self.arch == "bert" else self.n_layer


# --------------------------------------------------------------------------- vocabs


def spm_vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-style vocab: <unk> <s> </s>, the 256 byte tokens, then pieces.

    The byte tokens ``<0x00>``..``<0xFF>`` give llama.cpp's SPM tokenizer its byte
    fallback (and the newline token it looks up at load), so any text tokenizes.
    """
    if n_vocab < 3 + 256 + 8:
        raise ValueError("n_vocab too small for an SPM vocab with byte fallback")
    tokens = ["<unk>", "<s>", "</s>"]
    types = [_UNKNOWN, _CONTROL, _CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [_BYTE] * 256
    pieces: list[str] = ["\u2581"]
    pieces += ["\u2581" + w for w in _WORDS]
    pieces += list(string.ascii_lowercase + string.ascii_uppercase + string.digits)
    pieces += ["\u2581" + c for c in string.ascii_lowercase]
    pieces += list(".,!?;:'\"-()")
    seen = set(tokens)
    for a in string.ascii_lowercase:
        for b in string.ascii_lowercase:
            pieces.append(a + b)
            pieces.append("\u2581" + a + b)
    for p in pieces:
        if len(tokens) >= n_vocab:
            break
        if p in seen:
            continue
        seen.add(p)
        tokens.append(p)
        types.append(_NORMAL)
    i = 0
    while len(tokens) < n_vocab:  # pad with unused tokens if asked for a big vocab
        tokens.append(f"<unused{i}>")
        types.append(_UNUSED)
        i += 1
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(len(tokens) - 259)]
    return tokens, scores, types


def wpm_vocab(n_vocab: int) -> tuple[list[str], list[int]]:
    """A BERT WordPiece vocab in llama.cpp's GGUF form.

    Ids follow BERT: [PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103 (llama.cpp's
    defaults for tokenizer model "bert"). Word-initial pieces carry the U+2581 prefix and
    continuation pieces have the "##" stripped, as convert_hf_to_gguf.py writes them.
    """
    if n_vocab < 104 + 64:
        raise ValueError("n_vocab too small for a WordPiece vocab")
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    types = [_CONTROL] + [_UNUSED] * 99 + [_UNKNOWN, _CONTROL, _CONTROL, _CONTROL]
    pieces = ["\u2581" + w for w in _WORDS]
    pieces += ["\u2581" + c for c in string.ascii_lowercase + string.digits + ".,!?;:'\"-()"]
    pieces += list(string.ascii_lowercase + string.digits)
    pieces += [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
    seen = set(tokens)
    for p in pieces:
        if len(tokens) >= n_vocab:
            break
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(_NORMAL)
    i = 99
    while len(tokens) < n_vocab:
        tokens.append(f"[unused{i}]")
        types.append(_UNUSED)
        i += 1
    return tokens, types


# --------------------------------------------------------------------------- helpers


class _Weights:
    def __init__(self, writer: gguf.GGUFWriter, seed: int, dtype: str):
        self.w = writer
        self.rng = np.random.default_rng(seed)
        if dtype not in ("f16", "f32"):
            raise ValueError("dtype must be 'f16' or 'f32'")
        self.np_dtype = np.float16 if dtype == "f16" else np.float32

    def mat(self, name: str, rows: int, cols: int, std: float = 0.02, f32: bool = False) -> None:
        """A 2-D weight; ggml dims {cols, rows} (ne0 = cols), i.e. numpy shape (rows, cols)."""
        data = self.rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)
        self.w.add_tensor(name, data if f32 else data.astype(self.np_dtype, copy=False))

    def vec(self, name: str, n: int, value: float | None = None, std: float = 0.02) -> None:
        """A 1-D tensor, always f32 (norms and biases; ggml wants them f32)."""
        if value is None:
            data = self.rng.standard_normal(n, dtype=np.float32) * np.float32(std)
        else:
            data = np.full(n, value, dtype=np.float32)
        self.w.add_tensor(name, data)


def _finish(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _spm_tokenizer(writer: gguf.GGUFWriter, n_vocab: int) -> None:
    tokens, scores, types = spm_vocab(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


# --------------------------------------------------------------------------- writers


def write_llama(
    path: str | Path,
    *,
    n_layer: int = 4,
    n_embd: int = 256,
    n_head: int = 8,
    n_head_kv: int = 2,
    n_ff: int = 512,
    n_vocab: int = 512,
    n_ctx_train: int = 4096,
    dtype: str = "f16",
    seed: int = 0,
    name: str = "tiny-llama",
) -> TinyModel:
    """A llama-architecture decoder (RMSNorm, RoPE, GQA, SwiGLU), untied output."""
    path = Path(path)
    head_dim = n_embd // n_head
    if head_dim * n_head != n_embd or n_head % n_head_kv:
        raise ValueError("n_embd must divide by n_head and n_head by n_head_kv")
    arch = "llama"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(n_vocab)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    _spm_tokenizer(w, n_vocab)

    t = _Weights(w, seed, dtype)
    t.mat("token_embd.weight", n_vocab, n_embd)
    for i in range(n_layer):
        t.vec(f"blk.{i}.attn_norm.weight", n_embd, 1.0)
        t.mat(f"blk.{i}.attn_q.weight", n_head * head_dim, n_embd)
        t.mat(f"blk.{i}.attn_k.weight", n_head_kv * head_dim, n_embd)
        t.mat(f"blk.{i}.attn_v.weight", n_head_kv * head_dim, n_embd)
        t.mat(f"blk.{i}.attn_output.weight", n_embd, n_head * head_dim)
        t.vec(f"blk.{i}.ffn_norm.weight", n_embd, 1.0)
        t.mat(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t.mat(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t.mat(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    t.vec("output_norm.weight", n_embd, 1.0)
    t.mat("output.weight", n_vocab, n_embd)
    _finish(w)
    return TinyModel(
        path,
        arch,
        n_layer,
        n_embd,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        n_vocab,
        n_ctx_train,
        dtype=dtype,
    )


def write_llama_draft(
    path: str | Path,
    *,
    n_vocab: int = 512,
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 256,
    n_ctx_train: int = 4096,
    dtype: str = "f16",
    seed: int = 1,
) -> TinyModel:
    """A smaller llama with the identical vocab (pass the target's n_vocab): a valid -md."""
    return write_llama(
        path,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        n_vocab=n_vocab,
        n_ctx_train=n_ctx_train,
        dtype=dtype,
        seed=seed,
        name="tiny-llama-draft",
    )


def write_gemma3(
    path: str | Path,
    *,
    n_layer: int = 6,
    n_embd: int = 256,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 64,
    n_ff: int = 512,
    n_vocab: int = 512,
    n_ctx_train: int = 8192,
    sliding_window: int = 128,
    swa_period: int | None = None,
    dtype: str = "f16",
    seed: int = 2,
) -> TinyModel:
    """A gemma3 decoder with sliding-window attention.

    ``swa_period`` None leaves llama.cpp's gemma3 default (period 6, the key absent);
    else it is written as ``gemma3.attention.sliding_window_pattern``. Layer ``il`` is
    SWA when ``il % P < P - 1``.
    """
    path = Path(path)
    arch = "gemma3"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-gemma3")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1_000_000.0)
    w.add_sliding_window(sliding_window)
    if swa_period is not None:
        w.add_sliding_window_pattern(swa_period)
    _spm_tokenizer(w, n_vocab)

    period = 6 if swa_period is None else swa_period
    swa_layers = tuple(il for il in range(n_layer) if il % period < period - 1)

    t = _Weights(w, seed, dtype)
    t.mat("token_embd.weight", n_vocab, n_embd)  # output is tied to token_embd
    for i in range(n_layer):
        t.vec(f"blk.{i}.attn_norm.weight", n_embd, 0.0)  # gemma norms are (1 + w)
        t.mat(f"blk.{i}.attn_q.weight", n_head * head_dim, n_embd)
        t.mat(f"blk.{i}.attn_k.weight", n_head_kv * head_dim, n_embd)
        t.mat(f"blk.{i}.attn_v.weight", n_head_kv * head_dim, n_embd)
        t.mat(f"blk.{i}.attn_output.weight", n_embd, n_head * head_dim)
        t.vec(f"blk.{i}.attn_q_norm.weight", head_dim, 0.0)
        t.vec(f"blk.{i}.attn_k_norm.weight", head_dim, 0.0)
        t.vec(f"blk.{i}.post_attention_norm.weight", n_embd, 0.0)
        t.vec(f"blk.{i}.ffn_norm.weight", n_embd, 0.0)
        t.mat(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t.mat(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t.mat(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
        t.vec(f"blk.{i}.post_ffw_norm.weight", n_embd, 0.0)
    t.vec("output_norm.weight", n_embd, 0.0)
    _finish(w)
    return TinyModel(
        path,
        arch,
        n_layer,
        n_embd,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        n_vocab,
        n_ctx_train,
        n_swa=sliding_window,
        swa_layers=swa_layers,
        dtype=dtype,
    )


def write_bert(
    path: str | Path,
    *,
    n_layer: int = 4,
    n_embd: int = 256,
    n_head: int = 4,
    n_ff: int = 512,
    n_vocab: int = 512,
    n_ctx_train: int = 512,
    dtype: str = "f16",
    seed: int = 3,
) -> TinyModel:
    """A BERT encoder for embeddings (non-causal, mean pooling): llama.cpp gives it no KV."""
    path = Path(path)
    arch = "bert"
    head_dim = n_embd // n_head
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-bert")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    tokens, types = wpm_vocab(n_vocab)
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(2)
    w.add_unk_token_id(100)
    w.add_bos_token_id(101)  # [CLS]
    w.add_sep_token_id(102)
    w.add_pad_token_id(0)
    w.add_mask_token_id(103)
    w.add_add_bos_token(True)
    w.add_add_sep_token(True)

    t = _Weights(w, seed, dtype)
    t.mat("token_embd.weight", n_vocab, n_embd)
    # bert.cpp adds a row view of token_types to f32 activations: ggml's CPU add needs f32
    t.mat("token_types.weight", 2, n_embd, f32=True)
    t.mat("position_embd.weight", n_ctx_train, n_embd)
    t.vec("token_embd_norm.weight", n_embd, 1.0)
    t.vec("token_embd_norm.bias", n_embd, 0.0)
    for i in range(n_layer):
        for proj in ("q", "k", "v"):
            t.mat(f"blk.{i}.attn_{proj}.weight", n_embd, n_embd)
            t.vec(f"blk.{i}.attn_{proj}.bias", n_embd)
        t.mat(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        t.vec(f"blk.{i}.attn_output.bias", n_embd)
        t.vec(f"blk.{i}.attn_output_norm.weight", n_embd, 1.0)
        t.vec(f"blk.{i}.attn_output_norm.bias", n_embd, 0.0)
        t.mat(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t.vec(f"blk.{i}.ffn_up.bias", n_ff)
        t.mat(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
        t.vec(f"blk.{i}.ffn_down.bias", n_embd)
        t.vec(f"blk.{i}.layer_output_norm.weight", n_embd, 1.0)
        t.vec(f"blk.{i}.layer_output_norm.bias", n_embd, 0.0)
    _finish(w)
    return TinyModel(
        path,
        arch,
        n_layer,
        n_embd,
        n_head,
        n_head,
        head_dim,
        n_ff,
        n_vocab,
        n_ctx_train,
        dtype=dtype,
    )


def write_all(directory: str | Path, **sizes: dict) -> dict[str, TinyModel]:
    """Write the four models into ``directory``; ``sizes`` maps a name to writer kwargs."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    llama_kw = dict(sizes.get("llama", {}))
    llama = write_llama(d / "tiny-llama.gguf", **llama_kw)
    draft_kw = {"n_vocab": llama.n_vocab, **sizes.get("draft", {})}
    return {
        "llama": llama,
        "draft": write_llama_draft(d / "tiny-llama-draft.gguf", **draft_kw),
        "gemma3": write_gemma3(d / "tiny-gemma3.gguf", **sizes.get("gemma3", {})),
        "bert": write_bert(d / "tiny-bert.gguf", **sizes.get("bert", {})),
    }


# Writer kwargs per model for the real-world tier (tests/realworld/) and the recorded runs
# of tests/fixtures/llamalog/hardware/. Sized so that the llama.cpp buffers dominate the
# server's own baseline RssAnon (test_llama_server.py's RssAnon test); seconds to write.
REALWORLD_SIZES: dict[str, dict] = {
    "llama": {"n_embd": 1024, "n_head": 16, "n_head_kv": 4, "n_ff": 2816, "n_vocab": 2048},
    "gemma3": {
        "n_embd": 1024,
        "n_head": 8,
        "n_head_kv": 4,
        "head_dim": 128,
        "n_ff": 2816,
        "n_vocab": 2048,
    },
    "bert": {"n_embd": 768, "n_head": 12, "n_ff": 3072, "n_vocab": 2048},
    # Real draft models keep n_ff ~ 3-4 x n_embd (Qwen3-0.6B 3072/1024, Llama-3.2-1B
    # 8192/2048); the compute formula is fitted to such ratios (monitor/estimate/compute.py).
    "draft": {"n_embd": 128, "n_ff": 384},
}
