"""Which weights llama.cpp's CPU backend copies into its "extra" buffer types, and their size.

llama.cpp (ggml/src/ggml-cpu, commit 0c1e57098) gives the CPU device extra buffer types, tried
in order before the plain CPU one for every weight kept in host memory
(``make_cpu_buft_list``, src/llama-model.cpp; ``select_weight_buft`` takes the first whose
``supports_op`` accepts the weight's op, src/llama-model-loader.cpp):

1. ``AMX`` (built when the compiler targets AMX-INT8 + AVX512-VNNI: a native build on such a
   CPU; amx/amx.cpp): a 2-D ``MUL_MAT`` weight of Q4_0, Q4_1, Q8_0 (ne0 % 32), Q4_K, Q5_K,
   Q6_K, IQ4_XS (ne0 % 256) or F16 (ne0 % 16) with ne1 % 32 == 0. Its size is
   ``ggml_backend_amx_get_alloc_size`` (amx/mmq.cpp): ne1 rows of ``get_row_size``, the
   blocks plus 4 B of s8s8 compensation per Q8_0 block, 4 B per Q4_K/Q5_K block and 2 B per
   IQ4_XS block (Q8_0: 38/34 = +11.8 %); other types keep ``ggml_nbytes``.
2. ``CPU_REPACK`` (repack.cpp ``ggml_repack_get_optimal_repack_type``; x86): a 2-D
   ``MUL_MAT`` or 3-D ``MUL_MAT_ID`` (MoE experts) weight with ne1 % 8 == 0 of Q4_0, Q4_K,
   IQ4_NL or MXFP4 on AVX2, Q2_K on AVX-512F; same bytes as the file (interleaved).

Both are allocated, not mapped (``is_host`` is null), so these weights are anonymous memory
whatever ``--mmap`` says: they cannot be evicted under memory pressure. ``-nr`` /
``--no-repack`` (``use_extra_bufts = false``) turns both off. Embeddings (``GET_ROWS``),
norms and biases never qualify.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

AMX = "AMX"
REPACK = "CPU_REPACK"

# LLM_TENSOR_INFOS (src/llama-arch.cpp): the tensors whose op is MUL_MAT / MUL_MAT_ID,
# by their GGUF name without "blk.N." and ".weight".
MUL_MAT_ID_NAMES = frozenset(
    {
        "ffn_down_chexps",
        "ffn_down_exps",
        "ffn_gate_chexps",
        "ffn_gate_exps",
        "ffn_gate_up_exps",
        "ffn_up_chexps",
        "ffn_up_exps",
    }
)
MUL_MAT_NAMES = frozenset(
    {
        "altup_correct_coef",
        "altup_predict_coef",
        "altup_proj",
        "altup_router",
        "altup_unembd_proj",
        "attn_compressor_gate",
        "attn_compressor_kv",
        "attn_conv_proj",
        "attn_gate",
        "attn_k",
        "attn_k_b",
        "attn_kv",
        "attn_kv_a_mqa",
        "attn_kv_b",
        "attn_output",
        "attn_output_a",
        "attn_output_b",
        "attn_q",
        "attn_q_a",
        "attn_q_b",
        "attn_qkv",
        "attn_v",
        "attn_v_b",
        "channel_mix_key",
        "channel_mix_receptance",
        "channel_mix_value",
        "cls",
        "cls.output",
        "conf_proj",
        "convnext.pw1",
        "convnext.pw2",
        "dec.attn_k",
        "dec.attn_o",
        "dec.attn_q",
        "dec.attn_v",
        "dec.cross_attn_k",
        "dec.cross_attn_o",
        "dec.cross_attn_q",
        "dec.cross_attn_v",
        "dec.ffn_down",
        "dec.ffn_gate",
        "dec.ffn_up",
        "dense_2",
        "dense_3",
        "enc.attn_k",
        "enc.attn_o",
        "enc.attn_q",
        "enc.attn_v",
        "enc.ffn_down",
        "enc.ffn_gate",
        "enc.ffn_up",
        "fc",
        "ffn_conv_proj",
        "ffn_down",
        "ffn_down_shexp",
        "ffn_gate",
        "ffn_gate_inp",
        "ffn_gate_inp_shexp",
        "ffn_gate_shexp",
        "ffn_latent_down",
        "ffn_latent_up",
        "ffn_routed_down",
        "ffn_routed_up",
        "ffn_up",
        "ffn_up_shexp",
        "hc_attn_down",
        "hc_attn_fn",
        "hc_attn_inject",
        "hc_attn_up",
        "hc_ffn_down",
        "hc_ffn_fn",
        "hc_ffn_inject",
        "hc_ffn_up",
        "indexer.attn_k",
        "indexer.attn_q_b",
        "indexer.k_proj",
        "indexer.proj",
        "indexer.q_proj",
        "indexer_compressor_gate",
        "indexer_compressor_kv",
        "inp_gate",
        "laurel_l",
        "laurel_r",
        "markov_w2",
        "nextn.eh_proj",
        "nextn.post_projection",
        "nextn.pre_projection",
        "nextn.shared_head_head",
        "output",
        "output_hc_down",
        "output_hc_fn",
        "output_hc_up",
        "per_layer_model_proj",
        "ple_key",
        "ple_value",
        "posnet.attn_k",
        "posnet.attn_output",
        "posnet.attn_q",
        "posnet.attn_v",
        "proj",
        "selector_hidden",
        "shortconv.in_proj",
        "shortconv.out_proj",
        "ssm_alpha",
        "ssm_ba",
        "ssm_beta",
        "ssm_dt",
        "ssm_f_a",
        "ssm_f_b",
        "ssm_g",
        "ssm_g_a",
        "ssm_g_b",
        "ssm_in",
        "ssm_out",
        "ssm_x",
        "time_mix_a1",
        "time_mix_a2",
        "time_mix_decay_w1",
        "time_mix_decay_w2",
        "time_mix_g1",
        "time_mix_g2",
        "time_mix_gate",
        "time_mix_key",
        "time_mix_output",
        "time_mix_receptance",
        "time_mix_v1",
        "time_mix_v2",
        "time_mix_value",
        "time_mix_w1",
        "time_mix_w2",
        "vis_attn_output",
        "vis_attn_qkv",
        "vis_down",
        "vis_gate",
        "vis_up",
    }
)

# amx/mmq.cpp get_row_size: bytes per block of the packed layout (block size in elements).
_AMX_BLOCKS: dict[str, tuple[int, int]] = {
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q8_0": (32, 34 + 4),
    "Q4_K": (256, 144 + 4),
    "Q5_K": (256, 176 + 4),
    "Q6_K": (256, 210),
    "IQ4_XS": (256, 136 + 2),
}
_AMX_ALIGN = {"Q4_0": 32, "Q4_1": 32, "Q8_0": 32, "F16": 16}  # ne0 % this; K-quants: 256
_REPACK_AVX2 = frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"})
_REPACK_AVX512 = frozenset({"Q2_K"})


@dataclass(frozen=True, slots=True)
class CpuFeatures:
    """The CPU features llama.cpp's CPU backend selects buffer types by (a native build on
    this CPU compiles exactly these in); from /proc/cpuinfo ``flags``."""

    avx2: bool = False
    avx512f: bool = False
    amx_int8: bool = False
    avx512_vnni: bool = False

    @property
    def amx(self) -> bool:
        return self.amx_int8 and self.avx512_vnni

    @property
    def names(self) -> tuple[str, ...]:
        """The features that change llama.cpp's memory, as /proc/cpuinfo names them."""
        have = (
            ("amx_int8", self.amx_int8),
            ("avx512_vnni", self.avx512_vnni),
            ("avx512f", self.avx512f),
            ("avx2", self.avx2),
        )
        return tuple(name for name, on in have if on)

    def describe(self) -> str:
        if self.amx:
            return "AMX (weights of Q4_0/Q4_1/Q8_0/K-quant/IQ4_XS/F16 matmuls) + CPU_REPACK"
        if self.avx512f:
            return "AVX-512 CPU_REPACK (Q4_0, Q4_K, IQ4_NL, MXFP4, Q2_K)"
        if self.avx2:
            return "AVX2 CPU_REPACK (Q4_0, Q4_K, IQ4_NL, MXFP4)"
        return "no repacked layouts (no AVX2)"


