"""A llama-server router's child launches, rendered as the router renders them.

From llama.cpp commit 0c1e57098 (``.cache/llama.cpp``), ``tools/server/server-models.cpp``
``server_models::load_models`` (lines 660-716) and ``common/preset.cpp``:

1. ``--models-dir`` gives one preset per model: ``LLAMA_ARG_MODEL`` (+ ``--mmproj``,
   ``--spec-draft-model``), :func:`monitor.servers.router_models.list_models_dir`;
2. ``--models-preset FILE.ini`` gives one preset per section (``load_from_ini``, lines
   304-361); the ``[*]`` section is the global defaults, applied under every model
   (``cascade``, lines 488-497); a section for a dir model is merged over it (line 700);
3. the router's own command line, minus the reserved options (``unset_reserved_args``,
   lines 469-484 with the model options; ``--log-file``, line 572), is merged OVER every
   model's preset (lines 707-711: "so that e.g. ``llama-server --temp 0`` is honoured by
   all child processes");
4. ``server_model_meta::update_args`` (lines 510-523) drops the reserved options again,
   sets ``--host 127.0.0.1 --port N --alias ID`` and renders ``common_preset::to_args``
   (preset.cpp lines 37-79): options ordered by their first spelling (``common_arg::
   operator<``, ``strcmp``), each written as its last spelling, a flag whose value is
   false as its negated spelling (or left out), preset-only options skipped.

The INI grammar is preset.cpp ``parse_ini_from_file`` (lines 164-250): ``[name]``
headers, ``key = value`` lines (the key at the line start, ``[A-Za-z_][A-Za-z0-9_.-]*``),
``;``/``#`` comments (also ending a value), blank lines; any other line fails the whole
file, as does an unknown key (``option 'x' not recognized in preset 'y'``); a repeated
header starts its section again empty. Keys are any spelling without its dashes or the
``LLAMA_ARG_*`` name (``get_map_key_opt``), from :mod:`monitor.servers.router_args`.

The file is read bounded (:data:`MAX_PRESET_BYTES`, :data:`MAX_PRESET_LINES`), opened
``O_NOFOLLOW|O_NONBLOCK`` and fstat'ed as a regular file; every failure is one
:class:`RouterModelsError` line. Hugging Face cache models (``load_from_cache``) are not
listed here.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from monitor.servers.router_args import OPTIONS, PRESET_ONLY
from monitor.servers.router_models import DirModel, RouterModelsError

MAX_PRESET_BYTES = 1 << 20
MAX_PRESET_LINES = 20_000
DEFAULT_SECTION = "default"  # common/preset.h COMMON_PRESET_DEFAULT_NAME
FALSEY = frozenset({"false", "0", "off", "disabled"})  # common_arg_utils::is_falsey
CHILD_HOST = "127.0.0.1"
# server-models.cpp unset_reserved_args (lines 469-484), by env name
RESERVED = (
    "LLAMA_ARG_SSL_KEY_FILE",
    "LLAMA_ARG_SSL_CERT_FILE",
    "LLAMA_API_KEY",
    "LLAMA_ARG_API_KEY_FILE",
    "LLAMA_ARG_MODELS_DIR",
    "LLAMA_ARG_MODELS_MAX",
    "LLAMA_ARG_MODELS_PRESET",
    "LLAMA_ARG_MODELS_AUTOLOAD",
)
MODEL_ARGS = ("LLAMA_ARG_MODEL", "LLAMA_ARG_MMPROJ", "LLAMA_ARG_ALIAS", "LLAMA_ARG_HF_REPO")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Opt:
    """One llama-server option (common_arg): how it is named, ordered and written."""

    first: str  # args[0]: orders the rendered argv
    long: str  # args.back(): how it is written
    neg: str | None  # args_neg.back(): how a false flag is written; None: left out
    env: str | None
    takes_value: bool
    preset_only: bool = False


def _table() -> tuple[dict[str, Opt], dict[str, Opt]]:
    """(INI key -> option, command-line spelling -> option)."""
    by_key: dict[str, Opt] = {}
    by_arg: dict[str, Opt] = {}
    for args, neg, env, value in OPTIONS:
        opt = Opt(args[0], args[-1], neg[-1] if neg else None, env, value)
        for spelling in (*args, *neg):
            by_key[spelling.lstrip("-")] = opt
            by_arg[spelling] = opt
        if env:
            by_key[env] = opt
    for key, env in PRESET_ONLY:
        opt = Opt(key, key, None, env, True, preset_only=True)
        by_key[key] = by_key[env] = opt
    return by_key, by_arg


KEY_TO_OPT, ARG_TO_OPT = _table()
_BY_ENV = {o.env: o for o in KEY_TO_OPT.values() if o.env}
NEG_ARGS = frozenset(spelling for _, neg, _, _ in OPTIONS for spelling in neg)
NEG_KEYS = frozenset(spelling.lstrip("-") for spelling in NEG_ARGS)

Preset = dict[Opt, str]


def _bounded_read(path: str) -> str:
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError as exc:
        why = "a symbolic link (not followed)" if os.path.islink(path) else exc.strerror
        raise RouterModelsError(f"{path}: cannot read the preset file: {why}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RouterModelsError(f"{path}: the preset file is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(MAX_PRESET_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_PRESET_BYTES:
        raise RouterModelsError(f"{path}: preset file over {MAX_PRESET_BYTES} bytes, not read")
    return raw.decode("utf-8", "replace")


def _value(rest: str) -> str:
    """A value as the PEG reads it: up to a ``;``/``#`` (a comment), trailing blanks cut."""
    cut = min((i for i in (rest.find(";"), rest.find("#")) if i >= 0), default=len(rest))
    return rest[:cut].rstrip(" \t")


