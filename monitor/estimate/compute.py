"""Compute and output buffers (estimation.md section 1c, refined on a real llama-server).

llama.cpp reserves the worst-case prompt graph (``n_tokens = min(n_ctx, n_ubatch)``); the
allocator reuses memory, so the buffer is the peak live set of the graph, the largest of:

- the layer body (flash attention on): the gated FFN's up, gate and activation plus the
  residual stream, and the f16 attention mask,
  ``4 ub (3 n_ff + 4 n_embd) + 2 ub n_kv + 20 ub`` — encoder-only (ungated) models:
  ``4 ub (n_ff + 3 n_embd) + ...``;
- attention without flash attention: the f32 scores of one layer and the f32 mask,
  ``4 ub n_kv (n_head + 1) + 22 ub n_embd``;
- the logits: ``4 n_outputs n_vocab + 8 ub n_embd``.

``n_kv`` is the cells of one stream, ``ub = min(n_ubatch, n_ctx)``. ``n_outputs`` is what the
context reserves logits for: ``n_batch`` by default (what llama-fit-params measures), but
llama-server limits it to ``np x (1 + n_draft)`` (``server_output_limits``,
tools/server/server-context.cpp; ``n_batch`` for embeddings). Fitted to llama-fit-params
(estimation.md section 8: 312 / 1251 / 5004 MiB FA on, 572 / 2156 / 2288 / 9152 FA off, all
to the MiB) and to the CPU llama-server built by scripts/build-llama-server (15 shapes and
options, exact to 0.01 MiB for llama-architecture models; gemma3 within 3 %).
"""

from __future__ import annotations

from monitor.estimate.kv import Context
from monitor.estimate.shape import ModelShape


def compute_bytes(shape: ModelShape, ctx: Context, flash_attn: bool, n_outputs: int,
                  embeddings: bool = False) -> int:
    """``embeddings``: the graph ends in pooled embeddings, no vocabulary logits."""
    ub = min(ctx.n_ubatch, ctx.n_ctx)
    n_kv = ub if shape.encoder_only else ctx.n_ctx_seq
    ffn = (shape.n_ff + 3 * shape.n_embd) if shape.encoder_only else (
        3 * shape.n_ff + 4 * shape.n_embd)
    body = 4 * ub * ffn + (2 if flash_attn else 4) * ub * n_kv + 20 * ub
    vocab = 0 if shape.encoder_only or embeddings else shape.n_vocab
    logits = 4 * min(n_outputs, ub) * vocab + 8 * ub * shape.n_embd
    if flash_attn:
        return max(body, logits)
    n_head = max(shape.n_head) if shape.n_head else 1
    scores = 4 * ub * n_kv * (n_head + 1) + 22 * ub * shape.n_embd
    return max(body, logits, scores)


def output_bytes(shape: ModelShape, ctx: Context, embeddings: bool) -> int:
    """Host output buffer at start: ``(n_vocab [+ n_embd]) * n_seq_max * 4`` B; it grows at
    run time when a batch asks for more outputs (llama_context::output_reserve)."""
    width = shape.n_vocab + (shape.n_embd if embeddings else 0)
    return 4 * width * ctx.n_seq_max
