"""Compute and output buffers (estimation.md section 1c, refined on a real llama-server).

llama.cpp reserves the worst-case prompt graph (``n_tokens = min(n_ctx, n_ubatch)``,
llama_context::sched_reserve); the allocator (ggml-alloc) reuses memory, so the buffer is
the peak live set of the graph, the largest of:

- the layer body (flash attention on), per kind of layer:
  - dense gated FFN (llm_graph_context::build_ffn): up, gate and activation plus the
    residual stream, ``4 ub (3 n_ff + 4 n_embd)``; encoder-only (ungated) models
    ``4 ub (n_ff + 3 n_embd)``; with a quantized, rotated KV cache (``attn_rot_k``,
    llama-kv-cache.cpp: head size % 64 == 0) or in a hybrid recurrent model one
    residual-wide tensor less (measured on Qwen3-8B: a layout effect, not a rule of
    llama.cpp); llama, gemma2, olmo2, cohere2, phi3 and granitehybrid instead have the
    first layer's live set read from ggml-alloc's trace (:func:`traced_body_floats`);
  - MoE FFN (llm_graph_context::build_moe_ffn): the per-expert up/gate/activation
    ``[n_ff_exp, n_expert_used, ub]`` and the per-expert outputs and their weighted copy
    ``[n_embd, n_expert_used, ub]`` live together, ``4 ub 2 n_used (n_ff_exp + n_embd)``,
    ``+ 4 ub 2 n_embd`` with shared experts;
  plus the f16 attention masks, ``2 ub n_kv`` for the full-attention cache and, for iSWA
  models, ``2 ub n_kv_swa`` for the SWA cache (llm_graph_input_attn_kv_iswa);
- attention without flash attention (build_attn_mha): the f32 scores of one layer and
  the f32 masks, ``4 ub n_kv (n_head + 1) + 4 ub n_kv_swa + 4 ub max(5.5 n_embd,
  3.5 n_embd + 2 n_head head_k)``; MLA
  (the absorbed path of src/models/deepseek2.cpp into build_attn_mha with v_mla) instead
  ``+ 2 n_kv kv_lora_rank + 4 ub (n_head (2 kv_lora_rank + n_rot) + 5 n_embd)``: the
  absorbed query, the transposed latent V copy and the latent KQV (fitted on
  DeepSeek-V2-Lite: 194.27 MiB logged, 194.13 estimated);
- the logits: ``4 n_outputs n_vocab + 8 ub n_embd``;
- in a gated-delta-net hybrid (qwen3next, qwen35), the first recurrent layer
  (:func:`delta_net_peak_bytes`): its short-conv tensors, and with speculative rollback
  (MTP) the delta-net output that carries ``1 + n_rs_seq`` state snapshots per sequence;
- in a Mamba2 hybrid (nemotron_h), the Mamba2 layers' ``zxBCdt``, ``conv_x``, ``ssm_conv``
  and ``ssm_scan`` outputs replayed through ggml-alloc's placement rule
  (monitor/estimate/replay.py ``mamba2_peak_bytes``).

``n_kv`` is the cells of one stream, ``ub = min(n_ubatch, n_ctx)``. ``n_outputs`` is what the
context reserves logits for: ``n_batch`` by default (what llama-fit-params measures), but
llama-server limits it to ``np x (1 + n_draft)`` (``server_output_limits``,
tools/server/server-context.cpp; ``n_batch`` for embeddings). Fitted to llama-fit-params
(estimation.md section 8) and to the CPU llama-server built by scripts/build-llama-server
(llama.cpp 0c1e57098) on the real-architecture tier (tests/fixtures/llamalog/arch).
"""

from __future__ import annotations

from monitor.estimate.kv import Context
from monitor.estimate.replay import mamba2_peak_bytes, mla_flash_peak_bytes
from monitor.estimate.shape import ModelShape

