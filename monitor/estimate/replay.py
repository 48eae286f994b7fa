"""Compute peaks replayed through ggml-alloc's rule: a Mamba2 hybrid (nemotron_h) and
DeepSeek's MLA attention with flash attention (deepseek2).

Where the peak of such a layer lands depends on the holes the layers before it left, so
it is not one sum of tensors: this module replays, in graph order, the allocations and
frees llama.cpp 0c1e57098 makes for the first layers of the reserve graph, with the
allocator's own placement rule (ggml-alloc.c ``ggml_dyn_tallocr_alloc``: the best-fitting
free block other than the tail, the last such on a tie, else the tail; a freed block merges
with its neighbours), and reports the high-water mark. The order of the events is the one
ggml-alloc's trace (``AT_PRINTF`` build, tests/realworld/alloc_peak.py) shows on
Nemotron-Nano-9B-v2 at -ub 512 and 2048, -np 1 and 4 (it does not change with them); the
sizes are those of the tensors of ``build_mamba2_layer`` (src/models/mamba-base.cpp) and
of nemotron-h.cpp's MLP layer, from the shape. Per Mamba2 layer, with ``C = d_inner +
2 n_group d_state`` conv channels and ``S`` sequences:

- the normed input ``4 ub n_embd``, then ``zxBCdt`` (the ``ssm_in`` projection, ``4 ub
  (2 d_inner + 2 n_group d_state + n_head)``);
- ``conv_x``, the gathered conv states concatenated with ``xBC`` (``4 C (ub + (d_conv-1)
  S)``), then the ``ssm_conv`` output ``4 ub C`` (bias and SiLU in place);
- ``dt`` made contiguous (``4 ub n_head``), then ``ssm_scan``'s output: ``y`` and the
  final states (``4 d_inner (ub + d_state S K)``, ``K`` snapshots with draft rollback);
- the next Mamba2 layer's gathered conv states (``4 (d_conv-1) C S``), ``z`` made
  contiguous (``4 ub d_inner``), ``y + x D``, the SwiGLU and the grouped RMS norm (``4 ub
  d_inner`` each), and ``ssm_out`` (``4 ub n_embd``) with the residual added in place.

An MLP layer: its norm, ``ffn_up`` (``4 ub n_ff``, squared ReLU in place) and
``ffn_down`` with the residual. The replay stops at the first attention layer: on the
model measured the peak is in a Mamba2 layer before it (layer 9 at -ub 512: 154.29 MiB
logged; layer 2 at -ub 2048: 655.46 MiB, where ``y`` fits the hole ``conv_x`` left and
``z``'s copy no longer does).

DeepSeek's MLA with flash attention (src/models/deepseek2.cpp, the absorbed path into
llm_graph_context::build_attn_mha with ``v_mla``): per layer, with ``H`` heads, ``L`` =
kv_lora_rank, ``R`` = the rope part and ``Q`` = q_lora_rank (no ``q_a`` when 0, V2-Lite),
the events are: the normed input; ``q_a`` (``4 ub Q``, freed once ``q_b`` ran); the query
``4 ub H (nope + R)``; the absorbed query ``q_nope_absorbed`` ``4 ub H L`` (``wk_b``) and
the roped ``q_pe`` ``4 ub H R``; their concatenation ``Qcur`` ``4 ub H (L + R)``; the
latent ``kv_cmpr_pe`` ``4 ub (L + R)``, its norm and ``Kcur``; flash attention's output
in the latent space ``4 ub H L``; ``wv_b``'s output ``4 ub H v_head`` and its contiguous
copy; ``wo`` (``4 ub n_embd``). Then the dense FFN of the leading layers: its norm, gate,
up and SwiGLU (``4 ub n_ff`` each) and down. The replay runs the leading dense layers and
the first MoE layer's attention (its MoE FFN is compute.py's body term). On DeepSeek-V3's
shape (128 heads) the peak is layer 1's ``Qcur``, above the holes layer 0's FFN left
(412.01 MiB logged at -ub 512, 1648.03 at -ub 2048); at 16 heads (V2-Lite) the MoE body
stays the larger.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitor.estimate.shape import DeltaNetDims, ModelShape

ALIGN_BYTES = 32  # the CPU buffer's alignment (ggml-cpu TENSOR_ALIGNMENT)


@dataclass
class _Arena:
    """ggml-alloc's dynamic allocator on one chunk (the tail block is unbounded)."""

    free: list[list[int]] = field(default_factory=lambda: [[0, 1 << 62]])
    at: dict[str, tuple[int, int]] = field(default_factory=dict)
    peak: int = 0

    def alloc(self, key: str, size: int) -> None:
        size = -(-size // ALIGN_BYTES) * ALIGN_BYTES
        if size <= 0:
            return
        best = len(self.free) - 1
        for i, (_, avail) in enumerate(self.free[:-1]):
            if avail >= size and (best == len(self.free) - 1 or avail <= self.free[best][1]):
                best = i
        off, avail = self.free[best]
        self.at[key] = (off, size)
        if avail == size:
            del self.free[best]
        else:
            self.free[best] = [off + size, avail - size]
        self.peak = max(self.peak, off + size)

    def release(self, key: str) -> None:
        if key not in self.at:
            return
        off, size = self.at.pop(key)
        blocks = sorted([*self.free, [off, size]])
        merged: list[list[int]] = []
        for b_off, b_size in blocks:
            if merged and merged[-1][0] + merged[-1][1] == b_off:
                merged[-1][1] += b_size
            else:
                merged.append([b_off, b_size])
        self.free = merged


def _mamba2_layer(a: _Arena, d: DeltaNetDims, e: int, ub: int, n_seqs: int, k: int) -> None:
    """One Mamba2 layer's events (``res`` is the residual, ``cs`` its conv states)."""
    c, inner, heads = d.conv_channels, d.d_inner, d.n_v_heads
    a.alloc("norm", 4 * ub * e)
    a.alloc("zxbcdt", 4 * ub * (2 * inner + 2 * d.n_group * d.d_state + heads))
    a.release("norm")
    a.alloc("conv_x", 4 * c * (ub + (d.conv_kernel - 1) * n_seqs))
    a.release("cs")
    a.alloc("xbc", 4 * ub * c)
    a.release("conv_x")
    a.alloc("dt", 4 * ub * heads)
    a.alloc("y", 4 * inner * (ub + d.d_state * n_seqs * k))
    a.release("dt")
    a.alloc("cs_next", 4 * (d.conv_kernel - 1) * c * n_seqs)
    a.alloc("z", 4 * ub * inner)
    a.release("zxbcdt")
    a.alloc("y_d", 4 * ub * inner)
    a.release("xbc")
    a.release("y")
    a.alloc("swiglu", 4 * ub * inner)
    a.release("z")
    a.release("y_d")
    a.alloc("y_norm", 4 * ub * inner)
    a.release("swiglu")
    a.alloc("out", 4 * ub * e)
    a.release("y_norm")
    a.release("res")
    a.at["res"] = a.at.pop("out")
    a.at["cs"] = a.at.pop("cs_next")


def _mlp_layer(a: _Arena, e: int, n_ff: int, ub: int) -> None:
    a.alloc("norm", 4 * ub * e)
    a.alloc("up", 4 * ub * n_ff)
    a.release("norm")
    a.alloc("out", 4 * ub * e)
    a.release("up")
    a.release("res")
    a.at["res"] = a.at.pop("out")


def _mla_attention(a: _Arena, s: ModelShape, ub: int) -> None:
    """One MLA layer's attention with flash attention; ``res`` becomes the FFN input."""
    heads, lora, e = max(s.n_head, default=0), s.n_lora_kv, s.n_embd
    rope = s.n_rot or (s.head_k_mla - lora if s.head_k_mla > lora else 64)
    nope = max(s.head_k_mla - rope, 0)
    a.alloc("norm", 4 * ub * e)
    if s.n_lora_q:
        a.alloc("q_a", 4 * ub * s.n_lora_q)
    a.alloc("q", 4 * ub * heads * (nope + rope))
    a.release("q_a")
    a.alloc("q_nope_absorbed", 4 * ub * heads * lora)
    a.alloc("q_pe", 4 * ub * heads * rope)
    a.release("q")
    a.alloc("qcur", 4 * ub * heads * (lora + rope))
    a.release("q_nope_absorbed")
    a.release("q_pe")
    a.alloc("kv_cmpr_pe", 4 * ub * (lora + rope))
    a.release("norm")
    a.alloc("kv_norm", 4 * ub * lora)
    a.alloc("k_pe", 4 * ub * rope)
    a.release("kv_cmpr_pe")
    a.alloc("kcur", 4 * ub * (lora + rope))
    for key in ("kv_norm", "k_pe", "kcur"):
        a.release(key)
    a.alloc("fattn", 4 * ub * heads * lora)
    a.release("qcur")
    a.alloc("v_b", 4 * ub * heads * s.head_v_mla)
    a.release("fattn")
    a.alloc("v_cont", 4 * ub * heads * s.head_v_mla)
    a.release("v_b")
    a.alloc("wo", 4 * ub * e)
    a.release("v_cont")
    a.release("res")
    a.at["res"] = a.at.pop("wo")


def _gated_ffn(a: _Arena, e: int, n_ff: int, ub: int) -> None:
    a.alloc("norm", 4 * ub * e)
    a.alloc("gate", 4 * ub * n_ff)
    a.alloc("up", 4 * ub * n_ff)
    a.release("norm")
    a.alloc("act", 4 * ub * n_ff)
    a.release("gate")
    a.release("up")
    a.alloc("out", 4 * ub * e)
    a.release("act")
    a.release("res")
    a.at["res"] = a.at.pop("out")


def _moe_ffn(a: _Arena, s: ModelShape, ub: int) -> None:
    """build_moe_ffn's events (router, experts, then the shared expert), the router's
    small tensors reduced to the logits, argsort and weights."""
    e, used, f = s.n_embd, s.n_expert_used, s.n_ff_exp
    a.alloc("norm", 4 * ub * e)
    a.alloc("logits", 4 * ub * s.n_expert)
    a.alloc("argsort", 4 * ub * s.n_expert)
    a.alloc("weights", 4 * ub * used)
    a.release("logits")
    a.alloc("gate", 4 * ub * used * f)
    a.alloc("up", 4 * ub * used * f)
    a.alloc("act", 4 * ub * used * f)
    a.release("gate")
    a.release("up")
    a.alloc("down", 4 * ub * used * e)
    for key in ("act", "argsort", "weights"):
        a.release(key)
    a.alloc("moe_out", 4 * ub * e)
    a.release("down")
    if s.n_ff_shexp:
        a.alloc("sh_gate", 4 * ub * s.n_ff_shexp)
        a.alloc("sh_up", 4 * ub * s.n_ff_shexp)
        a.release("norm")
        a.alloc("sh_act", 4 * ub * s.n_ff_shexp)
        a.release("sh_gate")
        a.release("sh_up")
        a.alloc("sh_out", 4 * ub * e)
        a.release("sh_act")
        a.release("sh_out")
    a.release("norm")
    a.release("res")
    a.at["res"] = a.at.pop("moe_out")


def mla_flash_peak_bytes(shape: ModelShape, ub: int, mask_bytes: int, n_outputs: int) -> int:
    """The high-water mark of the leading dense layers and the first MoE layer's attention
    of an MLA model with flash attention (0 for other models)."""
    if not shape.is_mla or not shape.n_lora_kv or not shape.head_v_mla:
        return 0
    e, a = shape.n_embd, _Arena()
    a.alloc("inp_tokens", 4 * ub)
    a.alloc("inp_embd", 4 * ub * e)
    a.alloc("inp_pos", 4 * ub)
    a.alloc("k_idxs", 8 * ub)
    a.alloc("kq_mask", mask_bytes)
    a.alloc("out_ids", 4 * n_outputs)
    a.alloc("res", 4 * ub * e)
    a.release("inp_tokens")
    for il in range(shape.n_layer - shape.n_nextn):
        _mla_attention(a, shape, ub)
        if il < shape.n_layer_dense_lead or not shape.n_expert:
            _gated_ffn(a, e, shape.n_ff, ub)
        else:
            _moe_ffn(a, shape, ub)
    return a.peak


def mamba2_dims(shape: ModelShape) -> DeltaNetDims | None:
    return shape.mamba2


def mamba2_peak_bytes(
    shape: ModelShape, ub: int, n_seqs: int, mask_bytes: int, n_outputs: int, n_rs_seq: int = 0
) -> int:
    """The high-water mark of the reserve graph up to its first attention layer (0 for
    other archs). ``n_seqs``: the sequences of the reserve ubatch (``n_seq_max``)."""
    d = mamba2_dims(shape)
    if d is None or not shape.recurrent:
        return 0
    e, a = shape.n_embd, _Arena()
    a.alloc("inp_tokens", 4 * ub)
    a.alloc("inp_embd", 4 * ub * e)
    a.alloc("rs_s_copy", 4 * n_seqs)
    a.alloc("k_idxs", 8 * ub)
    a.alloc("v_idxs", 8 * ub)
    a.alloc("kq_mask", mask_bytes)
    a.alloc("out_ids", 4 * n_outputs)
    a.alloc("res", 4 * ub * e)  # the layer input "embd"
    a.release("inp_tokens")
    a.alloc("cs", 4 * (d.conv_kernel - 1) * d.conv_channels * n_seqs)
    k = n_rs_seq + 1 if n_rs_seq > 0 else 1
    for il in range(shape.n_layer - shape.n_nextn):
        if shape.has_kv(il):
            break
        if shape.recurrent[il]:
            _mamba2_layer(a, d, e, ub, n_seqs, k)
        else:
            _mlp_layer(a, e, shape.n_ff, ub)
    return a.peak
