"""Write GGUF headers in real shapes, with no tensor data on disk, for tests and benches.

The header (metadata + tensor infos) is written by the ``gguf`` package's own
``GGUFWriter`` (``add_tensor_info`` needs no data), so the bytes are what llama.cpp's
converters produce. The data region is then made a sparse hole of the right length
(``truncate``), so the file has its real size (an 8B Q8_0 model is 8.7 GB) but takes a few
MiB on disk, and ``gguf.GGUFReader`` can map it. Split files are named and keyed like
``gguf-split`` output: ``{stem}-00001-of-0000N.gguf``, full metadata in split 1 only,
``split.no`` / ``split.count`` / ``split.tensors.count`` in every split.

Shapes are **ne0 first**, as stored in the file and as ``monitor.gguf.reader.TensorInfo.shape``
(a ``[n_embd, n_vocab]`` token_embd is ``(4096, 151936)``).

    tensors = dense_tensors(n_layer=36, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128,
                            n_ff=12288, n_vocab=151936, ggml_type=Q8_0)
    write_model(tmp / "m.gguf", "qwen3", {"qwen3.block_count": 36}, tensors, vocab_size=151936)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter
from gguf.gguf_writer import GGUFValue

F32 = GGMLQuantizationType.F32
F16 = GGMLQuantizationType.F16
BF16 = GGMLQuantizationType.BF16
Q8_0 = GGMLQuantizationType.Q8_0
Q4_0 = GGMLQuantizationType.Q4_0
Q4_K = GGMLQuantizationType.Q4_K
Q6_K = GGMLQuantizationType.Q6_K

Tensor = tuple[str, tuple[int, ...], int]  # (name, shape ne0 first, ggml type)

__all__ = [
    "BF16",
    "F16",
    "F32",
    "Q4_0",
    "Q4_K",
    "Q6_K",
    "Q8_0",
    "GGUFValue",
    "GGUFValueType",
    "Tensor",
    "dense_tensors",
    "qwen3_8b",
    "tensor_nbytes",
    "write_model",
]


class _Writer(GGUFWriter):
    """GGUFWriter with the big metadata arrays (a 262k-token vocabulary) packed at once
    rather than item by item: the same bytes, about 20x faster."""

    _ARRAY_DTYPES = {
        GGUFValueType.INT32: "<i4",
        GGUFValueType.UINT32: "<u4",
        GGUFValueType.FLOAT32: "<f4",
    }

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):  # type: ignore[no-untyped-def]
        if vtype != GGUFValueType.ARRAY or not isinstance(val, list | tuple) or len(val) < 64:
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        ltype = sub_type or GGUFValueType.get_type(val[0])
        if ltype == GGUFValueType.STRING and all(isinstance(v, str) for v in val):
            encoded = [v.encode("utf-8") for v in val]
            lengths = np.array([len(e) for e in encoded], dtype="<u8")
            body = b"".join(n.tobytes() + e for n, e in zip(lengths, encoded, strict=True))
        elif ltype in self._ARRAY_DTYPES:
            body = np.asarray(val, dtype=self._ARRAY_DTYPES[ltype]).tobytes()
        else:
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        head = self._pack("I", vtype) if add_vtype else b""
        return head + self._pack("I", ltype) + self._pack("Q", len(val)) + body


def tensor_nbytes(shape: Sequence[int], ggml_type: int) -> int:
    """Bytes of one tensor from the ``gguf`` package's (block size, type size) table."""
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    n = 1
    for d in shape:
        n *= d
    assert not shape or shape[0] % block == 0, (shape, ggml_type)
    return n // block * type_size