def features_from_flags(flags: Iterable[str]) -> CpuFeatures:
    have = set(flags)
    return CpuFeatures(
        avx2="avx2" in have,
        avx512f="avx512f" in have,
        amx_int8="amx_int8" in have,
        avx512_vnni="avx512_vnni" in have,
    )


def features_of(names: Iterable[str] | None) -> CpuFeatures | None:
    """A snapshot's ``cpu_features`` as :class:`CpuFeatures`; None (unknown) stays None."""
    return None if names is None else features_from_flags(names)


@dataclass(frozen=True, slots=True)
class WeightTensor:
    """One tensor of the file as the buffer choice needs it: ``dims`` ne0 first."""

    name: str
    type_name: str
    dims: tuple[int, ...]
    n_bytes: int


def tensor_op(name: str) -> str:
    """``MUL_MAT``, ``MUL_MAT_ID`` or ``OTHER`` for a weight name (LLM_TENSOR_INFOS)."""
    if not name.endswith(".weight"):
        return "OTHER"
    base = name[: -len(".weight")]
    if base.startswith("blk."):
        base = base.split(".", 2)[2] if base.count(".") >= 2 else base
    if base in MUL_MAT_ID_NAMES:
        return "MUL_MAT_ID"
    return "MUL_MAT" if base in MUL_MAT_NAMES else "OTHER"


