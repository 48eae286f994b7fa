"""llama.cpp's command line (+ ``LLAMA_ARG_*`` environment) -> :class:`LaunchSpec`.

Flag spellings and environment names follow ``common/arg.cpp`` (current master plus the
spellings older builds and configs still carry; research/estimation.md section 1f-1g):

- Every long flag also works as ``--flag=value``, and ``_`` in a long flag reads as ``-``
  (llama.cpp itself rewrites ``--ctx_size`` to ``--ctx-size``).
- The environment is read first and the command line overrides it per field, as
  llama.cpp does (``warn: ... environment variable is set, but will be overwritten``).
  A repeatable flag given on the command line replaces what the environment set.
- Two-sided switches (``-kvu``/``-no-kvu``) read ``LLAMA_ARG_X`` as on/off and also honour
  ``LLAMA_ARG_NO_X`` (llama.cpp checks the ``NO_`` spelling first); ``LLAMA_ARG_NO_X=0``
  is read as "not set" (older builds ignored it; current ones would apply it).
- Nothing here raises on input: unknown flags, removed flags, values that do not parse
  (``-c abc``, ``-c <redacted>``) and stray words land in ``LaunchSpec.unknown`` as
  ``flag``, ``flag=value``, or with a note: ``--draft-max=16 (removed upstream)``,
  ``-c=abc (invalid value)``, ``-m (missing value)``.
- Values llama-server itself would refuse or misread also get one line each in
  ``LaunchSpec.refused`` (``-c abc: expected an integer (llama-server would refuse it)``,
  ``-c 1e5: ... (llama-server would read it as 1)``): integers are read as ``std::stoi``
  reads them, cache and speculative types are checked against llama.cpp's lists. The
  user-typed ``estimate``/``predict`` stop on them; a running process just carries them.
- Flags that cannot change memory (sampling, logging, chat template, HTTP options) are
  known and skipped, so ``unknown`` holds what may matter and was not understood.

Load mode: ``-lm/--load-mode`` is the current flag. The legacy switches are read as the
booleans they were before ``--load-mode`` existed: ``--no-mmap`` -> ``none``, ``--mlock``
-> ``mmap+mlock`` (``mlock`` with ``--no-mmap``), ``-dio`` -> ``dio``. (Between llama.cpp
PR #26135 and the removal of the legacy switches, a bare ``--mlock`` meant ``mlock``
without mmap; a command line does not say which build runs it.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from monitor.engines.spec import LaunchSpec

ENGINE = "llama.cpp"
_SPEC_FIELDS = tuple(f.name for f in fields(LaunchSpec))

TRUTHY = frozenset({"on", "enabled", "true", "1"})
FALSEY = frozenset({"off", "disabled", "false", "0"})
AUTOY = frozenset({"auto", "-1"})
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
SPLIT_MODES = ("none", "layer", "row", "tensor")
_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_NEG_NUMBER = re.compile(r"-(?:\d+(?:\.\d*)?|\.\d+)")
_WORD = re.compile(r"[A-Za-z0-9_+.-]+")
REMOVED = " (removed upstream)"
INVALID = " (invalid value)"
MISSING = " (missing value)"


REFUSE = "llama-server would refuse it"
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
# std::stoi / std::stof read a leading number and ignore what follows it
_STOI = re.compile(r"\s*([+-]?[0-9]+)")
_STOF = re.compile(r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# common/arg.cpp kv_cache_types
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
# common/speculative.cpp common_speculative_type_from_name_map: current names, then the
# spellings builds before the --spec-* rename (PR #22397) accepted
SPEC_TYPES = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)
OLD_SPEC_TYPES = (
    "draft",
    "eagle3",
    "ngram_simple",
    "ngram_map_k",
    "ngram_map_k4v",
    "ngram_mod",
    "ngram_cache",
)


class _Bad(ValueError):
    """A value that does not parse; the flag goes to ``unknown``.

    ``expected`` says what would parse; ``llama`` what llama-server does with the value
    (:data:`REFUSE`, "llama-server would read it as 1"), or None where that is not known.
    """

    def __init__(
        self, value: str, expected: str = "a valid value", llama: str | None = REFUSE
    ) -> None:
        super().__init__(value)
        self.value = value
        self.expected = expected
        self.llama = llama


# --- value converters -------------------------------------------------------------------


def _int(v: str, expected: str = "an integer") -> int:
    """``std::stoi``: what llama.cpp's integer flags use (``common/arg.cpp``)."""
    m = _STOI.match(v)
    if m is None:
        raise _Bad(v, expected)
    n = int(m.group(1))
    if not INT_MIN <= n <= INT_MAX:  # std::out_of_range
        raise _Bad(v, f"{expected} within 32 bits")
    if v[m.end() :].strip():  # "1e5", "4.5", "12k": stoi stops at the first odd character
        raise _Bad(v, expected, f"llama-server would read it as {n}")
    return n


def _at_least(low: int, expected: str) -> Callable[[str], int]:
    """An integer, then ``n >= low`` (a range llama.cpp's parser does not check)."""

    def conv(v: str) -> int:
        n = _int(v)
        if n < low:
            raise _Bad(v, expected, None)
        return n

    return conv


