"""A model's shape, as llama.cpp derives it from GGUF metadata (estimation.md section 1b, 7).

Everything the KV / state / compute formulas need, per layer where llama.cpp allows
per-layer values (``head_count_kv`` arrays, SWA patterns, recurrent layers). Built from a
header by :func:`shape_from_header`; pure data afterwards, so formulas test without files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.estimate.repack import WeightTensor

# llama_model::create_memory returns nullptr for these (src/llama-model.cpp 2110-2126).
ENCODER_ONLY = frozenset(
    {
        "bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "eurobert",
        "modern-bert",
        "gemma-embedding",
        "wavtokenizer-dec",
        "dream",
        "llada",
        "llada-moe",
        "rnd1",
    }
)
# llm_arch_is_recurrent / llm_arch_is_hybrid (src/llama-arch.cpp 982-1018).
RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID = frozenset(
    {
        "jamba",
        "falcon-h1",
        "plamo2",
        "granitehybrid",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "qwen3next",
        "qwen35",
        "qwen35moe",
        "kimi-linear",
        "bailingmoe3",
        "kimi-k3",
        "deepseek4",
        "minimax-01",
    }
)
# SWA period when the GGUF has no sliding_window_pattern (src/models/*.cpp).
DEFAULT_SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "llama4": 4, "cohere2": 4}
DEFAULT_N_SWA = {"gemma2": 4096}
# Chunked attention (LLAMA_SWA_TYPE_CHUNKED): llama4.cpp load_arch_hparams sets n_swa = 8192
# on the chunked layers unless the GGUF says ``sliding_window = 0``; published Llama 4
# GGUFs carry no such key, so it applies. Its cache is sized like an SWA cache.
CHUNKED_N_SWA = {"llama4": 8192}
# MoE archs with one shared expert as wide as a routed one and no key for it
# (llama4.cpp load_arch_tensors: ``n_ff_shexp = n_ff_exp``).
SHEXP_AS_WIDE_AS_EXPERT = frozenset({"llama4"})
# Archs whose routed experts are ``n_ff`` wide (``{n_embd, n_ff, n_expert}``), with no
# expert_feed_forward_length key (src/models/granite-hybrid.cpp, llama.cpp, granite-moe.cpp
# load_arch_tensors).
EXPERTS_AS_WIDE_AS_N_FF = frozenset({"granitehybrid", "granite", "granitemoe", "llama"})
# Hybrids whose layers are recurrent only with no KV heads AND no FFN (nemotron-h.cpp:
# ``is_recr = n_head_kv(i) == 0 && n_ff(i) == 0``; the MLP-only layers are neither).
RECURRENT_NEEDS_NO_FFN = frozenset({"nemotron_h", "nemotron_h_moe"})
# Hybrids whose every layer has both attention and a Mamba mixer (falcon-h1.cpp fills
# is_recr with true; llama-model.cpp create_memory keeps K/V for every layer too).
PARALLEL_HYBRID = frozenset({"falcon-h1"})
# Archs whose nextn/MTP layers llama.cpp loads only for ``--spec-type draft-mtp``
# (``mtp_flags |= TENSOR_SKIP`` unless ``ml.load_mtp``, src/models/<arch>.cpp
# load_arch_tensors; load_mtp from common/common.cpp common_model_params_to_llama).
MTP_SKIPPED_UNLESS_ASKED = frozenset(
    {
        "bailingmoe3",
        "cohere2moe",
        "deepseek2",
        "deepseek32",
        "deepseek4",
        "glm-dsa",
        "glm4moe",
        "glm5-next",
        "hy-v3",
        "mimo2",
        "nemotron_h",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "step35",
    }
)
# llm_arch_supports_rs_rollback (src/llama-arch.cpp): only these keep recurrent-state
# snapshots for speculative rollback; llama_context clamps n_rs_seq to 0 for the others.
RS_ROLLBACK = frozenset(
    {
        "kimi-k3",
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "deepseek4",
        "glm5-next",
        "nemotron_h",
        "nemotron_h_moe",
        "lfm2",
        "lfm2moe",
        "bailingmoe3",
    }
)
# Archs whose recurrent layers are the gated delta net of src/models/delta-net-base.cpp
# with the qwen3next/qwen35 layout (one qkv_mixed projection through a short conv).
GATED_DELTA_NET = frozenset({"qwen3next", "qwen35", "qwen35moe"})
# Archs whose recurrent layers are build_mamba2_layer (src/models/mamba-base.cpp) and
# whose compute peak monitor/estimate/replay.py replays.
MAMBA2 = frozenset({"nemotron_h"})
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True, slots=True)
class DeltaNetDims:
    """The gated-delta-net layer's sizes (``ssm.*`` keys; llama_hparams ssm_*)."""

    conv_kernel: int  # ssm.conv_kernel
    d_inner: int  # ssm.inner_size = value heads x head_v_dim
    d_state: int  # ssm.state_size = head_k_dim
    n_group: int  # ssm.group_count = key heads
    n_v_heads: int  # ssm.time_step_rank = value heads

    @property
    def conv_channels(self) -> int:
        return self.d_inner + 2 * self.n_group * self.d_state

    @property
    def key_dim(self) -> int:
        return self.n_group * self.d_state

    @property
    def head_v_dim(self) -> int:
        return self.d_inner // max(1, self.n_v_heads)


