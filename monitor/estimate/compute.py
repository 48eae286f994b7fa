"""Compute and output buffers (estimation.md section 1c).

llama.cpp reserves the worst-case prompt graph (``n_tokens = min(n_ctx, n_ubatch)``); the
allocator reuses memory, so the buffer is the peak live set, not a sum. The two regimes
below were fitted to llama-fit-params on a Qwen3-8B shape (section 8) and reproduce every
measured point to within 1 MiB:

- flash attention on: the f32 logits plus two f32 embedding-wide activations,
  ``4 * n_ub * (n_vocab + 2 * n_embd)`` (312 / 1251 / 5004 MiB at ub 512 / 2048 / 8192);
- flash attention off: the f32 attention scores of one layer, a score-wide mask and the
  FFN-wide intermediates, ``4 * n_ub * (n_kv * (n_head + 1) + n_ff + 2.5 * n_embd)``,
  where ``n_kv`` is the cells of one stream; the larger of this and the FA-on figure
  (572 / 2156 / 2288 / 9152 MiB; split streams fall back to the logits floor).
"""

from __future__ import annotations

from monitor.estimate.kv import Context
from monitor.estimate.shape import ModelShape


def compute_bytes(shape: ModelShape, ctx: Context, flash_attn: bool) -> int:
    """Encoder-only embedders have no vocabulary logits and attend within the batch."""
    n_ub = min(ctx.n_ubatch, ctx.n_ctx)
    width = 0 if shape.encoder_only else shape.n_vocab
    logits = 4 * n_ub * (width + 2 * shape.n_embd)
    if flash_attn:
        return logits
    n_head = max(shape.n_head) if shape.n_head else 1
    n_kv = n_ub if shape.encoder_only else ctx.n_ctx_seq
    scores = 4 * n_ub * (n_kv * (n_head + 1) + shape.n_ff) + 10 * n_ub * shape.n_embd
    return max(logits, scores)


def output_bytes(shape: ModelShape, ctx: Context, embeddings: bool) -> int:
    """Host output buffer at start: ``(n_vocab [+ n_embd]) * n_seq_max * 4`` B; it grows at
    run time when a batch asks for more outputs (llama_context::output_reserve)."""
    width = shape.n_vocab + (shape.n_embd if embeddings else 0)
    return 4 * width * ctx.n_seq_max
