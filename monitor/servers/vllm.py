"""vLLM and SGLang command lines -> :class:`LaunchSpec` (research/estimation.md section 4).

vLLM: ``vllm serve <model> [flags]`` or ``python -m vllm.entrypoints.openai.api_server
--model M``. The memory is held by the API server's children (``VLLM::EngineCore``,
``VLLM::Worker_TP0`` ...), which recognise.py ties back to this spec. Integers take vLLM's
``human_readable_int`` suffixes: ``k m g t`` are powers of 1000, ``K M G T`` of 1024 (no
decimals with those); ``8GiB`` is not accepted by vLLM and lands in ``unknown``.
``--max-model-len auto`` (or -1) means "fit to memory" and reads as None.

SGLang: ``python -m sglang.launch_server --model-path M --mem-fraction-static F
--context-length N``; the fraction maps to ``gpu_memory_utilization``, the context to
``max_model_len``, ``--max-running-requests`` to ``max_num_seqs``.

Both parsers accept ``--flag=value`` and ``--flag_name`` (argparse here is vLLM's
FlexibleArgumentParser, which rewrites ``_`` to ``-``). Unknown flags go to ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from monitor.servers.llamacpp import is_flag
from monitor.servers.spec import LaunchSpec

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_FLOAT = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# Flags that take no value, by name or by prefix (argparse BooleanOptionalAction).
_SWITCH_PREFIXES = ("--enable-", "--disable-", "--no-")
_SWITCHES = frozenset(
    {
        "--enforce-eager",
        "--trust-remote-code",
        "--headless",
        "--async-scheduling",
        "--skip-tokenizer-init",
        "--calculate-kv-scales",
        "--return-tokens-as-token-ids",
        "--use-v2-block-manager",
        "--fully-sharded-loras",
        "--allow-credentials",
        "--served-model-name-as-path",
        "--log-requests",
        "--skip-server-warmup",
        "--is-embedding",
        "--enable-metrics",
        "--disable-radix-cache",
        "--show-time-cost",
        "--random-seed-free",
    }
)


def human_readable_int(value: str) -> int:
    """vLLM's integer syntax: ``32768``, ``32k`` (32000), ``32K`` (32768)."""
    value = value.strip()
    m = _HUMAN.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(value)
        return int(number) * _BINARY[suffix]
    if not re.fullmatch(r"[+-]?\d+", value):
        raise ValueError(value)
    return int(value)


def _max_len(value: str) -> int | None:
    if value.strip().lower() in ("auto", "-1"):
        return None
    return human_readable_int(value)


def _fraction(value: str) -> float:
    if not _FLOAT.fullmatch(value.strip()):
        raise ValueError(value)
    return float(value)


def _positive(value: str) -> int:
    n = human_readable_int(value)
    if n <= 0:
        raise ValueError(value)
    return n


def _port(value: str) -> int:
    n = int(value) if re.fullmatch(r"\d+", value.strip()) else -1
    if not 0 <= n <= 65535:
        raise ValueError(value)
    return n


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError(value)
    return value


Conv = Callable[[str], Any]

_VLLM: dict[str, tuple[str, Conv]] = {
    "--model": ("model_name", _text),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _fraction),
    "--max-model-len": ("max_model_len", _max_len),
    "--max-num-seqs": ("max_num_seqs", _positive),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", _positive),
    "--kv-cache-memory": ("kv_cache_memory_bytes", _positive),
    "--tensor-parallel-size": ("tensor_parallel_size", _positive),
    "-tp": ("tensor_parallel_size", _positive),
    "--host": ("host", _text),
    "--port": ("port", _port),
}
_SGLANG: dict[str, tuple[str, Conv]] = {
    "--model-path": ("model_name", _text),
    "--model": ("model_name", _text),
    "--mem-fraction-static": ("gpu_memory_utilization", _fraction),
    "--context-length": ("max_model_len", _max_len),
    "--max-running-requests": ("max_num_seqs", _positive),
    "--tp-size": ("tensor_parallel_size", _positive),
    "--tp": ("tensor_parallel_size", _positive),
    "--tensor-parallel-size": ("tensor_parallel_size", _positive),
    "--host": ("host", _text),
    "--port": ("port", _port),
}
# Value flags that change no memory: skipped silently.
_SKIP_VALUED = frozenset(
    {
        "--api-key",
        "--served-model-name",
        "--uvicorn-log-level",
        "--chat-template",
        "--tool-call-parser",
        "--reasoning-parser",
        "--log-level",
        "--seed",
        "--tokenizer",
        "--revision",
        "--tokenizer-revision",
        "--download-dir",
        "--ssl-keyfile",
        "--ssl-certfile",
        "--root-path",
        "--allowed-origins",
        "--allowed-methods",
        "--allowed-headers",
        "--response-role",
        "--middleware",
        "--generation-config",
    }
)


