"""llama.cpp's flag values: the converters that read them as common/arg.cpp does (integers as
``std::stoi`` reads them) and the checks for values llama-server would refuse; a value
that does not parse raises :class:`_Bad`, which the parser (llamacpp.py) turns into an
``unknown`` entry and a ``refused`` line."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

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