# Attention with a sigmoid-gated output: the query projection carries the gate too
# (src/models/qwen35.cpp build_layer_attn, qwen3next.cpp).
GATED_QUERY = frozenset({"qwen3next", "qwen35", "qwen35moe"})


def ffn_body_floats(shape: ModelShape, kv_rotated: bool = False, mtp: bool = False) -> int:
    """f32 values per token live at the peak of the largest FFN of the model. Generic rule:
    one residual-wide tensor fewer is alive with a rotated (quantized) KV cache or in a
    hybrid recurrent model (measured: Qwen3-8B q8_0 KV 100.09 MiB, Qwen3.5-27B 136.02 MiB;
    the traced families of :func:`traced_body_floats` show it depends on the layout)."""
    if shape.encoder_only:
        return shape.n_ff + 3 * shape.n_embd
    traced = traced_body_floats(shape, kv_rotated)
    if traced:
        return traced
    # the MTP graph (one nextn block after eh_proj) keeps two (measured: 126.02 MiB)
    residual = 2 if mtp else 3 if kv_rotated or shape.recurrent else 4
    dense = 3 * shape.n_ff + residual * shape.n_embd
    if not shape.n_expert or not shape.n_expert_used:
        return dense
    if shape.arch == "glm4moe":
        return _glm4moe_body_floats(shape, mtp)
    moe = 2 * shape.n_expert_used * (shape.n_ff_exp + shape.n_embd)
    if shape.n_ff_shexp:  # the shared expert's output and the routed sum, both alive
        moe += 2 * shape.n_embd
        moe = max(moe, shared_expert_floats(shape))
    if mtp:
        return nextn_moe_floats(shape)
    elif shape.recurrent:  # measured on Qwen3.5-35B-A3B: no expert-wide pair at the peak
        moe -= 2 * shape.n_expert_used * shape.n_ff_exp
    if shape.n_layer_dense_lead:  # deepseek2: the first layers are dense
        return max(dense, moe)
    return moe


def traced_body_floats(shape: ModelShape, kv_rotated: bool) -> int:
    """The first layer's FFN peak of the families of issue 33, read from ggml-alloc's own
    trace (``AT_PRINTF`` build of llama.cpp 0c1e57098, tests/fixtures/llamalog/arch); 0 for
    the other archs. At the peak the first layer's ``ffn_up``, ``ffn_gate`` and activation
    (``3 n_ff``) sit on top of: the token embeddings (``inp_embd``, never freed), the
    layer's input, the hole its attention left, and ``ffn_inp`` (the attention output plus
    the residual, in place). The hole is what differs:

    - llama (Mistral-Small-24B, 234.01 MiB logged), gemma2 (Gemma-2-9B, 121.02), olmo2
      (OLMo-2-7B, 100.51): the attention norm's slot and the flash-attention output
      (``n_q``), ``3 n_embd + n_q``;
    - llama with a rotated cache (``attn_rot_k`` / ``attn_rot_v``: a quantized K / V and
      head size % 64 == 0, llama-kv-cache.cpp; build_attn multiplies Q, K and V by a
      Hadamard matrix, and the attention output back): the freed flash-attention output
      leaves a query-wide hole below the rotated output. Where the query is narrower than
      the residual (Mistral-Small-24B, 242.09 MiB) ``wo``'s output does not fit it and
      lands above: ``3 n_embd + 2 n_q``; where it is as wide (Llama-3.1-8B, 112.09 MiB;
      Qwen3-8B's 100.09 is the same layout) it does: ``3 n_embd``, a residual fewer than
      with an f16 cache. On gemma2 and olmo2 nothing moves (121.55, 100.59 MiB: the
      rotation matrices only);
    - phi3 (fused ``attn_qkv``: Q, K and V are views of one tensor, freed together): no
      query hole, ``3 n_embd`` (Phi-3-mini 70.01 MiB);
    - cohere2 (attention and FFN in parallel on one norm, src/models/cohere2.cpp): the peak
      is on the first global layer (3 of Command-R7B): the FFN input norm and the attention
      output stay alive beside the FFN, ``5 n_embd`` (132.02 MiB);
    - granitehybrid whose first layer is Mamba2 + MoE (Granite-4.0-H-Tiny 55.01 MiB): at
      the experts' down projection: the embeddings, the FFN norm, the Mamba2 output and
      the hole of its ``d_inner = 2 n_embd`` output (granite-hybrid.cpp asserts the factor
      2), then the freed gate/up pair ``2 n_used n_ff_exp`` below the activation
      ``n_used n_ff_exp`` and the per-expert outputs ``n_used n_embd``.
    """
    e, f, arch = shape.n_embd, shape.n_ff, shape.arch
    n_q = max(shape.n_head, default=0) * shape.head_k
    if arch == "granitehybrid" and shape.n_expert_used and shape.recurrent[:1] == (True,):
        used = shape.n_expert_used
        return 3 * e + 2 * e + 3 * used * shape.n_ff_exp + used * e
    if shape.n_expert:
        return 0
    if arch == "phi3":
        return 3 * f + 3 * e
    if arch == "cohere2":
        return 3 * f + 5 * e
    if arch in ("gemma2", "olmo2"):
        return 3 * f + 3 * e + n_q
    if arch == "llama":
        hole = (e + 2 * n_q if n_q < e else e) if kv_rotated else e + n_q
        return 3 * f + 2 * e + hole
    return 0


