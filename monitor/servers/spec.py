"""The typed launch spec: what a server was asked to do, from its argv (+ LLAMA_ARG_* env).

Field meanings and defaults follow llama.cpp's ``common/arg.cpp`` / ``common/common.h`` as
summarised in ../shared/research/estimation.md section 1f-1g. ``None`` means "not given":
the estimator applies the engine's default, because several defaults depend on other
flags (``-np`` unset -> 4 unified slots; ``-c`` unset -> n_ctx_train, or fit's choice).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, replace

from monitor.servers.capabilities import MODEL_PATH_IS_FILE


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    engine: str  # "llama.cpp", "ollama", "llama-swap", "vllm", "sglang", "torch", ...
    # "server", "proxy" (llama-swap), "worker" (vLLM EngineCore/Worker), "router" (a
    # llama-server in router mode: no model of its own, it spawns one child per model)
    role: str = "server"
    model_path: str | None = None  # -m / --model (the first split for split GGUFs)
    model_name: str | None = None  # vLLM/SGLang model id, ollama blob digest, -a alias
    # context and slots
    ctx_size: int | None = None  # -c; 0 = "full n_ctx_train, never reduced by fit"
    n_parallel: int | None = None  # -np; None = auto (4 slots, unified KV)
    kv_unified: bool | None = None  # -kvu / -no-kvu; None = default for the -np given
    # KV cache
    cache_type_k: str = "f16"  # -ctk
    cache_type_v: str = "f16"  # -ctv
    no_kv_offload: bool = False  # -nkvo
    repack: bool = True  # -nr / --no-repack: False (no AMX / CPU_REPACK weight buffers)
    no_host: bool = False  # --no-host: no GPU pinned host buffer, CPU extra buffers instead
    swa_full: bool = False  # --swa-full
    flash_attn: str = "auto"  # -fa on|off|auto
    # batches
    n_batch: int | None = None  # -b (default 2048)
    n_ubatch: int | None = None  # -ub (default 512)
    # placement
    n_gpu_layers: int | str | None = None  # -ngl N | "auto" | "all"; None = default (all, fit)
    tensor_split: tuple[float, ...] | None = None  # -ts 3,1
    split_mode: str | None = None  # -sm layer|row|none|tensor
    main_gpu: int | None = None  # -mg
    override_tensor: tuple[str, ...] = ()  # -ot "regex=BUFT" (each occurrence, comma parts split)
    cpu_moe: bool = False  # -cmoe
    n_cpu_moe: int | None = None  # -ncmoe N
    # speculative decoding
    draft_model: str | None = None  # -md / --model-draft / --spec-draft-model
    draft_n_gpu_layers: int | str | None = None  # -ngld
    draft_cache_type_k: str = "f16"  # -ctkd (NOT inherited from -ctk)
    draft_cache_type_v: str = "f16"  # -ctvd
    spec_type: str | None = None  # --spec-type
    spec_draft_n_max: int | None = None  # --spec-draft-n-max (default 3)
    # extras
    mmproj: str | None = None  # --mmproj
    mmproj_offload: bool = True  # --no-mmproj-offload -> False
    lora: tuple[str, ...] = ()  # --lora (each)
    load_mode: str | None = None  # -lm; --no-mmap -> "none", --mlock -> "mmap+mlock"
    cache_ram_mib: int | None = None  # --cache-ram (default 8192 MiB; -1 unlimited, 0 off)
    ctx_checkpoints: int | None = None  # -ctxcp (default 32 per slot)
    fit: bool | None = None  # -fit on|off (default on)
    fit_target_mib: tuple[int, ...] | None = None  # -fitt (default 1024 per device)
    fit_ctx: int | None = None  # -fitc (default 4096)
    embedding: bool = False  # --embedding / --embeddings
    pooling: str | None = None  # --pooling
    host: str | None = None  # --host
    port: int | None = None  # --port
    # llama-server router mode (common/arg.cpp --models-*; common.h models_max default 4)
    models_dir: str | None = None  # --models-dir / LLAMA_ARG_MODELS_DIR
    models_preset: str | None = None  # --models-preset / LLAMA_ARG_MODELS_PRESET
    models_max: int | None = None  # --models-max (None = default 4; 0 = unlimited)
    models_autoload: bool | None = None  # --models-autoload / --no-models-autoload
    # vLLM
    gpu_memory_utilization: float | None = None  # default 0.92 (0.90 before)
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    kv_cache_memory_bytes: int | None = None
    tensor_parallel_size: int | None = None
    # -hf user/model[:quant] (-hff FILE): the model is in llama.cpp's cache
    # (monitor/servers/hf_cache.py); hf_env: the cache-locating variables of the server's
    # environment (hf_cache.CACHE_ENV; a typed command: ours)
    hf_repo: str | None = None
    hf_file: str | None = None
    hf_draft_repo: str | None = None  # -hfd user/model[:quant]: the draft from the cache
    hf_env: tuple[tuple[str, str], ...] = ()
    # what the parser did not know: kept, never fatal
    unknown: tuple[str, ...] = ()
    # which fields came from LLAMA_ARG_* environment keys rather than argv
    from_env: tuple[str, ...] = field(default_factory=tuple)
    # -dev/--device (LLAMA_ARG_DEVICE): the devices llama.cpp may offload to; ("none",) = CPU only
    devices: tuple[str, ...] | None = None
    # values the engine itself would refuse or misread (``-c abc``), one line each for the
    # user: ``estimate``/``predict`` stop on them; a running process's spec just carries them
    refused: tuple[str, ...] = ()


def resolve_paths(spec: LaunchSpec, cwd: str | None) -> LaunchSpec:
    """``spec`` with its relative file paths (-m, -md, --mmproj, --lora, from argv or
    ``LLAMA_ARG_*``) joined to the process's working directory, as the server itself
    opened them: ``cd ~/models && llama-server -m x.gguf`` (systemd ``WorkingDirectory=``).

    ``cwd`` is the target of ``/proc/PID/cwd`` as ``readlink`` gave it; it is only joined
    as text, never followed. No cwd (unreadable, another user's process) or a cwd that is
    not absolute leaves the paths as they are.
    """
    if not cwd or not cwd.startswith("/") or spec.engine not in MODEL_PATH_IS_FILE:
        return spec

    def join(path: str | None) -> str | None:
        return posixpath.join(cwd, path) if path and not path.startswith("/") else path

    model_path, draft_model = join(spec.model_path), join(spec.draft_model)
    mmproj, lora = join(spec.mmproj), tuple(join(p) or p for p in spec.lora)
    if (model_path, draft_model, mmproj, lora) == (
        spec.model_path,
        spec.draft_model,
        spec.mmproj,
        spec.lora,
    ):
        return spec
    return replace(spec, model_path=model_path, draft_model=draft_model, mmproj=mmproj, lora=lora)