_ctx = _at_least(0, "a context size >= 0 (0 = the model's training context)")
_batch = _at_least(0, "a batch size >= 0")


def _n_cpu_moe(v: str) -> int:
    n = _int(v)
    if n < 0:
        raise _Bad(v, "a layer count >= 0")  # arg.cpp: "invalid value"
    return n


def _float(v: str, expected: str = "a number") -> float:
    """``std::stof``: a leading number, the rest ignored."""
    m = _STOF.match(v)
    if m is None:
        raise _Bad(v, expected)
    if v[m.end() :].strip():
        raise _Bad(v, expected, f"llama-server would read it as {float(m.group(0)):g}")
    return float(m.group(0))


def _ngl(v: str) -> int | str:
    low = v.strip().lower()
    return low if low in ("auto", "all") else _int(low, "an integer, 'auto' or 'all'")


def _list(v: str, expected: str = "a list") -> list[str]:
    parts = [p.strip() for p in re.split(r"[,/]+", v.strip()) if p.strip()]
    if not parts:
        raise _Bad(v, expected)
    return parts


def _numbers(v: str, expected: str, parse: Callable[[str], Any]) -> tuple[Any, ...]:
    """A ','- or '/'-separated list, each part read by ``parse``; a bad part names the
    whole value."""
    try:
        return tuple(parse(p) for p in _list(v, expected))
    except _Bad as exc:
        raise _Bad(v, expected, exc.llama) from None


def _floats(v: str) -> tuple[float, ...]:
    return _numbers(v, "proportions separated by ',' or '/', e.g. 3,1", _float)


def _ints(v: str) -> tuple[int, ...]:
    return _numbers(v, "MiB values separated by ',' or '/'", _int)


def _word(v: str) -> str:
    v = v.strip()
    if not _WORD.fullmatch(v):
        raise _Bad(v, "a word", None)
    return v


def _cache_type(v: str) -> str:
    return _word(v).lower()


def _text(v: str) -> str:
    if not v.strip():
        raise _Bad(v, "a value", None)
    return v


def _fa(v: str) -> str:
    low = v.strip().lower()
    if low in TRUTHY:
        return "on"
    if low in FALSEY:
        return "off"
    if low in AUTOY:
        return "auto"
    raise _Bad(v, "on, off or auto")


def _onoff(v: str) -> bool:
    low = v.strip().lower()
    if low in TRUTHY:
        return True
    if low in FALSEY:
        return False
    raise _Bad(v, "on or off")


def _choice(allowed: Sequence[str]) -> Callable[[str], str]:
    def conv(v: str) -> str:
        low = v.strip().lower()
        if low not in allowed:
            raise _Bad(v, "one of " + ", ".join(allowed))
        return low

    return conv


def _port(v: str) -> int:
    n = _int(v)
    if not 0 <= n <= 65535:
        raise _Bad(v, "a port number from 0 to 65535", None)
    return n


# --- checks: values that parse here but llama-server refuses (refused, not unknown) ------


def _check_cache_type(v: str) -> None:
    if v.strip().lower() not in KV_CACHE_TYPES:
        raise _Bad(v, "one of " + ", ".join(KV_CACHE_TYPES))


def _check_spec_type(v: str) -> None:
    for name in (p.strip() for p in v.split(",") if p.strip()):
        if name not in SPEC_TYPES and name not in OLD_SPEC_TYPES:
            raise _Bad(v, "speculative types from " + ", ".join(SPEC_TYPES))


def _check_override(v: str) -> None:
    if any("=" not in p for p in v.split(",") if p.strip()):
        raise _Bad(v, "PATTERN=BUFFER_TYPE pairs separated by ','")


# --- parse state ------------------------------------------------------------------------


@dataclass
class _State:
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # field -> "env" | "argv"
    unknown: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # one line each, for the user
    load: list[tuple[str, str, Any]] = field(default_factory=list)  # (source, kind, value)

    def set(self, name: str, value: Any, source: str) -> None:
        self.values[name] = value
        self.sources[name] = source

    def extend(self, name: str, items: Sequence[Any], source: str) -> None:
        if self.sources.get(name) != source:  # the command line replaces the environment
            self.values[name] = []
        self.values.setdefault(name, []).extend(items)
        self.sources[name] = source


Action = Callable[[_State, str | None, str], None]  # (state, value, "env"|"argv")


def _set(name: str, conv: Callable[[str], Any]) -> Action:
    def act(st: _State, value: str | None, source: str) -> None:
        assert value is not None
        st.set(name, conv(value), source)

    return act


def _const(name: str, const: Any) -> Action:
    def act(st: _State, value: str | None, source: str) -> None:
        st.set(name, const, source)

    return act


def _n_parallel(st: _State, value: str | None, source: str) -> None:
    assert value is not None
    expected = "a slot count >= 1, or -1 for auto"
    n = _int(value)
    if n == 0 or n < -1:  # arg.cpp refuses 0; below -1 it does not check
        raise _Bad(value, expected, REFUSE if n == 0 else None)
    st.set("n_parallel", None if n == -1 else n, source)  # -1 = auto