def delta_net_dims(
    arch: str, get: Any, archs: frozenset[str] = GATED_DELTA_NET
) -> DeltaNetDims | None:
    """The ``ssm.*`` sizes of a gated delta net, or with ``archs`` = MAMBA2 of a Mamba2
    layer (the same keys: d_inner, d_state, n_group, n_head = time_step_rank)."""
    if arch not in archs:
        return None
    dims = DeltaNetDims(
        conv_kernel=_first_int(get("ssm.conv_kernel")),
        d_inner=_first_int(get("ssm.inner_size")),
        d_state=_first_int(get("ssm.state_size")),
        n_group=_first_int(get("ssm.group_count")),
        n_v_heads=_first_int(get("ssm.time_step_rank")),
    )
    if min(dims.conv_kernel, dims.d_inner, dims.d_state, dims.n_group, dims.n_v_heads) <= 0:
        return None
    return dims


@dataclass(frozen=True, slots=True)
class ModelShape:
    arch: str
    n_layer: int  # block_count, including MTP/nextn layers
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_head: tuple[int, ...]  # per layer
    n_head_kv: tuple[int, ...]  # per layer; 0 = no attention (recurrent) in hybrid archs
    head_k: int  # key_length (default n_embd / n_head)
    head_v: int
    head_k_swa: int | None = None
    head_v_swa: int | None = None
    n_ff: int = 0  # feed_forward_length (max over layers)
    is_mla: bool = False  # key_length_mla and value_length_mla present: K only is stored
    swa: tuple[bool, ...] = ()  # per layer; empty = no SWA
    n_swa: int = 0  # sliding_window
    recurrent: tuple[bool, ...] = ()  # per layer
    n_embd_r: int = 0  # f32 per recurrent layer per sequence
    n_embd_s: int = 0
    delta_net: DeltaNetDims | None = None  # gated-delta-net sizes (qwen3next, qwen35)
    mamba2: DeltaNetDims | None = None  # Mamba2 layer sizes (nemotron_h)
    rs_rollback: bool = False  # keeps per-token state snapshots for draft rollback
    encoder_only: bool = False
    n_layer_kv_from_start: int | None = None  # shared-KV layers: only the first N have KV
    n_nextn: int = 0  # nextn_predict_layers (MTP), counted in n_layer
    mtp_optional: bool = False  # the nextn layers load only for --spec-type draft-mtp
    n_expert: int = 0  # expert_count (0: dense)
    n_expert_used: int = 0
    n_ff_exp: int = 0  # expert_feed_forward_length
    n_ff_shexp: int = 0  # shared-expert FFN width (0: none)
    n_layer_dense_lead: int = 0  # leading dense layers of a MoE model (deepseek2)
    expert_bias: bool = False  # ffn_*_exps.bias tensors (gpt-oss): add_id adds copies
    n_lora_kv: int = 0  # MLA kv_lora_rank
    n_lora_q: int = 0  # MLA q_lora_rank (0: one query projection, DeepSeek-V2-Lite)
    head_k_mla: int = 0  # MLA key_length_mla (qk_nope + qk_rope)
    head_v_mla: int = 0  # MLA value_length_mla
    n_rot: int = 0  # rope.dimension_count (0: head_k)
    layer_bytes: tuple[int, ...] = ()  # weight bytes per blk.N
    expert_bytes: tuple[int, ...] = ()  # of which ffn_*_exps tensors, per layer
    token_embd_bytes: int = 0
    output_bytes: int = 0  # output.weight + output_norm (0 if tied to token_embd)
    other_bytes: int = 0  # everything else (rope freqs, ...)
    tensor_bytes: int = 0
    layer_tensors: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    # every tensor with its type and dims: which buffer type llama.cpp's CPU backend gives it
    weight_tensors: tuple[WeightTensor, ...] = ()
    # the ``{arch}.*`` key suffixes the file has (which sizes llama.cpp had to default)
    arch_keys: frozenset[str] = frozenset()

    @property
    def tied_output(self) -> bool:
        """No output.weight: a decoder's LM head is token_embd loaded a second time
        (``TENSOR_DUPLICATED``, src/models/<arch>.cpp); encoders have no head at all."""
        if self.encoder_only or not self.weight_tensors:
            return False
        names = {t.name for t in self.weight_tensors}
        return "token_embd.weight" in names and "output.weight" not in names

    def has_kv(self, il: int) -> bool:
        """llama.cpp allocates K/V for this layer of the target context."""
        if self.encoder_only or il >= self.n_layer - self.n_nextn:
            return False
        if self.recurrent and self.recurrent[il] and self.arch not in PARALLEL_HYBRID:
            return False
        if self.n_layer_kv_from_start is not None and il >= self.n_layer_kv_from_start:
            return False
        return self.n_head_kv[il] > 0

    def is_swa(self, il: int) -> bool:
        return bool(self.swa) and self.swa[il]

    def k_width(self, il: int) -> int:
        head = self.head_k_swa if self.is_swa(il) and self.head_k_swa else self.head_k
        return head * self.n_head_kv[il]

    def v_width(self, il: int) -> int:
        head = self.head_v_swa if self.is_swa(il) and self.head_v_swa else self.head_v
        return head * self.n_head_kv[il]

    @property
    def n_recurrent_layers(self) -> int:
        return sum(self.recurrent)