def traced_beside_scores_floats(shape: ModelShape) -> int:
    """Without flash attention, what is alive beside the first layer's f32 scores on gemma2
    (read from ggml-alloc's trace, Gemma-2-9B -fa off: 197.01 MiB logged): the embeddings,
    the layer input, the attention norm's hole and the query (``3 n_embd + 2 n_q``), and
    the f32 V-index pair of each of the two caches (``4 n_embd_v_gqa``); 0 elsewhere."""
    if shape.arch != "gemma2":
        return 0
    n_q = max(shape.n_head, default=0) * shape.head_k
    n_v = max(shape.n_head_kv, default=0) * shape.head_v
    return 3 * shape.n_embd + 2 * n_q + 4 * n_v


def shared_expert_floats(shape: ModelShape) -> int:
    """The shared expert runs after the routed ones (build_ffn on the normed FFN input,
    src/models/llama4.cpp, deepseek2.cpp): its up, gate and activation ``3 n_ff_shexp``
    beside five residual-wide tensors (the layer input, the FFN input and its norm, the
    attention output and the routed experts' sum). Its peak passes the routed one when few
    experts are used (Llama 4 Scout, one of 16: 98.12 MiB logged at -ub 512, 98.01
    estimated)."""
    return 3 * shape.n_ff_shexp + 5 * shape.n_embd


def nextn_moe_floats(shape: ModelShape) -> int:
    """The MTP graph's MoE peak (src/models/qwen35moe.cpp graph_mtp -> build_moe_ffn), read
    from ggml-alloc's trace on Qwen3.5-35B-A3B (65.02 MiB logged): the block's attention
    output and FFN norm, the router's probabilities and argsort (``n_expert`` each) and
    weights, the freed gate/up pair still holding their place below the activation, the
    activation and the per-expert down outputs (``[n_embd, n_used, ub]``). The masks are
    no longer alive there (:func:`compute_bytes` leaves them out for it)."""
    used = shape.n_expert_used
    return (
        2 * shape.n_embd
        + 3 * used * shape.n_ff_exp
        + used * shape.n_embd
        + 2 * shape.n_expert
        + used
    )