def _fa_act(st: _State, value: str | None, source: str) -> None:
    st.set("flash_attn", "on" if value is None else _fa(value), source)  # bare -fa: old builds


def _fit_act(st: _State, value: str | None, source: str) -> None:
    st.set("fit", True if value is None else _onoff(value), source)


def _ot_act(st: _State, value: str | None, source: str) -> None:
    assert value is not None
    parts = [p for p in value.split(",") if p.strip()]  # llama.cpp splits on ',' too
    if not parts:
        raise _Bad(value)
    st.extend("override_tensor", parts, source)


def _lora_act(st: _State, value: str | None, source: str) -> None:
    assert value is not None
    st.extend("lora", _list_csv(value), source)


def _lora_scaled_act(st: _State, value: str | None, source: str) -> None:
    assert value is not None  # FNAME:SCALE,... (old builds: FNAME SCALE, second word eaten)
    st.extend("lora", [item.rsplit(":", 1)[0] for item in _list_csv(value)], source)


def _list_csv(value: str) -> list[str]:
    items = [p.strip() for p in value.split(",") if p.strip()]
    if not items:
        raise _Bad(value)
    return items


def _spec_type_act(st: _State, value: str | None, source: str) -> None:
    assert value is not None  # repeatable and comma-separated: the types accumulate
    items = [_word(p) for p in _list_csv(value)]
    prev = st.values.get("spec_type") if st.sources.get("spec_type") == source else None
    st.set("spec_type", ",".join(([prev] if prev else []) + items), source)


def _ctk_ctv(st: _State, value: str | None, source: str) -> None:
    assert value is not None  # ollama runner's --kv-cache-type sets both
    t = _cache_type(value)
    st.set("cache_type_k", t, source)
    st.set("cache_type_v", t, source)


def _rerank(st: _State, value: str | None, source: str) -> None:
    st.set("embedding", True, source)
    st.set("pooling", "rank", source)


def _devices(st: _State, value: str | None, source: str) -> None:
    assert value is not None
    st.set("devices", tuple(_list_csv(value)), source)


def _load(kind: str, const: Any = None, conv: Callable[[str], Any] | None = None) -> Action:
    def act(st: _State, value: str | None, source: str) -> None:
        v = conv(value) if conv is not None and value is not None else const
        st.load.append((source, kind, v))

    return act


def _removed(target: str | None) -> Action:
    """A removed flag: still read (``--draft-max`` -> spec_draft_n_max), noted in unknown."""

    def act(st: _State, value: str | None, source: str) -> None:
        if target is not None and value is not None:
            st.set(target, _int(value), source)

    return act


# --- the option table -------------------------------------------------------------------

REQUIRED, SWITCH, OPTIONAL = 1, 0, 2


@dataclass(frozen=True, slots=True)
class _Opt:
    names: tuple[str, ...]
    action: Action
    arity: int = REQUIRED
    optional_values: frozenset[str] = frozenset()
    removed: bool = False
    # switches given as --flag=false run this instead (two-sided switches)
    negate: Action | None = None
    # a value this parser takes but llama-server refuses: raises _Bad (refused only)
    check: Callable[[str], None] | None = None


_FA_VALUES = TRUTHY | FALSEY | AUTOY | {"enabled", "disabled"}

