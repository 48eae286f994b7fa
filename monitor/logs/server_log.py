"""Parse llama.cpp / llama-server memory log lines, and vLLM's startup memory lines.

What llama.cpp itself says it allocated is the ground truth for the estimator's
"expected vs. actual" view. The formats, their history and their traps are in
../shared/research/estimation.md section 1d (vLLM: section 4); the out-of-memory lines
are in ../shared/research/sources.md section 5.5. In short:

- ``<func>: <backend> <kind> buffer size = <MiB> MiB`` for kind model / KV / RS / compute /
  output (2024 builds: ``llm_load_tensors: <backend> buffer size = ...`` for weights);
- ``llama_kv_cache: size = ... (<cells> cells, <layers> layers, <seqs>/<streams> seqs), K ...``
  where "cells" is **per stream**; an iSWA model prints two such blocks (non-SWA first);
- ``llama_memory_recurrent: size = ...`` for recurrent state (hybrid models print both);
- a draft / MTP context prints its own full set after the target's;
- fit's probe contexts (``no_alloc``) print ``0.00 MiB`` buffers, which never replace a
  real value;
- ``common_memory_breakdown_print`` (older ``llama_memory_breakdown_print``) tables.

The parser is a small state machine fed one line at a time, so it works on a whole file
or on a live stream; it keeps only the latest values (bounded memory), ignores anything it
does not recognise, and never raises.

Sets and contexts. Lines arrive in *sets*: a model load (``load_tensors``) followed by one
llama_context (params, output, KV, RS, compute), or a context alone (an MTP context on the
target's weights). A new set starts when a model line follows context lines, or when a
context line follows a finished context (its compute buffers printed). Each set gets a
label: the server's own markers (``srv load_model: loading model``, ``loading draft model``
from the server or ``common_speculative_init_result``, ``creating MTP draft context``) win;
otherwise the first real set is the target and any later one the draft. Fit probe sets
(every model/KV buffer 0.00 MiB) do not count toward that, and a context's buffers come
from its latest real set only (stale backends of an earlier load are dropped).
Within one set, model / KV / RS buffers of one backend add up (iSWA's two caches, several
``CPU`` weight buffers); compute and output buffers are one per backend and replace.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "BreakdownRow",
    "BufferLine",
    "KvLine",
    "LlamaLogParser",
    "LlamaLogReport",
    "VllmLogParser",
    "VllmLogReport",
    "parse_llama_log",
    "parse_vllm_log",
]

MAX_LINE_CHARS = 8192  # longer lines are cut; every memory line is far shorter
MAX_OOM_LINES = 100
MAX_OOM_LINE_CHARS = 1000
_MAX_BUFFER_KEYS = 512  # bounds for garbage input: real logs have a few dozen
_MAX_KV_KEYS = 64
_MAX_TABLE_ROWS = 64

# --- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BufferLine:
    context: str  # "target" | "draft" | "mtp": the llama_context the line belongs to
    kind: str  # "model" | "KV" | "RS" | "compute" | "output"
    backend: str  # as printed: "CUDA0", "CPU_Mapped", "CUDA_Host", "Vulkan0", "CPU"
    device: str  # backend without _Mapped/_REPACK/_Private; "*_Host" and "CPU*" -> "host"
    mib: float


@dataclass(frozen=True, slots=True)
class KvLine:
    context: str
    cache: str  # "kv" | "kv_swa" | "kv_full" (the iSWA non-SWA cache) | "rs"
    size_mib: float  # the total over all streams
    cells_per_stream: int | None  # "cells" as printed: per stream (total = x streams)
    streams: int | None  # the number after "/" in "4/1 seqs"; None where not printed
    layers: int | None
    k_type: str | None  # for "rs": the R type
    k_mib: float | None
    v_type: str | None  # for "rs": the S type
    v_mib: float | None


@dataclass(frozen=True, slots=True)
class BreakdownRow:
    """One row of the memory breakdown table (MiB, as printed; integers).

    GPU rows: ``total = free + (self = model + context + compute) + unaccounted``.
    Host and other rows print only ``self = model + context + compute``; the rest is None.
    "context" is KV + recurrent state (not the output buffer). A wrapped-around negative
    "unaccounted" (printed as ~2**44) is turned back into the negative number it was.
    """

    device: str  # as printed: "CUDA0 (RTX 4090)", "Host", "HTP0-REPACK"
    total: int | None
    free: int | None
    self: int | None
    model: int | None
    context: int | None
    compute: int | None
    unaccounted: int | None

    @property
    def name(self) -> str:
        """The backend device name without the description: "CUDA0", "Host"."""
        return self.device.split(" (", 1)[0].strip()


@dataclass(frozen=True, slots=True)
class LlamaLogReport:
    buffers: tuple[BufferLine, ...]  # one per (context, kind, backend): the latest set's
    kv: tuple[KvLine, ...]  # one per (context, cache)
    n_ctx: int | None  # the target context's parameters (llama_context: ... = ...)
    n_ctx_seq: int | None  # older builds: n_ctx_per_seq
    n_seq_max: int | None
    n_batch: int | None
    n_ubatch: int | None
    flash_attn: str | None  # as printed ("enabled", "auto", "0"); "auto" resolved if logged
    kv_unified: bool | None
    n_slots: int | None  # llama-server: "initializing, n_slots = N, n_ctx_slot = M"
    n_ctx_slot: int | None
    offloaded_layers: tuple[int, int] | None  # (n, of): "offloaded n/of layers to GPU"
    breakdown: tuple[BreakdownRow, ...]  # the last table printed
    oom: tuple[str, ...]  # out-of-memory / allocation-failure lines, prefix stripped

    def total_mib(
        self, kind: str | None = None, device: str | None = None, context: str | None = "target"
    ) -> float:
        """Sum of the buffers matching every filter given (None = any).

        ``device`` matches BufferLine.device ("CUDA0", "host") or the backend as printed.
        """
        return sum(
            b.mib
            for b in self.buffers
            if (kind is None or b.kind == kind)
            and (context is None or b.context == context)
            and (device is None or b.device == device or b.backend == device)
        )


@dataclass(frozen=True, slots=True)
class VllmLogReport:
    model_load_gib: float | None  # "Model loading took X GiB" ("Loading model weights took X GB")
    kv_cache_gib: float | None  # "Available KV cache memory: X GiB"
    kv_cache_tokens: int | None  # "GPU KV cache size: N tokens"
    max_concurrency: float | None  # "Maximum concurrency for L tokens per request: Cx"


# --- line cleaning --------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# llama.cpp's own prefix: "0.00.193.540 I " (timestamp, level letter), either part optional.
_PREFIX = re.compile(r"^\s*(?:\d+\.\d{2}\.\d{3}\.\d{3}\s+(?:[IWEDT]\s+)?|[IWEDT]\s+(?=\S+:))")


def _clean(raw: object) -> str | None:
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw[:MAX_LINE_CHARS]).decode("utf-8", "replace")
    if not isinstance(raw, str):
        return None
    line = raw[:MAX_LINE_CHARS]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return line.rstrip("\r\n")


def _strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line, count=1).strip()


def _num(text: str | None) -> float | None:
    """A printed MiB/GiB value; "636,18" (a comma locale) reads as 636.18."""
    if not text:
        return None
    if "," in text:
        text = text.replace(",", ".") if "." not in text else text.replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _int(text: str | None) -> int | None:
    if not text or len(text) > 30:
        return None
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return None


def _device_of(backend: str) -> str:
    name = backend
    for suffix in ("_Mapped", "_REPACK", "-REPACK", "_Private"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.startswith("CPU") or name.endswith("_Host") or name in ("AMX", "Host"):
        return "host"
    return name


# --- llama.cpp patterns ---------------------------------------------------------------

_BUFFER = re.compile(
    r"(\w+):\s+(\S+)\s+(?:(model|KV|RS|compute|output)\s+)?buffer size\s*=\s*([\d.,]+)\s*MiB"
)
_KV_SIZE = re.compile(
    r"(\w+):\s+size\s*=\s*([\d.,]+)\s*MiB\s*\(\s*(\d+)\s*cells,\s*(\d+)\s*layers,\s*"
    r"(\d+)\s*(?:/\s*(\d+)\s*)?seqs(?:\s+(\d+)\s*rs_seq)?\s*\)"
    r"(?:,\s*(?:K|R)\s*\(([^)]{0,16})\):\s*([\d.,]+)\s*MiB,\s*(?:V|S)\s*\(([^)]{0,16})\):"
    r"\s*([\d.,]+)\s*MiB)?"
)
_KV_SELF = re.compile(
    r"KV self size\s*=\s*([\d.,]+)\s*MiB"
    r"(?:,\s*K\s*\(([^)]{0,16})\):\s*([\d.,]+)\s*MiB,\s*V\s*\(([^)]{0,16})\):\s*([\d.,]+)\s*MiB)?"
)
_ISWA = re.compile(r"creating\s+(non-SWA|SWA)\s+KV cache")
_PARAM = re.compile(
    r"(?:llama_context|llama_new_context_with_model|llama_init_from_model):\s+"
    r"(n_seq_max|n_ctx|n_ctx_seq|n_ctx_per_seq|n_batch|n_ubatch|flash_attn|kv_unified)"
    r"\s*=\s*([^\s,]{1,32})"
)
_FA_RESOLVED = re.compile(r"Flash Attention (?:was auto, set to )?(enabled|disabled)")
_OFFLOADED = re.compile(r"offloaded\s+(\d+)\s*/\s*(\d+)\s+layers to GPU")
_N_SLOTS = re.compile(r"n_slots\s*=\s*(\d+)")
_N_CTX_SLOT = re.compile(r"(?:n_ctx_slot|new slot,? n_ctx(?:_slot)?)\s*=\s*(\d+)")
_SRV_KVU = re.compile(r"kv_unified\s*=\s*'(\w+)'")
_TABLE_GPU = re.compile(
    r"\|\s*-\s*([^|]{1,200}?)\s*\|\s*(\d+)\s*=\s*(\d+)\s*\+\s*\(\s*(\d+)\s*=\s*(\d+)\s*\+"
    r"\s*(\d+)\s*\+\s*(\d+)\s*\)\s*\+\s*(-?\d+)\s*\|"
)
_TABLE_OTHER = re.compile(
    r"\|\s*-\s*([^|]{1,200}?)\s*\|\s*(\d+)\s*=\s*(\d+)\s*\+\s*(\d+)\s*\+\s*(\d+)\s*\|"
)
_OOM = re.compile(
    r"cudaMalloc failed|hipMalloc failed|out of memory|ErrorOutOfDevice|OutOfHostMemory"
    r"|failed to allocate [^\n]{0,80}?buffer|unable to allocate [^\n]{0,60}?buffer"
    r"|buffer allocation failed|allocation of size \d+ failed|insufficient memory"
    r"|failed for self-attention cache",
    re.IGNORECASE,
)
_WRAP = 1 << 44  # 2**64 bytes in MiB: a negative size_t printed by the breakdown table
_KEEP_SUM = frozenset(("model", "KV", "RS"))  # several buffers per backend in one set


def _wanted_func(func: str) -> bool:
    """llama.cpp's own memory lines; not mtmd/clip's (the projector is not a context)."""
    return func.startswith(("llama", "llm_")) or func in ("load_tensors", "sched_reserve")


class LlamaLogParser:
    """Feed llama.cpp log lines one at a time; ``report()`` at any point."""

    def __init__(self, max_oom: int = MAX_OOM_LINES) -> None:
        self._buffers: dict[tuple[str, str, str], float] = {}
        self._writer: dict[tuple[str, str, str], int] = {}  # the set that last wrote a key
        self._last_real: dict[str, int] = {}  # label -> the latest set with a non-zero alloc
        self._set_id = 0
        self._kv: dict[tuple[str, str], KvLine] = {}
        self._params: dict[str, dict[str, object]] = {}
        self._offloaded: dict[str, tuple[int, int]] = {}
        self._n_slots: int | None = None
        self._n_ctx_slot: int | None = None
        self._srv_kv_unified: bool | None = None
        self._table: list[BreakdownRow] | None = None  # the table being printed
        self._table_open = False
        self._breakdown: tuple[BreakdownRow, ...] = ()
        self._oom: deque[str] = deque(maxlen=max(1, max_oom))
        # the current set
        self._label = "target"
        self._phase: str | None = None  # None (no set yet) | "model" | "context"
        self._set_keys: set[tuple[str, str]] = set()
        self._set_ctx_data = False
        self._set_compute = False
        self._set_alloc_lines = 0  # model/KV buffer lines
        self._set_alloc_nonzero = False
        self._set_any = False
        self._real_sets = 0
        self._pending_label: str | None = None
        self._pending_cache: str | None = None

    # -- feeding ------------------------------------------------------------------------

    def feed(self, raw: object) -> None:
        try:
            self._feed(raw)
        except Exception:  # noqa: BLE001 - a log parser must never take its caller down
            return

    def feed_many(self, lines: Iterable[object]) -> None:
        for raw in lines:
            self.feed(raw)

    def _feed(self, raw: object) -> None:
        line = _clean(raw)
        if not line:
            return
        if "MiB" in line:
            if "buffer size" in line:
                self._on_buffer(line)
            elif "cells" in line:
                self._on_kv_size(line)
            elif "KV self size" in line:
                self._on_kv_self(line)
            elif "memory breakdown" in line:
                self._table = []
                self._table_open = True
                return
        if "|" in line and (self._table_open or "breakdown" in line):
            if self._on_table_row(line):
                return
        elif self._table_open:
            self._table_open = False
        if "=" in line:
            if ("context" in line or "init_from_model" in line) and "constructing" not in line:
                self._on_param(line)
            if "n_slots" in line or "new slot" in line:
                self._on_slots(line)
        if "layers to GPU" in line:
            m = _OFFLOADED.search(line)
            if m:
                n, of = _int(m.group(1)), _int(m.group(2))
                if n is not None and of is not None:
                    self._model_phase()
                    self._offloaded[self._label] = (n, of)
        elif "constructing llama_context" in line:
            self._context_start()
        elif "loaded meta data" in line and "llama_model_loader" in line:
            self._model_phase()
        elif "load_model" in line or "MTP" in line or "draft model" in line:
            self._on_marker(line)
        elif "creating" in line and "KV cache" in line:
            m = _ISWA.search(line)
            if m:
                self._context_phase(starts_alloc=True)
                self._pending_cache = "kv_full" if m.group(1) == "non-SWA" else "kv_swa"
        elif "Flash Attention" in line:
            m = _FA_RESOLVED.search(line)
            if m:
                self._params.setdefault(self._label, {})["flash_attn"] = m.group(1)
        if "lloc" in line or "emory" in line or "EMORY" in line or "failed" in line:
            self._on_maybe_oom(line)

    # -- sets ---------------------------------------------------------------------------

    def _close_set(self) -> None:
        if self._phase is None or not self._set_any:
            return
        probe = self._set_alloc_lines > 0 and not self._set_alloc_nonzero
        if not probe:
            self._real_sets += 1

    def _new_set(self, phase: str) -> None:
        self._close_set()
        if self._pending_label is not None:
            self._label = self._pending_label
            self._pending_label = None
        else:
            self._label = "target" if self._real_sets == 0 else "draft"
        self._set_id += 1
        self._phase = phase
        self._set_keys = set()
        self._set_ctx_data = False
        self._set_compute = False
        self._set_alloc_lines = 0
        self._set_alloc_nonzero = False
        self._set_any = False
        self._pending_cache = None

    def _model_phase(self) -> None:
        if self._phase != "model":
            self._new_set("model")
        self._set_any = True

    def _context_phase(self, starts_alloc: bool) -> None:
        """A context line; ``starts_alloc``: an output/KV/RS line, which follows no compute."""
        if self._phase is None or (starts_alloc and self._set_compute):
            self._new_set("context")
        self._phase = "context"
        self._set_any = True

    def _context_start(self) -> None:
        """The first line of a llama_context (constructing, n_seq_max, or n_ctx)."""
        if self._phase is None or (self._phase == "context" and self._set_ctx_data):
            self._new_set("context")
        self._phase = "context"
        self._set_any = True

    def _on_marker(self, line: str) -> None:
        if "loading draft model" in line:
            self._close_set()
            self._phase = None
            self._pending_label = "draft"
        elif "creating MTP" in line:
            self._close_set()
            self._phase = None
            self._pending_label = "mtp"
        elif "loading model" in line and "load_model" in line:
            self._close_set()
            self._phase = None
            self._real_sets = 0
            self._pending_label = "target"

    # -- line kinds ---------------------------------------------------------------------

    def _on_buffer(self, line: str) -> None:
        i = line.find("buffer size")
        m = _BUFFER.search(line, max(0, i - 160), i + 48)
        if not m:
            return
        func, backend, kind, value = m.group(1), m.group(2), m.group(3), _num(m.group(4))
        if value is None or value < 0 or not _wanted_func(func):
            return
        if kind is None:
            if not func.endswith("load_tensors"):
                return
            kind = "model"
        if kind == "model":
            self._model_phase()
        else:
            self._context_phase(starts_alloc=kind != "compute")
            self._set_ctx_data = True
        if kind in ("model", "KV"):
            self._set_alloc_lines += 1
            if value > 0:
                self._set_alloc_nonzero = True
                self._last_real[self._label] = self._set_id
        if kind == "compute":
            self._set_compute = True
        key = (self._label, kind, backend)
        set_key = (kind, backend)
        if set_key in self._set_keys and kind in _KEEP_SUM:
            self._buffers[key] = self._buffers.get(key, 0.0) + value
            self._writer[key] = self._set_id
            return
        old = self._buffers.get(key)
        if value == 0 and old:
            return  # a fit probe's no_alloc buffer never replaces a real value
        if old is None and len(self._buffers) >= _MAX_BUFFER_KEYS:
            return
        self._buffers[key] = value
        self._writer[key] = self._set_id
        self._set_keys.add(set_key)

    def _on_kv_size(self, line: str) -> None:
        i = line.find(" size")
        if i < 0:
            return
        m = _KV_SIZE.search(line, max(0, i - 80), i + 240)
        if not m:
            return
        func = m.group(1)
        if "recurrent" in func:
            cache = "rs"
        elif "kv_cache" in func:
            cache = self._pending_cache or "kv"
            self._pending_cache = None
        else:
            return
        size = _num(m.group(2))
        if size is None:
            return
        self._context_phase(starts_alloc=True)
        self._set_ctx_data = True
        self._store_kv(
            KvLine(
                context=self._label,
                cache=cache,
                size_mib=size,
                cells_per_stream=_int(m.group(3)),
                streams=_int(m.group(6)) if cache != "rs" else None,
                layers=_int(m.group(4)),
                k_type=m.group(8),
                k_mib=_num(m.group(9)),
                v_type=m.group(10),
                v_mib=_num(m.group(11)),
            )
        )

    def _on_kv_self(self, line: str) -> None:
        m = _KV_SELF.search(line)
        if not m:
            return
        size = _num(m.group(1))
        if size is None:
            return
        self._context_phase(starts_alloc=True)
        self._set_ctx_data = True
        cache = self._pending_cache or "kv"
        self._pending_cache = None
        self._store_kv(
            KvLine(
                self._label,
                cache,
                size,
                None,
                None,
                None,
                m.group(2),
                _num(m.group(3)),
                m.group(4),
                _num(m.group(5)),
            )
        )

    def _store_kv(self, kv: KvLine) -> None:
        key = (kv.context, kv.cache)
        if kv.size_mib == 0:
            return  # a no_alloc probe's cache, or nothing
        if key not in self._kv and len(self._kv) >= _MAX_KV_KEYS:
            return
        self._kv[key] = kv

    def _on_param(self, line: str) -> None:
        m = _PARAM.search(line)
        if not m:
            return
        name, value = m.group(1), m.group(2)
        if name in ("n_seq_max", "n_ctx"):
            self._context_start()
        else:
            self._context_phase(starts_alloc=False)
        params = self._params.setdefault(self._label, {})
        if name == "flash_attn":
            params[name] = value
        elif name == "kv_unified":
            low = value.lower()
            if low in ("true", "1"):
                params[name] = True
            elif low in ("false", "0"):
                params[name] = False
        else:
            number = _int(value)
            if number is not None:
                params["n_ctx_seq" if name == "n_ctx_per_seq" else name] = number

    def _on_slots(self, line: str) -> None:
        m = _N_SLOTS.search(line)
        if m and "initializing" in line:
            self._n_slots = _int(m.group(1))
        m = _N_CTX_SLOT.search(line)
        if m and ("initializing" in line or "new slot" in line):
            self._n_ctx_slot = _int(m.group(1))
        m = _SRV_KVU.search(line)
        if m and "initializing" in line:
            self._srv_kv_unified = m.group(1).lower() == "true"

    def _on_table_row(self, line: str) -> bool:
        if self._table is None or len(line) > 2000:
            return False
        m = _TABLE_GPU.search(line)
        if m:
            v = [_int(g) for g in m.groups()[1:]]
            unaccounted = v[6]
            if unaccounted is not None and unaccounted >= _WRAP // 2:
                unaccounted -= _WRAP
            row = BreakdownRow(m.group(1).strip(), v[0], v[1], v[2], v[3], v[4], v[5], unaccounted)
        else:
            m = _TABLE_OTHER.search(line)
            if not m:
                return False
            v = [_int(g) for g in m.groups()[1:]]
            row = BreakdownRow(m.group(1).strip(), None, None, v[0], v[1], v[2], v[3], None)
        if len(self._table) < _MAX_TABLE_ROWS:
            self._table.append(row)
            self._breakdown = tuple(self._table)
        return True

    def _on_maybe_oom(self, line: str) -> None:
        if _OOM.search(line):
            self._oom.append(_strip_prefix(line)[:MAX_OOM_LINE_CHARS])

    # -- result -------------------------------------------------------------------------

    def _current(self, key: tuple[str, str, str], mib: float) -> bool:
        """Written by its context's latest real set (not stale, not a probe's 0.00)."""
        writer = self._writer[key]
        if key[0] not in self._last_real:
            return mib > 0  # a context seen only in fit probes
        return writer == self._last_real[key[0]]

    def report(self) -> LlamaLogReport:
        target = self._params.get("target", {})

        def get_int(name: str) -> int | None:
            value = target.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        kv_unified = target.get("kv_unified")
        if not isinstance(kv_unified, bool):
            kv_unified = self._srv_kv_unified
        flash_attn = target.get("flash_attn")
        return LlamaLogReport(
            buffers=tuple(
                BufferLine(key[0], key[1], key[2], _device_of(key[2]), mib)
                for key, mib in self._buffers.items()
                if self._current(key, mib)
            ),
            kv=tuple(self._kv.values()),
            n_ctx=get_int("n_ctx"),
            n_ctx_seq=get_int("n_ctx_seq"),
            n_seq_max=get_int("n_seq_max"),
            n_batch=get_int("n_batch"),
            n_ubatch=get_int("n_ubatch"),
            flash_attn=flash_attn if isinstance(flash_attn, str) else None,
            kv_unified=kv_unified,
            n_slots=self._n_slots,
            n_ctx_slot=self._n_ctx_slot,
            offloaded_layers=self._offloaded.get("target"),
            breakdown=self._breakdown,
            oom=tuple(self._oom),
        )


def parse_llama_log(lines: Iterable[str]) -> LlamaLogReport:
    """Parse llama.cpp log lines (a list, an open file, a live stream) into one report."""
    parser = LlamaLogParser()
    if isinstance(lines, str | bytes):  # a whole log as one string: its lines
        lines = lines.splitlines()
    try:
        for raw in lines:
            parser.feed(raw)
    except Exception:  # noqa: BLE001 - a broken iterator (decode error) ends the input
        pass
    return parser.report()


# --- vLLM -----------------------------------------------------------------------------

_VLLM_LOAD = re.compile(r"(?:Model loading|Loading model weights) took\s+([\d.]+)\s*Gi?B")
_VLLM_KV_GIB = re.compile(
    r"(?:Available KV cache memory:\s*|reserved for KV Cache is\s*)(-?[\d.]+)\s*GiB"
)
_VLLM_TOKENS = re.compile(r"GPU KV cache size:\s*([\d,]{1,30})\s*tokens")
_VLLM_CONCURRENCY = re.compile(
    r"Maximum [\w ]{0,40}?concurrency for\s*[\d,]{1,30}\s*tokens per request:\s*([\d.]+)\s*x"
)


class VllmLogParser:
    """vLLM startup memory lines; the last value of each wins (TP ranks print their own)."""

    def __init__(self) -> None:
        self._load: float | None = None
        self._kv_gib: float | None = None
        self._tokens: int | None = None
        self._concurrency: float | None = None

    def feed(self, raw: object) -> None:
        try:
            self._feed(raw)
        except Exception:  # noqa: BLE001 - a log parser must never take its caller down
            return

    def _feed(self, raw: object) -> None:
        line = _clean(raw)
        if not line:
            return
        if " took" in line and (m := _VLLM_LOAD.search(line)):
            self._load = _num(m.group(1)) or self._load
        if "KV" in line:
            if m := _VLLM_KV_GIB.search(line):
                value = _num(m.group(1))
                self._kv_gib = value if value is not None else self._kv_gib
            if m := _VLLM_TOKENS.search(line):
                self._tokens = _int(m.group(1)) or self._tokens
        if "concurrency" in line and (m := _VLLM_CONCURRENCY.search(line)):
            self._concurrency = _num(m.group(1)) or self._concurrency

    def report(self) -> VllmLogReport:
        return VllmLogReport(self._load, self._kv_gib, self._tokens, self._concurrency)


def parse_vllm_log(lines: Iterable[str]) -> VllmLogReport:
    parser = VllmLogParser()
    if isinstance(lines, str | bytes):
        lines = lines.splitlines()
    try:
        for raw in lines:
            parser.feed(raw)
    except Exception:  # noqa: BLE001
        pass
    return parser.report()
