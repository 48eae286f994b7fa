"""llama.cpp / llama-server (and ollama's llama-server child): the estimation.md section 8 recipe.

Each component records the formula that produced it. Defaults are llama-server's
(``common/common.h``): ``-np`` auto = 4 unified slots, an explicit ``-np`` = split streams
unless ``-kvu``; ``-b 2048 -ub 512``; ``-fa auto`` (on where supported: the estimate takes
on, and says so); ``--cache-ram 8192`` MiB and 32 checkpoints per slot in host RAM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from monitor.estimate import compute, kv
from monitor.estimate.certainty import approximations
from monitor.estimate.model import HOST, Component, DeviceInfo, MemoryEstimate, Residency
from monitor.estimate.placement import Placement, place
from monitor.estimate.repack import CpuFeatures, WeightTensor, extra_buffer
from monitor.estimate.shape import ModelShape, shape_from_header
from monitor.servers.spec import LaunchSpec
from monitor.units import GIB, MIB
from monitor.units import mib as _mib

FIT_TARGET_MIB = 1024
MTP_LIKE = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})


def _whole(read_header: Callable[[str], Any], path: str) -> Any:
    """The header of a model whose tensor data is all there: llama.cpp refuses a truncated
    file, so it has no estimate (GgufError naming the file and both sizes)."""
    header = read_header(path)
    problem = getattr(header, "truncated", None)
    if problem:
        from monitor.gguf.reader import GgufError

        raise GgufError(path, problem)
    return header


def _host_residency(spec: LaunchSpec) -> Residency:
    """mmap (the default, and mmap+mlock) leaves CPU weights in the page cache; -lm none,
    mlock (without mmap) and dio read them into anonymous memory."""
    return "anon" if spec.load_mode in ("none", "dio", "mlock") else "file"


def _context(
    spec: LaunchSpec, shape: ModelShape, notes: list[str], devices: Sequence[DeviceInfo] = ()
) -> kv.Context:
    n_seq_max = spec.n_parallel if spec.n_parallel and spec.n_parallel > 0 else kv.DEFAULT_SLOTS
    unified = (
        spec.kv_unified
        if spec.kv_unified is not None
        else (spec.n_parallel is None or spec.n_parallel <= 0)
    )
    n_ubatch = spec.n_ubatch or 512
    n_batch = spec.n_batch or 2048
    if spec.embedding:
        n_batch = n_ubatch  # tools/server/server.cpp: embeddings force n_batch = n_ubatch
    n_ctx = spec.ctx_size
    if not n_ctx:
        streams = 1 if unified else n_seq_max
        fit_on = spec.fit is not False and spec.ctx_size is None
        n_ctx = shape.n_ctx_train * (streams if fit_on else 1)
        if n_ctx <= 0:
            n_ctx = 4096
            notes.append("the model does not say its training context; assumed 4096")
        elif fit_on:
            margin = (spec.fit_target_mib or (FIT_TARGET_MIB,))[0]
            notes.append(
                f"no -c: llama-server's fit starts from n_ctx_train x streams = {n_ctx} cells "
                f"and shrinks it only to leave {margin} MiB free per device, so it takes "
                "memory up to free minus that margin; the figures below are that maximum"
            )
            for dev in devices:
                if dev.free_bytes is not None:
                    take = max(0, dev.free_bytes - margin * MIB)
                    notes.append(
                        f"on {dev.device_id}, with {dev.free_bytes / GIB:.1f} GiB free "
                        f"now, that is up to {take / GIB:.1f} GiB"
                    )
        else:
            notes.append(f"-c {spec.ctx_size}: the full training context ({n_ctx}) is used")
    return kv.context(n_ctx, n_seq_max, unified, n_ubatch, n_batch)


def _kv_components(
    shape: ModelShape,
    spec: LaunchSpec,
    ctx: kv.Context,
    flash: bool,
    placement: Placement,
    prefix: str,
    type_k: str,
    type_v: str,
) -> list[Component]:
    """KV per device: each layer's K/V lives with its weights, or on the host with -nkvo."""
    per_device: dict[str, list[int]] = {}
    for il in kv.kv_layers(shape):
        dev = HOST if spec.no_kv_offload else placement.layer_device[il]
        per_device.setdefault(dev, []).append(il)
    out = []
    for dev, layers in sorted(per_device.items()):
        size = kv.kv_size(shape, ctx, type_k, type_v, flash, spec.swa_full, layers)
        residency: Residency = "anon" if dev == HOST else "device"
        if size.full_bytes:
            out.append(
                Component(
                    f"{prefix}kv",
                    dev,
                    size.full_bytes,
                    f"{size.full_layers} layers x {size.full_cells} cells "
                    f"({ctx.n_ctx_seq} per stream x {ctx.n_stream}) x K {type_k}"
                    + ("" if shape.is_mla else f" + V {type_v}")
                    + (" (MLA: K only)" if shape.is_mla else "")
                    + " [llama-kv-cache.cpp]",
                    residency,
                )
            )
        if size.swa_bytes:
            out.append(
                Component(
                    f"{prefix}kv_swa",
                    dev,
                    size.swa_bytes,
                    f"{size.swa_layers} SWA layers x {size.swa_cells} cells = pad256(min(n_ctx_seq,"
                    f" n_swa {shape.n_swa} x {ctx.n_seq_max if ctx.kv_unified else 1} + ub "
                    f"{ctx.n_ubatch})) x {ctx.n_stream} streams"
                    + (" (--swa-full: n_ctx_seq)" if spec.swa_full else "")
                    + " [llama-kv-cache-iswa.cpp]",
                    residency,
                )
            )
    return out