def parse_ini(text: str, where: str) -> dict[str, dict[str, str]]:
    """Section name -> {key: value}, as preset.cpp ``parse_ini_from_file`` parses it."""
    lines = re.split(r"\r\n|\n|\r", text)
    if len(lines) > MAX_PRESET_LINES:
        raise RouterModelsError(f"{where}: more than {MAX_PRESET_LINES} lines, not read")
    parsed: dict[str, dict[str, str]] = {}
    section = DEFAULT_SECTION
    for n, line in enumerate(lines, 1):
        body = line.lstrip(" \t")
        if not body or body[0] in ";#":
            continue  # blank-line / comment-line
        if line.startswith("["):
            close = line.find("]")
            name = line[1:close].lstrip(" \t") if close > 0 else ""
            if not name or _value(line[close + 1 :]) != "":
                raise RouterModelsError(f"{where}: line {n}: not a [section] header")
            section = name
            parsed[section] = {}
            continue
        key = _IDENT.match(line)
        rest = line[key.end() :].lstrip(" \t") if key else ""
        if key is None or not rest.startswith("="):
            raise RouterModelsError(f"{where}: line {n}: not 'key = value' (llama-server refuses)")
        parsed.setdefault(section, {})[key.group(0)] = _value(rest[1:].lstrip(" \t"))
    return parsed


def _canonical(name: str) -> str:
    """``org/model:q4_k_m`` -> ``org/model:Q4_K_M`` (preset.cpp ``canonical_tag``)."""
    colon = name.rfind(":")
    if name in ("*", DEFAULT_SECTION) or colon < 0:
        return name
    tag = name[colon + 1 :]
    m = _TAG.search(tag)
    canon = (m.group(1) if m else tag).upper()
    return name[: colon + 1] + canon


def _option_value(key: str, value: str) -> str:
    """A negated spelling's value reversed (preset.cpp ``parse_bool_arg``)."""
    if key in NEG_KEYS:
        return "false" if value.lower() not in FALSEY else "true"
    return value


def presets_from_ini(
    parsed: Mapping[str, Mapping[str, str]], where: str
) -> tuple[Preset, dict[str, Preset]]:
    """(the ``[*]`` defaults, section name -> its options), as ``load_from_ini`` builds
    them; an unknown key fails the file, as it fails the router's start."""
    glob: Preset = {}
    out: dict[str, Preset] = {}
    for raw_name, keys in parsed.items():
        name = _canonical(raw_name or DEFAULT_SECTION)
        preset: Preset = {}
        for key, value in keys.items():
            if key == "version":
                continue
            opt = KEY_TO_OPT.get(key)
            if opt is None:
                raise RouterModelsError(
                    f"{where}: option '{key}' not recognized in preset '{name}' "
                    "(llama-server refuses to start)"
                )
            preset[opt] = _option_value(key, value)
        if name == DEFAULT_SECTION and not preset:
            continue
        if name == "*":
            glob = preset
        else:
            out[name] = preset
    return glob, out