def _glm4moe_body_floats(shape: ModelShape, mtp: bool) -> int:
    """GLM-4.5 (src/models/glm4-moe.cpp: sigmoid router with ``exp_probs_b``, one ungated
    shared expert, a query 3x the residual width). Fitted on the real llama-server
    (0c1e57098, tests/fixtures/llamalog/arch/glm4moe-*.json) and four variants of the
    GLM-4.5-Air header at -c 4096 -np 1 (f32 values per token at the peak, after the
    masks): the published shape 87040 (174.01 MiB); 32 heads 82944 (166.01); 4 experts
    used 48128 (98.01); no shared expert 87040 (174.01: not at the peak). Per used expert
    ``2 n_embd + n_ff_exp + n_expert``, plus ``n_q / 2 + 3 n_embd / 4`` (the attention
    side; which tensors is not derived). The nextn (MTP) block: ``2 n_used n_embd`` plus
    the same attention term (150.01 MiB logged)."""
    n_q = (max(shape.n_head) if shape.n_head else 0) * shape.head_k
    attention = n_q // 2 + 3 * shape.n_embd // 4
    if mtp:
        return 2 * shape.n_expert_used * shape.n_embd + attention
    per_expert = 2 * shape.n_embd + shape.n_ff_exp + shape.n_expert
    moe = shape.n_expert_used * per_expert + attention
    dense = 3 * shape.n_ff + 4 * shape.n_embd  # the leading dense layer
    return max(dense, moe)


def delta_net_peak_bytes(
    shape: ModelShape, ub: int, mask_bytes: int, n_seqs: int, n_rs_seq: int
) -> int:
    """The high-water mark of the first gated-delta-net layer (src/models/delta-net-base.cpp
    ``build_conv_state`` and ``build_recurrent_attn``), read from ggml-alloc's own trace
    (``GGML_ALLOCATOR_DEBUG`` build of llama.cpp 0c1e57098 on Qwen3.5-27B).

    Before the layer: the token embeddings, the layer input and its norm (``3 x 4 ub
    n_embd``), the masks and the small inputs. The conv path then appends the gathered
    conv states ``cs = 4 (kernel-1) C n_seqs``, ``qkv_mixed`` ``Q = 4 ub C``, the conv input
    ``Q + cs`` and the conv output ``Q`` (``C`` conv channels): that end is ``B``. The
    delta net's output is ``G = 4 S_v H (ub + K S_v n_seqs)`` (ggml_gated_delta_net: the
    attention scores and ``K = 1 + n_rs_seq`` state snapshots per sequence when the
    model keeps them for draft rollback, else one). It goes into the hole the freed conv
    tensors left (``2 cs + 2 Q`` less the state, the l2-normed q and k and the gate/beta
    already there) when it fits, else after ``B``: the peak is ``B + G``.
    Measured: 27B np1 n_max 17 160.25 MiB (estimate 160.26), np2 n_max 8 160.49 (160.49),
    np4 n_max 3 152.96 (152.96); with n_max <= 4 at np1 G fits the hole (flat at B).
    With a narrow FFN (a variant with n_ff 2048) later layers' leftovers move the conv
    output up by up to 8 MiB at np >= 2 (up to +5 %): not modelled."""
    dn = shape.delta_net
    if dn is None:
        return 0
    c = dn.conv_channels
    cs = 4 * (dn.conv_kernel - 1) * c * n_seqs
    q = 4 * ub * c
    base = 3 * 4 * ub * shape.n_embd + mask_bytes + 20 * ub + 2 * cs + 3 * q
    if n_rs_seq <= 0 or not shape.rs_rollback:
        return base  # the one-snapshot delta net (build_delta_net) is not traced here
    s_v, heads = dn.head_v_dim, dn.n_v_heads
    out = 4 * s_v * heads * (ub + (1 + n_rs_seq) * s_v * n_seqs)
    state = 4 * s_v * s_v * heads * n_seqs
    hole = 2 * cs + 2 * q - state - 8 * ub * dn.key_dim - 12 * ub * heads
    return base + out if out > hole else base