def _weights_components(
    placement: Placement,
    spec: LaunchSpec,
    prefix: str,
    extra: dict[str, tuple[int, int]] | None = None,
) -> list[Component]:
    """Weights per device; ``extra``: the host weights llama.cpp's CPU backend copies into
    its AMX / CPU_REPACK buffers (buffer -> (bytes, of the file's bytes)), anonymous."""
    out = []
    for dev, size in sorted(placement.weights.items()):
        if size <= 0:
            continue
        residency: Residency = _host_residency(spec) if dev == HOST else "device"
        how = (
            f"tensor bytes of the layers on {dev}; -ngl -> {placement.n_gpu_layers} "
            "(output counts as one, token_embd stays on the CPU)"
        )
        buffer = None
        if dev == HOST and extra:
            size -= sum(file_bytes for _, file_bytes in extra.values())
            how = "the host weights llama.cpp keeps in its plain CPU buffer"
            buffer = "CPU"
        if dev == HOST and residency == "file":
            how += "; mmap'd: page cache (RssFile), not anonymous memory"
        if size > 0:
            out.append(Component(f"{prefix}weights", dev, size, how, residency, buffer=buffer))
    for name, (size, _) in sorted((extra or {}).items()):
        out.append(
            Component(
                f"{prefix}weights",
                HOST,
                size,
                f"the host weights llama.cpp's CPU backend repacks for this CPU into its {name} "
                "buffer: allocated and copied at load whatever --mmap says, so anonymous memory "
                "that cannot be evicted (-nr keeps them mapped) [ggml-cpu extra buffer types, "
                "monitor/estimate/repack.py]",
                "anon",
                buffer=name,
            )
        )
    return out


def _extra_buffers(
    shape: ModelShape,
    placement: Placement,
    spec: LaunchSpec,
    cpu: CpuFeatures | None,
    has_gpu: bool,
) -> dict[str, tuple[int, int]] | None:
    """The host weights that go to the CPU backend's extra buffer types, by buffer type:
    (bytes allocated, bytes of the file they replace). None when none apply: -nr, an
    unknown CPU, or a GPU build whose pinned host buffer type comes first in
    make_cpu_buft_list (src/llama-model.cpp) unless --no-host."""
    if cpu is None or not spec.repack or (has_gpu and not spec.no_host):
        return None
    host = [t for t in shape.weight_tensors if t.name in placement.host_tensors]
    embd = next((t for t in shape.weight_tensors if t.name == "token_embd.weight"), None)
    out: dict[str, tuple[int, int]] = {}
    for t in host:
        hit = extra_buffer(t, cpu)
        if hit:
            size, file_bytes = out.get(hit[0], (0, 0))
            out[hit[0]] = (size + hit[1], file_bytes + t.n_bytes)
    if shape.tied_output and embd is not None and placement.output_device == HOST:
        # A tied output is token_embd loaded again as "output" (TENSOR_DUPLICATED) for a
        # MUL_MAT: in an extra buffer type that is a second, repacked copy.
        dup = WeightTensor("output.weight", embd.type_name, embd.dims, embd.n_bytes)
        hit = extra_buffer(dup, cpu)
        if hit:
            size, file_bytes = out.get(hit[0], (0, 0))
            out[hit[0]] = (size + hit[1], file_bytes)  # no file bytes leave the mapping
    return out or None


