"""The parse state of one llama.cpp command line and the actions the flag table
(llamacpp_flags.py) runs on it: each stores one flag's value the way common/arg.cpp does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.servers.llamacpp_values import REFUSE, _Bad, _cache_type, _fa, _int, _onoff, _word

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