def write_model(
    path: str | os.PathLike[str],
    arch: str,
    metadata: Mapping[str, object],
    tensors: Sequence[Tensor],
    *,
    vocab_size: int | None = None,
    merges: int = 0,
    scores: bool = False,
    split: int | None = None,
    sparse_data: bool = True,
    version: int | None = None,
) -> list[Path]:
    """Write a GGUF header; return the written paths (one, or ``split`` of them).

    ``metadata`` values: ``int`` -> UINT32 (INT32 if negative, 64-bit if large), ``float``
    -> FLOAT32, ``bool``, ``str``, ``list`` -> an array typed by GGUFWriter's inference
    (ints -> INT32, as the converters write per-layer arrays), or a ``GGUFValue(value,
    type, sub_type)`` for an exact type. ``vocab_size`` adds ``tokenizer.ggml.tokens`` and
    ``token_type`` arrays of that length (and ``scores`` if asked); ``merges`` adds that
    many ``tokenizer.ggml.merges`` strings. ``split=N`` writes N files with the tensors
    spread evenly in order. ``sparse_data=False`` ends each file after the header padding
    (``tensor_bytes`` still counts the claimed tensors). ``version`` patches the version
    field (to make v2 files).
    """
    path = Path(path)
    writer = _Writer(path, arch)
    if vocab_size is not None:
        writer.add_string("tokenizer.ggml.model", "gpt2")
        writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(vocab_size)])
        writer.add_array("tokenizer.ggml.token_type", [1] * vocab_size)
        if scores:
            writer.add_array("tokenizer.ggml.scores", [0.0] * vocab_size)
    if merges:
        writer.add_array("tokenizer.ggml.merges", [f"t{i} k{i}" for i in range(merges)])
    for key, value in metadata.items():
        _add(writer, key, value)

    n_splits = split or 1
    if not 1 <= n_splits <= len(tensors) or n_splits > 99999:
        raise ValueError(f"cannot spread {len(tensors)} tensors over {n_splits} splits")
    bounds = {len(tensors) * k // n_splits for k in range(1, n_splits)}
    for i, (name, shape, ggml_type) in enumerate(tensors):
        if i in bounds:
            writer.tensors.append({})  # the writer's own per-split tensor dicts
        writer.add_tensor_info(
            name,
            tuple(reversed(shape)),
            np.dtype(np.float32),
            tensor_nbytes(shape, ggml_type),
            raw_dtype=GGMLQuantizationType(ggml_type),
        )

    paths = writer.format_shard_names(path)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None
    for fout, shard in zip(writer.fout, writer.tensors, strict=True):
        writer.write_padding(fout, fout.tell())
        if sparse_data:
            data = sum(
                GGUFWriter.ggml_pad(ti.nbytes, writer.data_alignment) for ti in shard.values()
            )
            fout.truncate(fout.tell() + data)
    writer.close()
    if version is not None:
        for p in paths:
            with open(p, "r+b") as f:
                f.seek(4)
                f.write(version.to_bytes(4, "little"))
    return paths


def _add(writer: GGUFWriter, key: str, value: object) -> None:
    if isinstance(value, GGUFValue):
        writer.add_key_value(key, value.value, value.type, value.sub_type)
    elif isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        if value < 0:
            vtype = GGUFValueType.INT32 if value >= -(2**31) else GGUFValueType.INT64
        else:
            vtype = GGUFValueType.UINT32 if value < 2**32 else GGUFValueType.UINT64
        writer.add_key_value(key, value, vtype)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_key_value(key, value, GGUFValueType.STRING)
    elif isinstance(value, list | tuple):
        writer.add_key_value(key, list(value), GGUFValueType.ARRAY)
    else:
        raise TypeError(f"{key}: cannot write {type(value).__name__}")


def dense_tensors(
    *,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int | Sequence[int],
    head_dim: int,
    n_ff: int,
    n_vocab: int,
    ggml_type: int = Q8_0,
    norm_type: int = F32,
    output: bool = True,
    qk_norm: bool = True,
) -> list[Tensor]:
    """Tensor infos of a llama-style dense decoder (names from llama.cpp's tensor map).

    ``n_head_kv`` may be per layer. ``output=False`` models tied embeddings (no
    ``output.weight``); ``qk_norm`` adds Qwen3's ``attn_q_norm`` / ``attn_k_norm``.
    """
    kv = [n_head_kv] * n_layer if isinstance(n_head_kv, int) else list(n_head_kv)
    out: list[Tensor] = [("token_embd.weight", (n_embd, n_vocab), ggml_type)]
    for il in range(n_layer):
        b = f"blk.{il}."
        out += [
            (b + "attn_norm.weight", (n_embd,), norm_type),
            (b + "attn_q.weight", (n_embd, n_head * head_dim), ggml_type),
            (b + "attn_k.weight", (n_embd, kv[il] * head_dim), ggml_type),
            (b + "attn_v.weight", (n_embd, kv[il] * head_dim), ggml_type),
            (b + "attn_output.weight", (n_head * head_dim, n_embd), ggml_type),
        ]
        if qk_norm:
            out += [
                (b + "attn_q_norm.weight", (head_dim,), norm_type),
                (b + "attn_k_norm.weight", (head_dim,), norm_type),
            ]
        out += [
            (b + "ffn_norm.weight", (n_embd,), norm_type),
            (b + "ffn_gate.weight", (n_embd, n_ff), ggml_type),
            (b + "ffn_up.weight", (n_embd, n_ff), ggml_type),
            (b + "ffn_down.weight", (n_ff, n_embd), ggml_type),
        ]
    out.append(("output_norm.weight", (n_embd,), norm_type))
    if output:
        out.append(("output.weight", (n_embd, n_vocab), ggml_type))
    return out


QWEN3_8B = {
    "n_layer": 36,
    "n_embd": 4096,
    "n_head": 32,
    "n_head_kv": 8,
    "head_dim": 128,
    "n_ff": 12288,
    "n_vocab": 151936,
}


def qwen3_8b(
    ggml_type: int = Q8_0,
    *,
    n_layer: int = 36,
    n_vocab: int = 151936,
) -> tuple[dict[str, object], list[Tensor]]:
    """Metadata and tensors shaped like Qwen3-8B (HF config: 36 layers, 4096 embd, 32/8 heads
    of 128, ffn 12288, vocab 151936, untied output). ``n_layer`` / ``n_vocab`` shrink it."""
    shape = {**QWEN3_8B, "n_layer": n_layer, "n_vocab": n_vocab}
    metadata: dict[str, object] = {
        "general.name": "Qwen3 8B",
        "general.file_type": 7,  # LLAMA_FTYPE_MOSTLY_Q8_0
        "general.quantization_version": 2,
        "qwen3.block_count": n_layer,
        "qwen3.context_length": 40960,
        "qwen3.embedding_length": 4096,
        "qwen3.feed_forward_length": 12288,
        "qwen3.attention.head_count": 32,
        "qwen3.attention.head_count_kv": 8,
        "qwen3.attention.key_length": 128,
        "qwen3.attention.value_length": 128,
        "qwen3.rope.freq_base": 1000000.0,
        "qwen3.attention.layer_norm_rms_epsilon": 1e-06,
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.eos_token_id": 151645,
    }
    tensors = dense_tensors(**shape, ggml_type=ggml_type)
    return metadata, tensors