GLIBC_MMAP_THRESHOLD_MAX = 32 * MIB  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (malloc/malloc.c)


def _staging(
    shape: ModelShape, placement: Placement, spec: LaunchSpec, cpu: CpuFeatures | None
) -> list[Component]:
    """Without mmap, a weight bound for a buffer that is not host memory (AMX, CPU_REPACK)
    is read into a per-tensor staging vector first (load_all_data, src/llama-model-loader.cpp).
    glibc raises its mmap threshold to each freed block's size (up to 32 MiB), so the later
    ones come from the heap and up to one tensor's bytes stay resident after the load."""
    if cpu is None or _host_residency(spec) == "file":
        return []
    sizes = [
        t.n_bytes
        for t in shape.weight_tensors
        if t.name in placement.host_tensors and extra_buffer(t, cpu)
    ]
    if not sizes:
        return []
    size = min(max(sizes), GLIBC_MMAP_THRESHOLD_MAX)
    return [
        Component(
            "load_staging",
            HOST,
            size,
            f"the largest repacked tensor's staging copy ({_mib(max(sizes))}, at most glibc's "
            "32 MiB mmap threshold) that the heap keeps after a load without mmap "
            "[llama-model-loader.cpp load_all_data]",
            "anon",
        )
    ]


def _repack_notes(
    spec: LaunchSpec,
    cpu: CpuFeatures | None,
    extra: dict[str, tuple[int, int]] | None,
    has_gpu: bool,
) -> list[str]:
    """What the estimate assumed of the CPU backend's repacking, in a sentence."""
    if not spec.repack:
        return []
    if extra:
        moved = sum(file_bytes for _, file_bytes in extra.values())
        where = " + ".join(f"{name} {_mib(size)}" for name, (size, _) in sorted(extra.items()))
        return [
            f"this CPU ({cpu.describe() if cpu else '?'}): llama.cpp copies {_mib(moved)} of "
            f"the host weights into {where} of anonymous memory, which -nr would leave mapped"
        ]
    if cpu is None and not has_gpu:
        return [
            "the CPU's features are unknown: weights llama.cpp repacks for it (AMX, "
            "CPU_REPACK) would be anonymous, not page cache"
        ]
    return []


def _main_device(placement: Placement) -> str:
    devices = [d for d in placement.layer_device if d != HOST]
    return devices[-1] if devices else placement.output_device


def server_outputs(spec: LaunchSpec, ctx: kv.Context) -> int:
    """Logit rows llama-server reserves: ``min(n_batch, np x (1 + n_draft))``, or n_batch
    for embeddings (server_output_limits, tools/server/server-context.cpp)."""
    if spec.embedding or (spec.pooling not in (None, "none")):
        return ctx.n_batch
    return max(1, min(ctx.n_batch, ctx.n_seq_max * (1 + n_draft_max(spec))))


def n_draft_max(spec: LaunchSpec) -> int:
    """``common_speculative_n_max``: --spec-draft-n-max (default 3) when a draft-* type is
    enabled (common/speculative.cpp). ``-md`` alone loads the draft model and context but
    enables no type, so the target reserves no draft outputs (measured)."""
    types = [t for t in (spec.spec_type or "").split(",") if t]
    if not any(t.startswith("draft") for t in types):
        return 0
    return 3 if spec.spec_draft_n_max is None else max(0, spec.spec_draft_n_max)