def _per_layer(value: Any, n_layer: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * n_layer
    if isinstance(value, (tuple, list)):
        items = [int(v) for v in value]
        return tuple(items[:n_layer] + [items[-1] if items else default] * (n_layer - len(items)))
    return (int(value),) * n_layer


def _first_int(value: Any) -> int:
    """A scalar key, or the largest item of a per-layer array; 0 when absent."""
    if isinstance(value, (tuple, list)):
        return max((int(v) for v in value), default=0)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _n_swa(arch: str, key: Any) -> int:
    """The window (or chunk) of the SWA layers: the GGUF's ``sliding_window``, the arch's
    default without one; chunked attention keeps its fixed chunk unless the key is 0."""
    if arch in CHUNKED_N_SWA:
        return 0 if key is not None and int(key) == 0 else CHUNKED_N_SWA[arch]
    return int(key if key is not None else DEFAULT_N_SWA.get(arch, 0)) if key != 0 else 0


def swa_layers(arch: str, n_layer: int, pattern: Any, n_swa: int) -> tuple[bool, ...]:
    """``is_swa(il) = il % P < P - 1`` for a period P, or a per-layer bool array
    (llama_hparams::set_swa_pattern); gemma3 only when sliding_window > 0."""
    if n_swa <= 0:
        return ()
    if isinstance(pattern, (tuple, list)):
        flags = [bool(v) for v in pattern][:n_layer]
        return tuple(flags + [False] * (n_layer - len(flags)))
    period = int(pattern) if pattern else DEFAULT_SWA_PERIOD.get(arch, 0)
    if period <= 1:
        return ()
    return tuple(il % period < period - 1 for il in range(n_layer))


def recurrent_state(arch: str, get: Any, n_embd: int) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) floats per recurrent layer per sequence (llama_hparams)."""
    if arch.startswith("rwkv") or arch == "arwkv7":
        shift = int(get("token_shift_count", 2))
        return shift * n_embd, n_embd * int(get("wkv.head_size", 64))
    if arch.startswith("lfm2"):
        return n_embd * (int(get("shortconv.l_cache", 3)) - 1), 0
    conv = int(get("ssm.conv_kernel", 0) or 0)
    inner = int(get("ssm.inner_size", 0) or 0)
    state = int(get("ssm.state_size", 0) or 0)
    groups = int(get("ssm.group_count", 0) or 0)
    if conv and inner:
        return (conv - 1) * (inner + 2 * groups * state), state * inner
    return 0, 0


def recurrent_layers(
    arch: str, get: Any, n_layer: int, n_head_kv: Sequence[int], n_nextn: int = 0
) -> tuple[bool, ...]:
    """Per layer: recurrent or not. The nextn/MTP layers are attention layers
    (``is_recr(i) = i < n_layer() && (i + 1) % interval != 0``, src/models/qwen35.cpp)."""
    if arch in RECURRENT or arch in PARALLEL_HYBRID:
        return (True,) * n_layer
    if arch not in HYBRID:
        return ()
    flags = get("attention.recurrent_layers")
    if isinstance(flags, (tuple, list)):
        return tuple(bool(v) for v in flags[:n_layer])
    interval = get("full_attention_interval") or (
        4 if arch in ("qwen3next", "qwen35", "qwen35moe") else None
    )  # their default
    if interval:
        return tuple(
            (il + 1) % int(interval) != 0 and il < n_layer - n_nextn for il in range(n_layer)
        )
    if arch in RECURRENT_NEEDS_NO_FFN:
        n_ff = _per_layer(get("feed_forward_length"), n_layer, 0)
        return tuple(h == 0 and f == 0 for h, f in zip(n_head_kv, n_ff, strict=True))
    return tuple(h == 0 for h in n_head_kv)  # lfm2 / jamba / granitehybrid: 0 KV heads


def shape_from_header(header: Any) -> ModelShape:
    """Build the shape from a ``monitor.gguf.reader.GgufHeader`` (duck-typed: ``arch_get``,
    ``architecture``, ``n_vocab``, ``tensors``)."""
    arch = header.architecture or "llama"

    def get(suffix: str, default: Any = None) -> Any:
        return header.arch_get(suffix, default)

    n_layer = int(get("block_count", 0))
    n_embd = int(get("embedding_length", 0))
    n_head = _per_layer(get("attention.head_count"), n_layer, 1)
    n_head_kv = _per_layer(get("attention.head_count_kv"), n_layer, n_head[0] if n_head else 1)
    head0 = max(n_head) if n_head else 1
    head_k = int(get("attention.key_length", n_embd // head0 if head0 else 0))
    head_v = int(get("attention.value_length", head_k))
    n_swa = _n_swa(arch, get("attention.sliding_window"))
    swa = swa_layers(arch, n_layer, get("attention.sliding_window_pattern"), n_swa)
    recurrent = recurrent_layers(
        arch, get, n_layer, n_head_kv, int(get("nextn_predict_layers", 0) or 0)
    )
    n_embd_r, n_embd_s = recurrent_state(arch, get, n_embd) if recurrent else (0, 0)
    shared = get("attention.shared_kv_layers")
    n_ff = get("feed_forward_length", 0)
    n_ff = max(n_ff) if isinstance(n_ff, (tuple, list)) and n_ff else int(n_ff or 0)
    n_expert = _first_int(get("expert_count"))
    n_ff_exp = _first_int(get("expert_feed_forward_length"))
    if n_expert and not n_ff_exp and arch in EXPERTS_AS_WIDE_AS_N_FF:
        n_ff_exp = n_ff
    elif n_expert and not n_ff_exp:
        n_ff_exp = n_ff // max(1, _first_int(get("expert_used_count")) or 1)
    n_ff_shexp = _first_int(get("expert_shared_feed_forward_length"))
    if n_expert and not n_ff_shexp:
        n_shexp = 1 if arch in SHEXP_AS_WIDE_AS_EXPERT else _first_int(get("expert_shared_count"))
        n_ff_shexp = n_ff_exp * n_shexp
    tally = _tally(header.tensors, n_layer)
    return ModelShape(
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_vocab=int(header.n_vocab or get("vocab_size", 0) or 0),
        n_ctx_train=int(get("context_length", 0) or 0),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_k=head_k,
        head_v=head_v,
        head_k_swa=get("attention.key_length_swa"),
        head_v_swa=get("attention.value_length_swa"),
        n_ff=n_ff,
        is_mla=get("attention.key_length_mla") is not None
        and get("attention.value_length_mla") is not None,
        swa=swa,
        n_swa=n_swa if swa else 0,
        recurrent=recurrent,
        n_embd_r=n_embd_r,
        n_embd_s=n_embd_s,
        delta_net=delta_net_dims(arch, get) if recurrent else None,
        mamba2=delta_net_dims(arch, get, MAMBA2) if recurrent else None,
        rs_rollback=arch in RS_ROLLBACK,
        encoder_only=arch in ENCODER_ONLY,
        n_layer_kv_from_start=(n_layer - int(shared))
        if shared
        else (20 if arch == "gemma3n" else None),
        n_nextn=int(get("nextn_predict_layers", 0) or 0),
        mtp_optional=arch in MTP_SKIPPED_UNLESS_ASKED,
        n_expert=n_expert,
        n_expert_used=_first_int(get("expert_used_count")),
        n_ff_exp=n_ff_exp,
        n_ff_shexp=n_ff_shexp,
        n_layer_dense_lead=_first_int(get("leading_dense_block_count")),
        expert_bias=tally.expert_bias,
        n_lora_kv=_first_int(get("attention.kv_lora_rank")),
        n_lora_q=_first_int(get("attention.q_lora_rank")),
        head_k_mla=_first_int(get("attention.key_length_mla")),
        head_v_mla=_first_int(get("attention.value_length_mla")),
        n_rot=_first_int(get("rope.dimension_count")),
        layer_bytes=tuple(tally.layer_bytes),
        expert_bytes=tuple(tally.expert_bytes),
        token_embd_bytes=tally.token_embd,
        output_bytes=tally.output,
        other_bytes=tally.other,
        tensor_bytes=header.tensor_bytes,
        layer_tensors={k: tuple(v) for k, v in tally.layer_tensors.items()},
        weight_tensors=_weight_tensors(header.tensors),
        arch_keys=_arch_keys(arch, getattr(header, "metadata", {})),
    )


@dataclass
class _Tally:
    """The file's tensor bytes by where llama.cpp puts them (per layer, experts, head)."""

    layer_bytes: list[int]
    expert_bytes: list[int]
    layer_tensors: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    token_embd: int = 0
    output: int = 0
    other: int = 0
    expert_bias: bool = False