def _looks_like_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~"))


def _parse(
    args: Sequence[str], table: dict[str, tuple[str, Conv]], engine: str, positional_model: bool
) -> LaunchSpec:
    values: dict[str, Any] = {}
    unknown: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not is_flag(tok):
            if positional_model and "model_name" not in values:
                values["model_name"] = tok
            else:
                unknown.append(tok)
            continue
        raw, eq, inline = tok.partition("=")
        name = raw.replace("_", "-") if raw.startswith("--") else raw
        target = table.get(name)
        switch = name in _SWITCHES or (name.startswith(_SWITCH_PREFIXES) and target is None)
        value: str | None = inline if eq else None
        if value is None and not switch and i < len(args) and not is_flag(args[i]):
            value = args[i]
            i += 1
        if target is None:
            if name in _SKIP_VALUED:
                continue
            unknown.append(tok if eq or value is None else f"{tok}={value}")
            continue
        if value is None:
            unknown.append(f"{raw} (missing value)")
            continue
        field, conv = target
        try:
            values[field] = conv(value)
        except ValueError:
            unknown.append(f"{raw}={value} (invalid value)")
    model = values.get("model_name")
    if model and _looks_like_path(model):
        values["model_path"] = model
    return LaunchSpec(engine=engine, role="server", **values, unknown=tuple(unknown))


def parse_vllm(argv: Sequence[str]) -> LaunchSpec:
    """``vllm serve M ...``, ``python -m vllm.entrypoints.openai.api_server --model M ...``,
    or just the flags. The model id is ``model_name`` (and ``model_path`` when local)."""
    return _parse(_vllm_args(argv), _VLLM, "vllm", positional_model=True)


def parse_sglang(argv: Sequence[str]) -> LaunchSpec:
    """``python -m sglang.launch_server --model-path M ...`` (or ``sglang serve ...``)."""
    return _parse(_sglang_args(argv), _SGLANG, "sglang", positional_model=False)


def _after_module(argv: Sequence[str], prefix: str) -> list[str] | None:
    """The arguments after ``-m <module starting with prefix>`` in a python command line."""
    for i, a in enumerate(argv[:-1]):
        if a == "-m" and argv[i + 1].startswith(prefix):
            return list(argv[i + 2 :])
        if a.startswith("-m") and len(a) > 2 and a[2:].startswith(prefix):
            return list(argv[i + 1 :])
    return None


def _after_word(argv: Sequence[str], words: tuple[str, ...]) -> list[str] | None:
    for i, a in enumerate(argv):
        if a.rsplit("/", 1)[-1] in words:
            rest = list(argv[i + 1 :])
            if rest and rest[0] == "serve":
                rest = rest[1:]
            return rest
    return None


def _vllm_args(argv: Sequence[str]) -> list[str]:
    args = list(argv)
    if not args or is_flag(args[0]):
        return args
    after = _after_module(args, "vllm")
    if after is not None:
        # python -m vllm.entrypoints.cli.main serve M ...
        return after[1:] if after and after[0] == "serve" else after
    after = _after_word(args, ("vllm",))
    return after if after is not None else args[1:]


def _sglang_args(argv: Sequence[str]) -> list[str]:
    args = list(argv)
    if not args or is_flag(args[0]):
        return args
    after = _after_module(args, "sglang")
    if after is not None:
        return after[1:] if after and after[0] == "serve" else after
    after = _after_word(args, ("sglang",))
    return after if after is not None else args[1:]
