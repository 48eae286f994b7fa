"""Context cells, KV cache, SWA cache and recurrent state (estimation.md sections 1a, 1b).

Pure functions of a :class:`ModelShape` and the context parameters. The byte counts equal
llama.cpp's ``llama_kv_cache: size = ... MiB`` lines (validated in estimation.md section 8).
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.errors import InputError
from monitor.estimate.shape import ModelShape
from monitor.gguf.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType

PAD = 256  # GGML_PAD(n_ctx, 256): PR #17046
DEFAULT_SLOTS = 4  # -np auto -> 4 slots, unified KV (PR #16736)
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")


class EstimateError(InputError):
    """An input the estimator cannot use (unknown cache type, ...), phrased for the user."""


def pad(n: int, to: int = PAD) -> int:
    return (n + to - 1) // to * to


def row_bytes(cache_type: str, n: int) -> int:
    """``ggml_row_size``: n elements of a type, from gguf's GGML_QUANT_SIZES table."""
    try:
        qtype = GGMLQuantizationType[cache_type.upper()]
    except KeyError:
        raise EstimateError(
            f"unknown KV cache type {cache_type!r} (one of {', '.join(CACHE_TYPES)})"
        ) from None
    block, size = GGML_QUANT_SIZES[qtype]
    return n // block * size


@dataclass(frozen=True, slots=True)
class Context:
    """How many KV cells and streams llama.cpp creates (src/llama-context.cpp 283-303)."""

    n_ctx: int  # total cells of the full-attention cache
    n_ctx_seq: int  # cells per stream (what one slot may use)
    n_seq_max: int  # slots (-np)
    n_stream: int  # 1 when unified, else n_seq_max
    kv_unified: bool
    n_ubatch: int
    n_batch: int


def context(
    n_ctx_arg: int, n_seq_max: int, kv_unified: bool, n_ubatch: int = 512, n_batch: int = 2048
) -> Context:
    """``n_ctx = pad256(-c)``; non-unified: ``n_ctx_seq = pad256(n_ctx / np)`` and
    ``n_ctx = n_ctx_seq * np`` (it can round UP: -c 8192 -np 24 -> 12,288 cells)."""
    n_ctx = pad(n_ctx_arg)
    n_seq_max = max(1, n_seq_max)
    n_ubatch = min(n_ubatch, n_batch)
    if kv_unified:
        return Context(n_ctx, n_ctx, n_seq_max, 1, True, n_ubatch, n_batch)
    n_ctx_seq = pad(n_ctx // n_seq_max)
    return Context(n_ctx_seq * n_seq_max, n_ctx_seq, n_seq_max, n_seq_max, False, n_ubatch, n_batch)


def swa_cells_per_stream(shape: ModelShape, ctx: Context, swa_full: bool) -> int:
    """``pad256(min(n_ctx_seq, n_swa * (unified ? np : 1) + n_ubatch))``, or n_ctx_seq with
    --swa-full (src/llama-kv-cache-iswa.cpp 66-104)."""
    if swa_full:
        return ctx.n_ctx_seq
    seqs = ctx.n_seq_max if ctx.kv_unified else 1
    return pad(min(ctx.n_ctx_seq, shape.n_swa * seqs + ctx.n_ubatch))


def layer_bytes_per_cell(
    shape: ModelShape, il: int, type_k: str, type_v: str, v_pad: int | None = None
) -> int:
    """K (+ V unless MLA) bytes of one cell of one layer (src/llama-kv-cache.cpp 163-232)."""
    k = row_bytes(type_k, shape.k_width(il))
    if shape.is_mla:
        return k  # MLA stores only K (kv_lora_rank + rope, e.g. 576 wide)
    return k + row_bytes(type_v, v_pad or shape.v_width(il))


@dataclass(frozen=True, slots=True)
class KvSize:
    full_bytes: int
    swa_bytes: int
    full_cells: int  # total over streams
    swa_cells: int  # total over streams
    full_layers: int
    swa_layers: int
    k_bytes: int
    v_bytes: int


def kv_layers(shape: ModelShape, mtp: bool = False) -> list[int]:
    """Layers with K/V: the target's (``has_kv``), or for an MTP context the nextn layers."""
    if mtp:
        first = shape.n_layer - shape.n_nextn
        return [il for il in range(first, shape.n_layer) if shape.n_head_kv[il] > 0]
    return [il for il in range(shape.n_layer) if shape.has_kv(il)]


def kv_size(
    shape: ModelShape,
    ctx: Context,
    type_k: str = "f16",
    type_v: str = "f16",
    flash_attn: bool = True,
    swa_full: bool = False,
    layers: list[int] | None = None,
) -> KvSize:
    """Bytes of the KV caches over ``layers`` (default: every layer with KV). With flash
    attention off V is stored transposed and every layer's V is padded to the widest V of
    the cache ([TAG_V_CACHE_VARIABLE])."""
    all_layers = kv_layers(shape)
    v_widths = {shape.v_width(il) for il in all_layers}
    kv_layers_ = all_layers if layers is None else layers
    v_pad = max(v_widths) if (not flash_attn and len(v_widths) > 1) else None
    full_cells = ctx.n_ctx_seq * ctx.n_stream
    swa_cells = swa_cells_per_stream(shape, ctx, swa_full) * ctx.n_stream if shape.swa else 0
    full = swa = k_total = v_total = 0
    n_full = n_swa = 0
    for il in kv_layers_:
        cells = swa_cells if shape.is_swa(il) else full_cells
        k = row_bytes(type_k, shape.k_width(il)) * cells
        v = 0 if shape.is_mla else row_bytes(type_v, v_pad or shape.v_width(il)) * cells
        k_total += k
        v_total += v
        if shape.is_swa(il):
            swa += k + v
            n_swa += 1
        else:
            full += k + v
            n_full += 1
    return KvSize(full, swa, full_cells, swa_cells, n_full, n_swa, k_total, v_total)


def recurrent_bytes(shape: ModelShape, n_seq_max: int, n_rs_seq: int = 0) -> int:
    """f32 r+s state per recurrent layer, per sequence, x (1 + n_rs_seq) for speculative
    rollback (src/llama-memory-recurrent.cpp 72-125)."""
    rows = max(1, n_seq_max) * (1 + n_rs_seq)
    return shape.n_recurrent_layers * 4 * (shape.n_embd_r + shape.n_embd_s) * rows