def _n_dims(dims: tuple[int, ...]) -> int:
    """ggml_n_dims: the index of the last dimension above 1, plus one."""
    n = len(dims)
    while n > 1 and dims[n - 1] == 1:
        n -= 1
    return n


def _amx_bytes(t: WeightTensor) -> int | None:
    """The AMX buffer's size for ``t`` when AMX's supports_op takes it, else None."""
    if len(t.dims) < 2 or _n_dims(t.dims) != 2 or t.dims[1] % 32:
        return None
    ne0, ne1 = t.dims[0], t.dims[1]
    if t.type_name == "F16":
        return t.n_bytes if ne0 % 16 == 0 else None
    block = _AMX_BLOCKS.get(t.type_name)
    if block is None or ne0 % _AMX_ALIGN.get(t.type_name, 256):
        return None
    return ne1 * (ne0 // block[0]) * block[1]


def _repack_ok(t: WeightTensor, op: str, cpu: CpuFeatures) -> bool:
    want = 2 if op == "MUL_MAT" else 3
    if len(t.dims) < 2 or _n_dims(t.dims) != want or t.dims[1] % 8:
        return False
    return (cpu.avx2 and t.type_name in _REPACK_AVX2) or (
        cpu.avx512f and t.type_name in _REPACK_AVX512
    )


def extra_buffer(t: WeightTensor, cpu: CpuFeatures) -> tuple[str, int] | None:
    """(buffer type, bytes) when llama.cpp puts ``t`` in an extra buffer type, else None."""
    op = tensor_op(t.name)
    if op == "OTHER":
        return None
    if cpu.amx and op == "MUL_MAT":
        size = _amx_bytes(t)
        if size is not None:
            return AMX, size
    if _repack_ok(t, op, cpu):
        return REPACK, t.n_bytes
    return None


def split_host_weights(tensors: Iterable[WeightTensor], cpu: CpuFeatures) -> dict[str, int]:
    """Bytes per buffer type of the host weights: ``AMX``, ``CPU_REPACK`` and ``CPU``."""
    out: dict[str, int] = {}
    for t in tensors:
        name, size = extra_buffer(t, cpu) or ("CPU", t.n_bytes)
        out[name] = out.get(name, 0) + size
    return out
