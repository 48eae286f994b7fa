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
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from monitor.servers.llamacpp_actions import _State
from monitor.servers.llamacpp_flags import (
    _ENV,
    _SKIP_SWITCHES,
    _SKIP_VALUED,
    OPTIONAL,
    OPTIONS,
    SWITCH,
    _Opt,
)
from monitor.servers.llamacpp_values import (
    _FLOAT,
    _NEG_NUMBER,
    FALSEY,
    INVALID,
    MISSING,
    REFUSE,
    REMOVED,
    TRUTHY,
    _Bad,
)
from monitor.servers.spec import LaunchSpec

ENGINE = "llama.cpp"
_SPEC_FIELDS = tuple(f.name for f in fields(LaunchSpec))


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
    from monitor.servers.hf_cache import CACHE_ENV

    source = env or {}
    return tuple((k, source[k]) for k in CACHE_ENV if source.get(k))


def parse_llamacpp(argv: Sequence[str], env: Mapping[str, str] | None = None) -> LaunchSpec:
    """A llama.cpp server/cli command line (program name first, optional) + its env.

    Only ``LLAMA_ARG_*`` keys of ``env`` are read; the command line wins over them.
    Never raises on odd input: what does not parse is kept in ``unknown``.
    """
    return parse_args(program_args(argv), env)