def compute_bytes(
    shape: ModelShape,
    ctx: Context,
    flash_attn: bool,
    n_outputs: int,
    embeddings: bool = False,
    n_kv_swa: int = 0,
    kv_rotated: bool = False,
    mtp: bool = False,
    n_rs_seq: int = 0,
) -> int:
    """``embeddings`` is kept for callers; a decoder embedder still reserves its logits.
    ``n_kv_swa``: cells per stream of the SWA cache (0 without one). ``n_rs_seq``: the
    recurrent-state snapshots kept for draft rollback (MTP's n_max; 0 without)."""
    del embeddings
    ub = min(ctx.n_ubatch, ctx.n_ctx)
    n_kv = ub if shape.encoder_only else ctx.n_ctx_seq
    masks = (2 if flash_attn else 4) * ub * (n_kv + n_kv_swa)
    moe_nextn = mtp and bool(shape.n_expert) and shape.arch != "glm4moe"
    body = 4 * ub * ffn_body_floats(shape, kv_rotated, mtp) + (0 if moe_nextn else masks) + 20 * ub
    # A decoder embedder (--embedding --pooling last on qwen3) still builds and reserves
    # the output head; only encoder-only archs end without one (measured: Qwen3-Embedding
    # 302.24 MiB logged, 4 x 512 x 151669 logits + ...).
    vocab = 0 if shape.encoder_only else shape.n_vocab
    logits = 4 * min(n_outputs, ub) * vocab + 8 * ub * shape.n_embd
    recurrent = 0
    if not mtp:
        recurrent = delta_net_peak_bytes(shape, ub, masks, ctx.n_seq_max, n_rs_seq)
        recurrent = max(
            recurrent,
            mamba2_peak_bytes(shape, ub, min(ctx.n_seq_max, ub), masks, n_outputs, n_rs_seq),
        )
    if flash_attn:
        # MLA with flash attention: the replayed graph (attention and FFN) is the body
        mla = 0 if mtp else mla_flash_peak_bytes(shape, ub, masks, n_outputs)
        return max(mla or body, logits, recurrent)
    n_head = max(shape.n_head) if shape.n_head else 1
    scores = 4 * ub * n_kv * (n_head + 1) + 4 * ub * n_kv_swa
    if shape.is_mla:
        # the absorbed query [kv_lora + rope, n_head, ub], the f16 transposed copy of the
        # latent V [n_kv, kv_lora] (ggml_cont) and the latent KQV [kv_lora, ub, n_head]
        rope = shape.n_rot or (shape.head_k - shape.n_lora_kv)
        scores += 2 * n_kv * shape.n_lora_kv + 4 * ub * (
            n_head * (2 * shape.n_lora_kv + rope) + 5 * shape.n_embd
        )
    else:
        # what is alive beside the scores: residual-sized and query-sized tensors, fitted
        # on the tier (Qwen3-8B exact, Qwen3-30B-A3B exact, gpt-oss -0.2 %, Gemma-3 -3 %)
        n_q = n_head * shape.head_k
        if shape.arch in GATED_QUERY:
            # read from ggml-alloc's trace (Qwen3.5-27B, 270.01 MiB logged): three
            # residual-wide tensors, the f32 V-index pair (8 ub n_embd_v_gqa) and the
            # gated query: Qcur_full (2 n_q: query and gate) and the normed query
            n_v = max(shape.n_head_kv, default=0) * shape.head_v
            scores += 4 * ub * (3 * shape.n_embd + 2 * n_v + 3 * n_q)
        elif traced_beside_scores_floats(shape):
            scores += 4 * ub * traced_beside_scores_floats(shape)
        else:
            scores += 4 * ub * max(22 * shape.n_embd // 4, (7 * shape.n_embd) // 2 + 2 * n_q)
    return max(body, logits, scores, recurrent)


def output_bytes(shape: ModelShape, ctx: Context, embeddings: bool) -> int:
    """Host output buffer at start: ``(n_vocab [+ n_embd]) * n_seq_max * 4`` B; it grows at
    run time when a batch asks for more outputs (llama_context::output_reserve)."""
    width = shape.n_vocab + (shape.n_embd if embeddings else 0)
    return 4 * width * ctx.n_seq_max