def estimate_llamacpp(
    spec: LaunchSpec,
    devices: Sequence[DeviceInfo],
    read_header: Callable[[str], Any],
    outputs: str = "server",
    cpu: CpuFeatures | None = None,
) -> MemoryEstimate:
    """``outputs="server"``: what llama-server reserves; ``"batch"``: llama.cpp's library
    default (n_batch logit rows), which is what llama-fit-params measures. ``cpu``: the
    features of the CPU that runs the server (which weights it repacks); None: unknown."""
    if not spec.model_path:
        raise kv.EstimateError("no model path (-m) in the command line")
    notes: list[str] = []
    if spec.devices is not None and tuple(d.lower() for d in spec.devices) == ("none",):
        devices = ()  # -dev none: the CPU only
        notes.append("-dev none: everything stays in host memory")
    shape = shape_from_header(_whole(read_header, spec.model_path))
    flash = spec.flash_attn != "off"
    if spec.flash_attn == "auto":
        notes.append(
            "-fa auto: flash attention assumed on (llama.cpp turns it on where the "
            "backend supports it)"
        )
    if spec.cache_type_v not in ("f16", "bf16", "f32") and not flash:
        raise kv.EstimateError(
            f"-ctv {spec.cache_type_v} needs flash attention; -fa off is an error in llama.cpp"
        )
    ctx = _context(spec, shape, notes, devices)
    # --spec-type accumulates, comma-separated (draft-mtp,ngram-simple)
    spec_types = {t for t in (spec.spec_type or "").split(",") if t}
    mtp = "draft-mtp" in spec_types
    loaded = _loaded_layers(shape, mtp, notes)
    placement = place(
        loaded,
        devices,
        spec.n_gpu_layers,
        spec.tensor_split,
        spec.split_mode,
        spec.main_gpu,
        spec.override_tensor,
        spec.cpu_moe,
        spec.n_cpu_moe,
    )
    main = _main_device(placement)
    # common_params_speculative::need_n_rs_seq: draft.n_max when any type keeps rollback
    # snapshots; llama_context clamps it to 0 where the arch has none
    # (llm_arch_supports_rs_rollback)
    n_rs_seq = n_draft_max(spec) if spec_types & MTP_LIKE and shape.rs_rollback else 0
    parts: list[Component] = []
    extra = _extra_buffers(loaded, placement, spec, cpu, bool(devices))
    parts += _weights_components(placement, spec, "", extra)
    if extra:
        parts += _staging(loaded, placement, spec, cpu)
    notes += _repack_notes(spec, cpu, extra, bool(devices))
    if shape.encoder_only:
        notes.append(f"{shape.arch} is an encoder-only model: llama.cpp allocates no KV cache")
    parts += _kv_components(
        shape, spec, ctx, flash, placement, "", spec.cache_type_k, spec.cache_type_v
    )
    if shape.recurrent:
        rs = kv.recurrent_bytes(shape, ctx.n_seq_max, n_rs_seq)
        parts.append(
            Component(
                "rs",
                HOST if spec.no_kv_offload else main,
                rs,
                f"{shape.n_recurrent_layers} recurrent layers x 4 B x (r {shape.n_embd_r} + s "
                f"{shape.n_embd_s}) x {ctx.n_seq_max} seqs x (1 + {n_rs_seq}) "
                "[llama-memory-recurrent.cpp]",
                "anon" if main == HOST else "device",
            )
        )
    parts += _compute_and_outputs(spec, shape, ctx, flash, main, n_rs_seq, outputs)
    if mtp and shape.n_nextn:
        parts += _mtp_components(spec, shape, ctx, flash, main, n_rs_seq, notes)
    if spec.draft_model:
        parts += _draft(spec, devices, read_header, ctx, flash, notes, cpu)
    parts += _host_growth(spec, shape, ctx, flash)
    parts += _overheads(devices, parts)
    if placement.moved_to_host:
        notes.append(
            f"-ot/-cmoe/-ncmoe move {_mib(placement.moved_to_host)} of expert "
            "weights to the CPU; their layers' KV stays on the GPU"
        )
    return MemoryEstimate(
        engine=spec.engine,
        model_path=spec.model_path,
        components=tuple(parts),
        notes=tuple(notes),
        n_ctx=ctx.n_ctx,
        n_ctx_seq=ctx.n_ctx_seq,
        n_seq_max=ctx.n_seq_max,
        n_stream=ctx.n_stream,
        kv_unified=ctx.kv_unified,
        flash_attn=flash,
        devices=tuple(d.device_id for d in devices),
        host_sparse_bytes=shape.token_embd_bytes if _host_residency(spec) == "file" else 0,
        weights_locked=spec.load_mode == "mmap+mlock",
        approximate=approximations(shape, flash, spec.cache_type_k, main != HOST),
    )