def read_preset_file(path: str) -> tuple[Preset, dict[str, Preset]]:
    return presets_from_ini(parse_ini(_bounded_read(path), path), path)


def base_from_argv(argv: Sequence[str]) -> Preset:
    """The router's own options (``common_params_to_map``, arg.cpp lines 1187-1246: a
    ``--long_name`` reads as ``--long-name``; a flag is "1", its negation "0"), minus the
    reserved and model options and ``--log-file`` (server-models.cpp lines 569-572)."""
    out: Preset = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            arg = arg.replace("_", "-")
        opt = ARG_TO_OPT.get(arg)
        if opt is None:
            raise RouterModelsError(f"router command line: invalid argument: {arg[:80]}")
        if opt.takes_value:
            if i + 1 >= len(argv):
                raise RouterModelsError(f"router command line: {arg} expects a value")
            i += 1
            out[opt] = argv[i]
        else:
            out[opt] = "0" if arg in NEG_ARGS else "1"
        i += 1
    return _without(out, (*RESERVED, *MODEL_ARGS, "LLAMA_ARG_LOG_FILE"))


def _without(preset: Preset, envs: Sequence[str]) -> Preset:
    return {o: v for o, v in preset.items() if o.env not in envs}


def render(name: str, preset: Preset, bin_path: str, port: int = 0) -> tuple[str, ...]:
    """``update_args`` + ``to_args``: the child's argv for model ``name``."""
    final = _without(preset, (*RESERVED, "LLAMA_ARG_HOST", "LLAMA_ARG_PORT", "LLAMA_ARG_ALIAS"))
    final[_BY_ENV["LLAMA_ARG_HOST"]] = CHILD_HOST
    final[_BY_ENV["LLAMA_ARG_PORT"]] = str(port)
    final[_BY_ENV["LLAMA_ARG_ALIAS"]] = name
    args = [bin_path] if bin_path else []
    for opt in sorted(final, key=lambda o: o.first.encode()):
        value = final[opt]
        if opt.preset_only:
            continue
        if not opt.takes_value:
            if value.lower() in FALSEY:
                if opt.neg is not None:
                    args.append(opt.neg)
                continue
            args.append(opt.long)
            continue
        args += [opt.long, value]
    return tuple(args)


def dir_preset(model: DirModel) -> Preset:
    """``load_from_models_dir``'s preset for one folder model (preset.cpp lines 446-456)."""
    out = {_BY_ENV["LLAMA_ARG_MODEL"]: model.model_path}
    if model.mmproj_path:
        out[_BY_ENV["LLAMA_ARG_MMPROJ"]] = model.mmproj_path
    if model.draft_path:
        out[_BY_ENV["LLAMA_ARG_SPEC_DRAFT_MODEL"]] = model.draft_path
    return out


def child_launches(
    router_argv: Sequence[str],
    dir_models: Sequence[DirModel] = (),
    ini: tuple[Preset, dict[str, Preset]] | None = None,
    bin_path: str | None = None,
    cached: Sequence[str] = (),
) -> dict[str, tuple[str, ...]]:
    """Model id -> the child argv the router renders (``--port 0``: not yet assigned),
    from its command line, its ``--models-dir`` listing, its parsed preset file and the
    ``user/model:TAG`` ids of llama.cpp's HF cache (``cached``: server-models.cpp
    ``load_models`` lines 665-705, a cached model's preset is ``LLAMA_ARG_HF_REPO=ID``,
    preset.cpp ``load_from_cache`` lines 350-362; a folder model of the same id replaces
    it, a preset section merges over it)."""
    glob, custom = ini if ini is not None else ({}, {})
    hf = _BY_ENV["LLAMA_ARG_HF_REPO"]
    final: dict[str, Preset] = {m: {**glob, hf: m} for m in cached}
    final.update({m.model_id: {**glob, **dir_preset(m)} for m in dir_models})
    for name, preset in custom.items():
        final[name] = {**final.get(name, glob), **preset}
    base = base_from_argv(router_argv)
    exe = bin_path if bin_path is not None else (router_argv[0] if router_argv else "")
    return {name: render(name, {**p, **base}, exe) for name, p in sorted(final.items())}