_OPTIONS: tuple[_Opt, ...] = (
    _Opt(("-m", "--model"), _set("model_path", _text)),
    _Opt(("-c", "--ctx-size"), _set("ctx_size", _ctx)),
    _Opt(("-np", "--parallel"), _n_parallel),
    _Opt(
        ("-kvu", "--kv-unified"),
        _const("kv_unified", True),
        SWITCH,
        negate=_const("kv_unified", False),
    ),
    _Opt(("-no-kvu", "--no-kv-unified"), _const("kv_unified", False), SWITCH),
    _Opt(("-ctk", "--cache-type-k"), _set("cache_type_k", _cache_type), check=_check_cache_type),
    _Opt(("-ctv", "--cache-type-v"), _set("cache_type_v", _cache_type), check=_check_cache_type),
    _Opt(
        ("--kv-cache-type",),
        _ctk_ctv,  # ollama's Go runner (v0.4 - v0.11)
        check=_check_cache_type,
    ),
    _Opt(("-fa", "--flash-attn"), _fa_act, OPTIONAL, _FA_VALUES),
    _Opt(("-b", "--batch-size"), _set("n_batch", _batch)),
    _Opt(("-ub", "--ubatch-size"), _set("n_ubatch", _batch)),
    _Opt(("-ngl", "--gpu-layers", "--n-gpu-layers"), _set("n_gpu_layers", _ngl)),
    _Opt(("-ts", "--tensor-split"), _set("tensor_split", _floats)),
    _Opt(("-sm", "--split-mode"), _set("split_mode", _choice(SPLIT_MODES))),
    _Opt(("-mg", "--main-gpu"), _set("main_gpu", _int)),
    _Opt(("-dev", "--device"), _devices),
    _Opt(("-ot", "--override-tensor"), _ot_act, check=_check_override),
    _Opt(("-cmoe", "--cpu-moe"), _const("cpu_moe", True), SWITCH),
    _Opt(("-ncmoe", "--n-cpu-moe"), _set("n_cpu_moe", _n_cpu_moe)),
    _Opt(("-nkvo", "--no-kv-offload"), _const("no_kv_offload", True), SWITCH),
    # --repack / -nr: the CPU backend's extra buffer types (AMX, CPU_REPACK); common/arg.cpp
    _Opt(("--repack",), _const("repack", True), SWITCH, negate=_const("repack", False)),
    _Opt(("-nr", "--no-repack"), _const("repack", False), SWITCH),
    _Opt(("--no-host",), _const("no_host", True), SWITCH),
    _Opt(
        ("-kvo", "--kv-offload"),
        _const("no_kv_offload", False),
        SWITCH,
        negate=_const("no_kv_offload", True),
    ),
    _Opt(("-md", "--model-draft", "--spec-draft-model"), _set("draft_model", _text)),
    _Opt(
        ("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"),
        _set("draft_n_gpu_layers", _ngl),
    ),
    _Opt(
        ("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"),
        _set("draft_cache_type_k", _cache_type),
        check=_check_cache_type,
    ),
    _Opt(
        ("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"),
        _set("draft_cache_type_v", _cache_type),
        check=_check_cache_type,
    ),
    _Opt(("--spec-type",), _spec_type_act, check=_check_spec_type),
    _Opt(("--spec-draft-n-max",), _set("spec_draft_n_max", _int)),
    _Opt(("--swa-full",), _const("swa_full", True), SWITCH),
    _Opt(("-mm", "--mmproj"), _set("mmproj", _text)),
    _Opt(("--no-mmproj-offload",), _const("mmproj_offload", False), SWITCH),
    _Opt(
        ("--mmproj-offload",),
        _const("mmproj_offload", True),
        SWITCH,
        negate=_const("mmproj_offload", False),
    ),
    _Opt(("--lora",), _lora_act),
    _Opt(("--lora-scaled",), _lora_scaled_act),
    _Opt(("-lm", "--load-mode"), _load("lm", conv=_choice(LOAD_MODES))),
    _Opt(("--no-mmap",), _load("mmap", False), SWITCH),
    _Opt(("--mmap",), _load("mmap", True), SWITCH, negate=_load("mmap", False)),
    _Opt(("--mlock",), _load("mlock", True), SWITCH),
    _Opt(("-dio", "--direct-io"), _load("dio", True), SWITCH, negate=_load("dio", False)),
    _Opt(("-ndio", "--no-direct-io"), _load("dio", False), SWITCH),
    _Opt(("-cram", "--cache-ram"), _set("cache_ram_mib", _int)),
    _Opt(("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), _set("ctx_checkpoints", _int)),
    _Opt(("-fit", "--fit"), _fit_act, OPTIONAL, TRUTHY | FALSEY),
    _Opt(("-fitt", "--fit-target"), _set("fit_target_mib", _ints)),
    _Opt(("-fitc", "--fit-ctx"), _set("fit_ctx", _int)),
    _Opt(("--embedding", "--embeddings"), _const("embedding", True), SWITCH),
    _Opt(("--rerank", "--reranking"), _rerank, SWITCH),
    _Opt(("--pooling",), _set("pooling", _word)),
    _Opt(("--host",), _set("host", _text)),
    _Opt(("--port",), _set("port", _port)),
    _Opt(("-a", "--alias"), _set("_alias", _text)),
    _Opt(("-hf", "-hfr", "--hf-repo"), _set("_hf_repo", _text)),
    _Opt(("-hff", "--hf-file"), _set("hf_file", _text)),
    _Opt(("--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"), _set("hf_draft_repo", _text)),
    # router mode (common/arg.cpp "--models-dir" ... "--models-autoload")
    _Opt(("--models-dir",), _set("models_dir", _text)),
    _Opt(("--models-preset",), _set("models_preset", _text)),
    _Opt(("--models-max",), _set("models_max", _int)),
    _Opt(
        ("--models-autoload",),
        _const("models_autoload", True),
        SWITCH,
        negate=_const("models_autoload", False),
    ),
    _Opt(("--no-models-autoload",), _const("models_autoload", False), SWITCH),
    # removed upstream, still seen in old configs (estimation.md 1f)
    _Opt(("--draft", "--draft-n", "--draft-max"), _removed("spec_draft_n_max"), removed=True),
    _Opt(("--draft-min", "--draft-n-min"), _removed(None), removed=True),
    _Opt(("-cd", "--ctx-size-draft"), _removed(None), removed=True),
)
OPTIONS: dict[str, _Opt] = {name: opt for opt in _OPTIONS for name in opt.names}

# LLAMA_ARG_* keys: (key, option spelling whose action applies, how the value is read).
# "value": the value is the option's value; "void": applied when truthy; "bool": on/off
# picks the option or its negation; "neg": the LLAMA_ARG_NO_X spelling, applied when present.
_ENV: tuple[tuple[str, str, str], ...] = (
    ("LLAMA_ARG_MODEL", "--model", "value"),
    ("LLAMA_ARG_CTX_SIZE", "--ctx-size", "value"),
    ("LLAMA_ARG_N_PARALLEL", "--parallel", "value"),
    ("LLAMA_ARG_KV_UNIFIED", "--kv-unified", "bool"),
    ("LLAMA_ARG_NO_KV_UNIFIED", "--no-kv-unified", "neg"),
    ("LLAMA_ARG_CACHE_TYPE_K", "--cache-type-k", "value"),
    ("LLAMA_ARG_CACHE_TYPE_V", "--cache-type-v", "value"),
    ("LLAMA_ARG_FLASH_ATTN", "--flash-attn", "value"),
    ("LLAMA_ARG_BATCH", "--batch-size", "value"),
    ("LLAMA_ARG_UBATCH", "--ubatch-size", "value"),
    ("LLAMA_ARG_N_GPU_LAYERS", "--n-gpu-layers", "value"),
    ("LLAMA_ARG_TENSOR_SPLIT", "--tensor-split", "value"),
    ("LLAMA_ARG_SPLIT_MODE", "--split-mode", "value"),
    ("LLAMA_ARG_MAIN_GPU", "--main-gpu", "value"),
    ("LLAMA_ARG_DEVICE", "--device", "value"),
    ("LLAMA_ARG_OVERRIDE_TENSOR", "--override-tensor", "value"),
    ("LLAMA_ARG_CPU_MOE", "--cpu-moe", "void"),
    ("LLAMA_ARG_N_CPU_MOE", "--n-cpu-moe", "value"),
    ("LLAMA_ARG_KV_OFFLOAD", "--kv-offload", "bool"),
    ("LLAMA_ARG_NO_KV_OFFLOAD", "--no-kv-offload", "neg"),
    ("LLAMA_ARG_REPACK", "--repack", "bool"),
    ("LLAMA_ARG_NO_HOST", "--no-host", "void"),
    ("LLAMA_ARG_SPEC_DRAFT_MODEL", "--spec-draft-model", "value"),
    ("LLAMA_ARG_MODEL_DRAFT", "--model-draft", "value"),  # before the --spec-* rename
    ("LLAMA_ARG_N_GPU_LAYERS_DRAFT", "--spec-draft-ngl", "value"),
    ("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K", "--spec-draft-type-k", "value"),
    ("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V", "--spec-draft-type-v", "value"),
    ("LLAMA_ARG_CACHE_TYPE_K_DRAFT", "--cache-type-k-draft", "value"),
    ("LLAMA_ARG_CACHE_TYPE_V_DRAFT", "--cache-type-v-draft", "value"),
    ("LLAMA_ARG_SPEC_TYPE", "--spec-type", "value"),
    ("LLAMA_ARG_SPEC_DRAFT_N_MAX", "--spec-draft-n-max", "value"),
    ("LLAMA_ARG_SWA_FULL", "--swa-full", "void"),
    ("LLAMA_ARG_MMPROJ", "--mmproj", "value"),
    ("LLAMA_ARG_MMPROJ_OFFLOAD", "--mmproj-offload", "bool"),
    ("LLAMA_ARG_NO_MMPROJ_OFFLOAD", "--no-mmproj-offload", "neg"),
    ("LLAMA_ARG_LOAD_MODE", "--load-mode", "value"),
    ("LLAMA_ARG_MMAP", "--mmap", "bool"),
    ("LLAMA_ARG_NO_MMAP", "--no-mmap", "neg"),
    ("LLAMA_ARG_MLOCK", "--mlock", "void"),
    ("LLAMA_ARG_DIO", "--direct-io", "bool"),
    ("LLAMA_ARG_NO_DIO", "--no-direct-io", "neg"),
    ("LLAMA_ARG_CACHE_RAM", "--cache-ram", "value"),
    ("LLAMA_ARG_CTX_CHECKPOINTS", "--ctx-checkpoints", "value"),
    ("LLAMA_ARG_FIT", "--fit", "value"),
    ("LLAMA_ARG_FIT_TARGET", "--fit-target", "value"),
    ("LLAMA_ARG_FIT_CTX", "--fit-ctx", "value"),
    ("LLAMA_ARG_EMBEDDINGS", "--embeddings", "void"),
    ("LLAMA_ARG_RERANKING", "--reranking", "void"),
    ("LLAMA_ARG_POOLING", "--pooling", "value"),
    ("LLAMA_ARG_HOST", "--host", "value"),
    ("LLAMA_ARG_PORT", "--port", "value"),
    ("LLAMA_ARG_ALIAS", "--alias", "value"),
    ("LLAMA_ARG_HF_REPO", "--hf-repo", "value"),
    ("LLAMA_ARG_HF_FILE", "--hf-file", "value"),
    ("LLAMA_ARG_SPEC_DRAFT_HF_REPO", "--spec-draft-hf", "value"),
    ("LLAMA_ARG_MODELS_DIR", "--models-dir", "value"),
    ("LLAMA_ARG_MODELS_PRESET", "--models-preset", "value"),
    ("LLAMA_ARG_MODELS_MAX", "--models-max", "value"),
    ("LLAMA_ARG_MODELS_AUTOLOAD", "--models-autoload", "bool"),
    ("LLAMA_ARG_DRAFT_MAX", "--draft-max", "value"),
    ("LLAMA_ARG_DRAFT_MIN", "--draft-min", "value"),
    ("LLAMA_ARG_CTX_SIZE_DRAFT", "--ctx-size-draft", "value"),
)
ENV_KEYS = frozenset(key for key, _, _ in _ENV)

# Known flags that change no memory: skipped, not reported as unknown.
_SKIP_VALUED = frozenset(
    {
        "-t",
        "--threads",
        "-tb",
        "--threads-batch",
        "-C",
        "--cpu-mask",
        "-Cr",
        "--cpu-range",
        "--cpu-strict",
        "--prio",
        "--poll",
        "-Cb",
        "--cpu-mask-batch",
        "-Crb",
        "--cpu-range-batch",
        "--cpu-strict-batch",
        "--prio-batch",
        "--poll-batch",
        "-n",
        "--predict",
        "--n-predict",
        "--keep",
        "-s",
        "--seed",
        "--temp",
        "--temperature",
        "--top-k",
        "--top-p",
        "--min-p",
        "--typical",
        "--typical-p",
        "--top-nsigma",
        "--top-n-sigma",
        "--xtc-probability",
        "--xtc-threshold",
        "--repeat-last-n",
        "--repeat-penalty",
        "--presence-penalty",
        "--frequency-penalty",
        "--dry-multiplier",
        "--dry-base",
        "--dry-allowed-length",
        "--dry-penalty-last-n",
        "--dry-sequence-breaker",
        "--adaptive-target",
        "--adaptive-decay",
        "--dynatemp-range",
        "--dynatemp-exp",
        "--mirostat",
        "--mirostat-lr",
        "--mirostat-ent",
        "--samplers",
        "--sampler-seq",
        "--sampling-seq",
        "-l",
        "--logit-bias",
        "--grammar",
        "--grammar-file",
        "-j",
        "--json-schema",
        "-jf",
        "--json-schema-file",
        "--chat-template",
        "--chat-template-file",
        "--chat-template-kwargs",
        "--reasoning-format",
        "-rea",
        "--reasoning",
        "--reasoning-budget",
        "--reasoning-budget-message",
        "-lv",
        "--verbosity",
        "--log-verbosity",
        "--log-file",
        "--log-colors",
        "--api-key",
        "--api-key-file",
        "--ssl-key-file",
        "--ssl-cert-file",
        "-to",
        "--timeout",
        "--threads-http",
        "--path",
        "--api-prefix",
        "--cors-origins",
        "--cors-methods",
        "--cors-headers",
        "--cache-reuse",
        "-sps",
        "--slot-prompt-similarity",
        "--numa",
        "--rope-scaling",
        "--rope-scale",
        "--rope-freq-base",
        "--rope-freq-scale",
        "--yarn-orig-ctx",
        "--yarn-ext-factor",
        "--yarn-attn-factor",
        "--yarn-beta-slow",
        "--yarn-beta-fast",
        "-hft",
        "--hf-token",
        "--sleep-idle-seconds",
        "-mmu",
        "--mmproj-url",
        "-cms",
        "--checkpoint-min-step",
        "--spec-draft-n-min",
        "--spec-draft-p-min",
        "--draft-p-min",
        "--spec-draft-p-split",
        "--draft-p-split",
        "-td",
        "--threads-draft",
        "--spec-draft-threads",
        "-tbd",
        "--threads-batch-draft",
        "--spec-draft-threads-batch",
        "--media-path",
        "--slot-save-path",
        "--tags",
        "-sys",
        "--system-prompt",
        "-p",
        "--prompt",
        "-f",
        "--file",
        "--override-kv",
        "--ui-config",
        "--webui-config",
        "--image-min-tokens",
        "--image-max-tokens",
        "-mmdev",
        "--mmproj-device",
        "-ptc",
        "--print-token-count",
        "-r",
        "--reverse-prompt",
        "--in-prefix",
        "--in-suffix",
        "--tools",
        "--sse-ping-interval",
    }
)
_SKIP_SWITCHES = frozenset(
    {
        "--jinja",
        "--no-jinja",
        "--metrics",
        "--slots",
        "--no-slots",
        "--props",
        "--webui",
        "--no-webui",
        "--ui",
        "--no-ui",
        "--offline",
        "-cb",
        "--cont-batching",
        "-nocb",
        "--no-cont-batching",
        "--context-shift",
        "--no-context-shift",
        "--cache-prompt",
        "--no-cache-prompt",
        "--warmup",
        "--no-warmup",
        "--log-disable",
        "--log-prefix",
        "--no-log-prefix",
        "--log-timestamps",
        "--no-log-timestamps",
        "-v",
        "--verbose",
        "--log-verbose",
        "--perf",
        "--no-perf",
        "-sp",
        "--special",
        "--no-mmproj",
        "--mmproj-auto",
        "--no-mmproj-auto",
        "--check-tensors",
        "--cache-idle-slots",
        "--no-cache-idle-slots",
        "--reuse-port",
        "-e",
        "--escape",
        "--no-escape",
        "--op-offload",
        "--no-op-offload",
        "-i",
        "--interactive",
        "-if",
        "--interactive-first",
        "-cnv",
        "--conversation",
        "-no-cnv",
        "--no-conversation",
        "-st",
        "--single-turn",
        "--simple-io",
        "--lora-init-without-apply",
        "--spm-infill",
        "-bs",
        "--backend-sampling",
        "--prefill-assistant",
        "--no-prefill-assistant",
        "--reasoning-preserve",
        "--no-reasoning-preserve",
        "--cors-credentials",
        "--no-cors-credentials",
        "-mli",
        "--multiline-input",
        "--ignore-eos",
        "-ag",
        "--agent",
        "-no-ag",
        "--no-agent",
        # ollama's Go runner
        "--multiuser-cache",
        "--ollama-engine",
    }
)


def normalise_flag(name: str) -> str:
    """``--ctx_size`` -> ``--ctx-size`` (llama.cpp rewrites ``_`` in long flags)."""
    return name.replace("_", "-") if name.startswith("--") else name


def is_flag(token: str) -> bool:
    """A word that starts a flag (``-c``, ``--port``), not a value (``-1``, ``-``)."""
    return len(token) > 1 and token.startswith("-") and not _NEG_NUMBER.fullmatch(token)


def _known(token: str) -> bool:
    name = normalise_flag(token.split("=", 1)[0])
    return name in OPTIONS or name in _SKIP_VALUED or name in _SKIP_SWITCHES


def _show(text: str, limit: int = 60) -> str:
    """A value as it may appear in a one-line message: printable and bounded."""
    if text and text.isprintable() and len(text) <= limit:
        return text
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _refusal(flag: str, value: str, source: str, bad: _Bad) -> str:
    """``-c abc: expected an integer (llama-server would refuse it)``."""
    given = f"{flag}={_show(value)}" if source == "env" else f"{flag} {_show(value)}"
    return f"{given}: expected {bad.expected}" + (f" ({bad.llama})" if bad.llama else "")


def _apply(
    st: _State, opt: _Opt, flag: str, value: str | None, source: str, negate: bool = False
) -> None:
    action = opt.negate if negate and opt.negate is not None else opt.action
    try:
        action(st, value, source)
    except _Bad as bad:
        st.unknown.append(f"{flag}={value}{INVALID}")
        st.refused.append(_refusal(flag, value or "", source, bad))
        return
    if opt.check is not None and value is not None and not negate:
        try:
            opt.check(value)
        except _Bad as bad:
            st.refused.append(_refusal(flag, value, source, bad))
    if opt.removed:
        st.unknown.append((f"{flag}={value}" if value is not None else flag) + REMOVED)


def _parse_env(st: _State, env: Mapping[str, str]) -> None:
    for key, flag, how in _ENV:
        value = env.get(key)
        if value is None:
            continue
        opt = OPTIONS[flag]
        low = value.strip().lower()
        if how == "value":
            _apply(st, opt, key, value, "env")
        elif how == "void":
            if low in TRUTHY:
                _apply(st, opt, key, None, "env")
        elif how == "bool":
            if low in TRUTHY or low in FALSEY:
                _apply(st, opt, key, None, "env", negate=low in FALSEY)
            else:
                st.unknown.append(f"{key}={value}{INVALID}")
                st.refused.append(_refusal(key, value, "env", _Bad(value, "on or off")))
        elif how == "neg" and low not in FALSEY:
            _apply(st, opt, key, None, "env")


def _parse_argv(st: _State, args: Sequence[str], aliases: Mapping[str, str]) -> None:
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not is_flag(tok):
            st.unknown.append(tok)  # llama.cpp takes no positional words
            continue
        raw, eq, inline = tok.partition("=")
        name = normalise_flag(raw)
        name = aliases.get(name, name)
        opt = OPTIONS.get(name)
        if opt is None:
            if name in _SKIP_SWITCHES:
                continue
            takes_value = name in _SKIP_VALUED
            if (
                not eq
                and i < len(args)
                and ((takes_value and not _known(args[i])) or not is_flag(args[i]))
            ):
                if not takes_value:
                    st.unknown.append(f"{tok}={args[i]}")
                i += 1
            elif not takes_value:
                st.unknown.append(tok)
            continue
        if opt.arity == SWITCH:
            if not eq or inline.strip().lower() in TRUTHY:
                _apply(st, opt, raw, None, "argv")
            elif inline.strip().lower() in FALSEY and opt.negate is not None:
                _apply(st, opt, raw, None, "argv", negate=True)
            else:
                st.unknown.append(f"{tok}{INVALID}")
            continue
        value: str | None
        if eq:
            value = inline
        elif opt.arity == OPTIONAL:
            if i < len(args) and args[i].strip().lower() in opt.optional_values:
                value = args[i]
                i += 1
            else:
                value = None
        elif i < len(args) and not _known(args[i]):
            value = args[i]
            i += 1
        else:
            st.unknown.append(f"{raw}{MISSING}")
            st.refused.append(f"{_show(raw)}: missing value ({REFUSE})")
            continue
        if (
            name == "--lora-scaled"
            and value is not None
            and ":" not in value
            and (i < len(args) and _FLOAT.fullmatch(args[i].strip()))
        ):
            i += 1  # old builds: --lora-scaled FNAME SCALE
        _apply(st, opt, raw, value, "argv")


def _load_mode(st: _State) -> tuple[str | None, str | None]:
    """The load mode and where it came from ("argv"/"env"), or (None, None)."""
    source = "argv" if any(s == "argv" for s, _, _ in st.load) else "env"
    events = [(kind, v) for s, kind, v in st.load if s == source]
    if not events:
        return None, None
    mode: str | None = None
    mmap: bool | None = None
    mlock = False
    for kind, v in events:
        if kind == "lm":
            mode, mmap, mlock = v, None, False
        elif kind == "mmap":
            mode, mmap = None, v
        elif kind == "mlock":
            mode, mlock = None, True
        elif kind == "dio":
            mode, mmap, mlock = ("dio" if v else "none"), None, False
    if mode is None:
        if mlock:
            mode = "mlock" if mmap is False else "mmap+mlock"
        elif mmap is not None:
            mode = "mmap" if mmap else "none"
    return mode, source


def program_args(argv: Sequence[str]) -> list[str]:
    """argv without the program (and ``llama serve``'s subcommand)."""
    args = list(argv)
    if args and not is_flag(args[0]):
        prog = os.path.basename(args.pop(0))
        if prog == "llama" and args and args[0] in ("serve", "server"):
            args.pop(0)
    return args


def _is_router(values: Mapping[str, Any], raw: Mapping[str, Any]) -> bool:
    """llama-server runs as a router when it has no model (tools/server/server.cpp:
    ``is_router_server = params.model.path.empty() && hf_repo.empty() && docker_repo.empty()``);
    here only when ``--models-dir``/``--models-preset`` (or their ``LLAMA_ARG_*``) say so,
    so a bare command line (or one whose model this parser missed) stays a "server"."""
    has_model = values.get("model_path") or raw.get("_hf_repo")
    return not has_model and bool(values.get("models_dir") or values.get("models_preset"))


def parse_args(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    engine: str = ENGINE,
    role: str = "server",
    aliases: Mapping[str, str] | None = None,
) -> LaunchSpec:
    """Parse llama.cpp flags (no program name) into a spec for ``engine``/``role``."""
    st = _State()
    if env:
        _parse_env(st, env)
    _parse_argv(st, args, aliases or {})
    values = {k: v for k, v in st.values.items() if k in _SPEC_FIELDS}
    for name in ("override_tensor", "lora"):
        if name in values:
            values[name] = tuple(values[name])
    from_env = {k for k, s in st.sources.items() if s == "env"}
    alias = st.values.get("_alias")
    if alias:
        names = [a.strip() for a in alias.split(",") if a.strip()]
        values["model_name"] = names[0] if names else alias
        if "_alias" in from_env:
            from_env.add("model_name")
    elif st.values.get("_hf_repo") and not values.get("model_path"):
        values["model_name"] = st.values["_hf_repo"]
        if "_hf_repo" in from_env:
            from_env.add("model_name")
    if st.values.get("_hf_repo") and not values.get("model_path"):
        values["hf_repo"] = st.values["_hf_repo"]
    if values.get("hf_draft_repo") and values.get("draft_model"):
        del values["hf_draft_repo"]  # -md wins: the draft is a file
    if values.get("hf_repo") or values.get("hf_draft_repo"):
        values["hf_env"] = _hf_env(env)
    if role == "server" and _is_router(values, st.values):
        role = "router"
    mode, source = _load_mode(st)
    if mode is not None:
        values["load_mode"] = mode
        if source == "env":
            from_env.add("load_mode")
    return LaunchSpec(
        engine=engine,
        role=role,
        **values,
        unknown=tuple(st.unknown),
        refused=tuple(st.refused),
        from_env=tuple(f for f in _SPEC_FIELDS if f in from_env),
    )


def _hf_env(env: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """``-hf``/``-hfd``: the variables that locate llama.cpp's cache (hf_cache.py), from the
    server's (allow-listed) environment; a typed command is given ours
    (hf_cache.own_cache_env)."""
    from monitor.engines.hf_cache import CACHE_ENV

    source = env or {}
    return tuple((k, source[k]) for k in CACHE_ENV if source.get(k))


def parse_llamacpp(argv: Sequence[str], env: Mapping[str, str] | None = None) -> LaunchSpec:
    """A llama.cpp server/cli command line (program name first, optional) + its env.

    Only ``LLAMA_ARG_*`` keys of ``env`` are read; the command line wins over them.
    Never raises on odd input: what does not parse is kept in ``unknown``.
    """
    return parse_args(program_args(argv), env)