def _compute_and_outputs(
    spec: LaunchSpec,
    shape: ModelShape,
    ctx: kv.Context,
    flash: bool,
    main: str,
    n_rs_seq: int,
    outputs: str,
) -> list[Component]:
    """The compute buffer (with the run-time work memory beside it on the CPU) and the
    output buffer, with what it grows to [llama_context::output_reserve]."""
    parts: list[Component] = []
    n_out = server_outputs(spec, ctx) if outputs == "server" else ctx.n_batch
    n_kv_swa = kv.swa_cells_per_stream(shape, ctx, spec.swa_full) if shape.swa else 0
    rotated = _kv_rotated(shape, spec.cache_type_k)
    comp = compute.compute_bytes(
        shape, ctx, flash, n_out, spec.embedding, n_kv_swa, rotated, n_rs_seq=n_rs_seq
    )
    per_token = compute.ffn_body_floats(shape, rotated)
    ffn = (
        f"MoE FFN 4 B x ub x {per_token} (2 n_used (n_ff_exp + n_embd)"
        + (" + 2 n_embd shared" if shape.n_ff_shexp else "")
        + ") [llama-graph.cpp build_moe_ffn]"
        if shape.n_expert
        else f"FFN 4 B x ub x {per_token} (3 n_ff + residuals) [llama-graph.cpp build_ffn]"
    )
    parts.append(
        Component(
            "compute",
            main,
            comp,
            f"max(body: {ffn} + f16 masks, logits 4 x "
            f"{min(n_out, ctx.n_ubatch)} outputs x n_vocab"
            + ("" if flash else ", FA-off scores 4 ub n_kv (n_head+1) [build_attn_mha]")
            + (
                ", the first delta-net layer's conv tensors and output"
                + (f" with {1 + n_rs_seq} state snapshots per seq" if n_rs_seq else "")
                + " [delta-net-base.cpp]"
                if shape.delta_net
                else ""
            )
            + f"), ub={min(ctx.n_ubatch, ctx.n_ctx)}, n_kv={ctx.n_ctx_seq}"
            + (f", n_kv_swa={n_kv_swa}" if n_kv_swa else "")
            + " [monitor/estimate/compute.py]",
            "anon" if main == HOST else "device",
        )
    )
    if main == HOST and shape.encoder_only:
        ub = min(ctx.n_ubatch, ctx.n_ctx)
        n_head = max(shape.n_head) if shape.n_head else 1
        parts.append(
            Component(
                "attn_scores",
                HOST,
                4 * ub * ub * n_head,
                f"encoder attention scores at run time, 4 B x ub {ub}^2 x n_head {n_head}: "
                "RssAnon of the CPU build grows by this with a full batch beyond the logged "
                "compute buffer (measured: +13.5 MiB for 500 tokens of a 12-head BERT)",
                "anon",
            )
        )
    if main == HOST and not flash and not shape.encoder_only:
        ub = min(ctx.n_ubatch, ctx.n_ctx)
        n_head = max(shape.n_head) if shape.n_head else 1
        parts.append(
            Component(
                "cpu_work",
                HOST,
                2 * ctx.n_ctx_seq * ub * n_head,
                f"CPU backend work buffer without flash attention: an f16 copy of one layer's "
                f"scores for KQ x V, n_kv {ctx.n_ctx_seq} x ub {ub} x n_head {n_head} x 2 B (not "
                "in llama.cpp's logs; measured on the CPU build)",
                "anon",
            )
        )
    parts.append(
        Component(
            "output",
            HOST,
            compute.output_bytes(shape, ctx, spec.embedding),
            f"(n_vocab{' + n_embd' if spec.embedding else ''}) x {ctx.n_seq_max} seqs x 4 B "
            "at start; grows with outputs per batch [llama_context::output_reserve]",
            "anon",
        )
    )
    if n_out > ctx.n_seq_max and outputs == "server":
        parts.append(
            Component(
                "output_growth",
                HOST,
                compute.output_bytes(shape, ctx, spec.embedding)
                // ctx.n_seq_max
                * (n_out - ctx.n_seq_max),
                f"the output buffer grows at run time up to n_outputs_max = {n_out} rows "
                "(np x (1 + --spec-draft-n-max) when drafting) [llama_context::output_reserve]",
                "anon",
                "grows",
            )
        )
    return parts