def _tally(tensors: Sequence[Any], n_layer: int) -> _Tally:
    out = _Tally([0] * n_layer, [0] * n_layer)
    for t in tensors:
        if "_exps.bias" in t.name:
            out.expert_bias = True
        m = _LAYER.match(t.name)
        if m and int(m.group(1)) < n_layer:
            il = int(m.group(1))
            out.layer_bytes[il] += t.n_bytes
            if "_exps" in t.name:
                out.expert_bytes[il] += t.n_bytes
            out.layer_tensors.setdefault(il, []).append((t.name, t.n_bytes))
        elif t.name.startswith("token_embd"):
            out.token_embd += t.n_bytes
        elif t.name.startswith("output"):
            out.output += t.n_bytes
        else:
            out.other += t.n_bytes
    return out


def _arch_keys(arch: str, metadata: Any) -> frozenset[str]:
    prefix = arch + "."
    return frozenset(k[len(prefix) :] for k in metadata if k.startswith(prefix))


def _weight_tensors(tensors: Sequence[Any]) -> tuple[WeightTensor, ...]:
    """Each tensor of the file with its type and dims (which buffer type it goes to)."""
    return tuple(
        WeightTensor(
            t.name,
            _type_name(getattr(t, "ggml_type", None)),
            tuple(getattr(t, "shape", ())),
            t.n_bytes,
        )
        for t in tensors
    )


def _type_name(ggml_type: int | None) -> str:
    """gguf's name of a ggml type ("Q8_0"), or "TYPE_<n>" for one it does not know."""
    from monitor.gguf.ggml_types import GGMLQuantizationType  # not `gguf`: numpy, yaml

    if ggml_type is None:
        return "unknown"
    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"TYPE_{ggml_type}"