def _mtp_components(
    spec: LaunchSpec,
    shape: ModelShape,
    ctx: kv.Context,
    flash: bool,
    main: str,
    n_rs_seq: int,
    notes: list[str],
) -> list[Component]:
    """The MTP context of ``--spec-type draft-mtp``: its KV, compute and output buffers."""
    parts: list[Component] = []
    if shape.recurrent and n_rs_seq and shape.delta_net is None:
        notes.append(
            f"MTP on the hybrid {shape.arch}: the target graph's recurrent layers write "
            f"1 + {n_rs_seq} state snapshots per sequence; their compute peak is modelled "
            "for gated-delta-net models (qwen3next, qwen35) only, not in the compute "
            "figure above"
        )
    mtp_layers = kv.kv_layers(shape, mtp=True)
    size = kv.kv_size(shape, ctx, spec.cache_type_k, spec.cache_type_v, flash, False, mtp_layers)
    parts.append(
        Component(
            "mtp_kv",
            main,
            size.full_bytes + size.swa_bytes,
            f"{len(mtp_layers)} nextn layers x {size.full_cells} cells "
            "[common/speculative.cpp, ctx_type MTP]",
            "anon" if main == HOST else "device",
        )
    )
    # The MTP context (common_speculative_init_result, ctx_type MTP) reserves one
    # output per sequence (n_outputs_max = n_parallel) and its own graph: the nextn
    # block after eh_proj, then the output head.
    parts.append(
        Component(
            "mtp_compute",
            main,
            compute.compute_bytes(
                shape,
                ctx,
                flash,
                ctx.n_seq_max,
                mtp=True,
                kv_rotated=_kv_rotated(shape, spec.cache_type_k),
            ),
            "the MTP context's compute buffer: the nextn block's FFN, 4 ub (3 n_ff + 2 "
            "n_embd) (MoE: build_moe_ffn) + mask, or its logits [llama-graph.cpp]",
            "anon" if main == HOST else "device",
        )
    )
    parts.append(
        Component(
            "mtp_output",
            HOST,
            compute.output_bytes(shape, ctx, False),
            f"n_vocab x {ctx.n_seq_max} seqs x 4 B [llama_context::output_reserve]",
            "anon",
        )
    )
    return parts


def _overheads(devices: Sequence[DeviceInfo], parts: list[Component]) -> list[Component]:
    """The per-process driver context on each GPU the estimate places anything on."""
    out = []
    for dev in devices:
        if any(c.device == dev.device_id for c in parts) and dev.overhead_bytes:
            out.append(
                Component(
                    "overhead",
                    dev.device_id,
                    dev.overhead_bytes,
                    "per-process driver context (CUDA context, cuBLAS "
                    "workspace); configurable per device",
                    "device",
                )
            )
    return out


def _kv_rotated(shape: ModelShape, type_k: str) -> bool:
    """A quantized K cache with head size % 64 == 0 gets the Hadamard rotation
    (``attn_rot_k``, src/llama-kv-cache.cpp), which changes the graph's peak."""
    return type_k not in ("f16", "bf16", "f32") and shape.head_k % 64 == 0


def _loaded_layers(shape: ModelShape, mtp: bool, notes: list[str]) -> ModelShape:
    """The shape with the nextn/MTP layers' weights left out when llama.cpp skips them:
    without ``--spec-type draft-mtp`` ``load_mtp`` is false and those tensors get
    TENSOR_SKIP (src/models/<arch>.cpp load_arch_tensors)."""
    if not shape.n_nextn or not shape.mtp_optional or mtp:
        return shape
    first = shape.n_layer - shape.n_nextn
    skipped = sum(shape.layer_bytes[first:])
    notes.append(
        f"the file's {shape.n_nextn} MTP layer(s) ({_mib(skipped)}) are not loaded "
        "without --spec-type draft-mtp"
    )
    keep = range(first)
    return dataclasses.replace(
        shape,
        layer_bytes=tuple(b if il in keep else 0 for il, b in enumerate(shape.layer_bytes)),
        expert_bytes=tuple(b if il in keep else 0 for il, b in enumerate(shape.expert_bytes)),
        layer_tensors={il: t for il, t in shape.layer_tensors.items() if il in keep},
    )


def _draft(
    spec: LaunchSpec,
    devices: Sequence[DeviceInfo],
    read_header: Callable[[str], Any],
    target_ctx: kv.Context,
    flash: bool,
    notes: list[str],
    cpu: CpuFeatures | None = None,
) -> list[Component]:
    """The draft context copies the target's n_ctx (the same total cells), n_seq_max,
    kv_unified and ubatch; its KV is f16 unless -ctkd/-ctvd (common/speculative.cpp)."""
    assert spec.draft_model is not None
    shape = shape_from_header(_whole(read_header, spec.draft_model))
    ctx = kv.context(
        target_ctx.n_ctx,
        target_ctx.n_seq_max,
        target_ctx.kv_unified,
        target_ctx.n_ubatch,
        target_ctx.n_batch,
    )
    placement = place(shape, devices, spec.draft_n_gpu_layers)
    extra = _extra_buffers(shape, placement, spec, cpu, bool(devices))
    parts = _weights_components(placement, spec, "draft_", extra)
    parts += _kv_components(
        shape,
        spec,
        ctx,
        flash,
        placement,
        "draft_",
        spec.draft_cache_type_k,
        spec.draft_cache_type_v,
    )
    main = _main_device(placement)
    # The draft context reserves one output per sequence (common_base_params_to_speculative:
    # n_outputs_max = n_parallel), whatever the draft depth.
    n_kv_swa = kv.swa_cells_per_stream(shape, ctx, spec.swa_full) if shape.swa else 0
    parts.append(
        Component(
            "draft_compute",
            main,
            compute.compute_bytes(
                shape,
                ctx,
                flash,
                ctx.n_seq_max,
                False,
                n_kv_swa,
                _kv_rotated(shape, spec.draft_cache_type_k),
            ),
            "the draft's own compute buffer, same formula as the target's, "
            f"{ctx.n_seq_max} output(s) [common/speculative.cpp]",
            "anon" if main == HOST else "device",
        )
    )
    parts.append(
        Component(
            "draft_output",
            HOST,
            compute.output_bytes(shape, ctx, False),
            f"draft n_vocab x {ctx.n_seq_max} seqs x 4 B [llama_context::output_reserve]",
            "anon",
        )
    )
    if spec.draft_cache_type_k == "f16" and spec.cache_type_k != "f16":
        notes.append(
            f"the draft KV is f16 although the target's is {spec.cache_type_k}: "
            "-ctkd/-ctvd are not inherited from -ctk/-ctv"
        )
    return parts


def _host_growth(
    spec: LaunchSpec, shape: ModelShape, ctx: kv.Context, flash: bool
) -> list[Component]:
    """Host RAM that fills at run time: the prompt cache and context checkpoints."""
    parts = []
    cache_ram = 8192 if spec.cache_ram_mib is None else spec.cache_ram_mib
    if cache_ram > 0:
        parts.append(
            Component(
                "cache_ram",
                HOST,
                cache_ram * MIB,
                f"--cache-ram {cache_ram} MiB prompt cache, filled as prompts "
                "are cached (common.h default 8192)",
                "anon",
                "grows",
            )
        )
    if shape.swa or shape.recurrent:
        per_slot = 32 if spec.ctx_checkpoints is None else spec.ctx_checkpoints
        swa_stream = kv.swa_cells_per_stream(shape, ctx, spec.swa_full) if shape.swa else 0
        swa_cell = sum(
            kv.layer_bytes_per_cell(shape, il, spec.cache_type_k, spec.cache_type_v)
            for il in kv.kv_layers(shape)
            if shape.is_swa(il)
        )
        state = swa_stream * swa_cell + kv.recurrent_bytes(shape, 1)
        total = state * per_slot * ctx.n_seq_max
        if total:
            parts.append(
                Component(
                    "checkpoints",
                    HOST,
                    total,
                    f"-ctxcp {per_slot} per slot x {ctx.n_seq_max} slots x one sequence's SWA/"
                    "recurrent state (server-context.cpp create_checkpoint)",
                    "anon",
                    "grows",
                )
            )
    return parts
