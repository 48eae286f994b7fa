"""llama-swap's config.yaml, read and validated as llama-swap reads it.

Facts and sources: ../shared/research/estimation.md section 5, checked against
mostlygeek/llama-swap ``internal/config/{load,config,macros,commands,model_config,matrix}.go``.
What this module reproduces:

Config loading (``LoadConfigFromReader``):

- ``${env.VAR}`` is replaced in the raw text first, but only for references that survive
  YAML parsing (ones inside YAML comments are ignored); an unset variable is an error, a
  value with a newline or NUL is rejected, ``\\`` and ``"`` are escaped.
- Per model the macro list is ``MODEL_ID``, then the global ``macros`` in file order, then
  the model's own ``macros`` (a model macro replaces a global one of the same name in
  place). They are substituted last-to-first, so a macro may use one defined *before* it.
- Whole-line ``#`` comments are dropped from ``cmd`` before substitution (a ``#`` after an
  argument stays, as in llama-swap).
- ``${PORT}`` is handed out from ``startPort`` (5800) in sorted model-ID order, only to
  models whose ``cmd`` uses it. ``proxy`` defaults to ``http://localhost:${PORT}``, so a
  model whose cmd has no ``${PORT}`` must set ``proxy`` (llama-swap refuses it otherwise).
- Any ``${name}`` left in cmd/proxy is an error. The argv is then split like
  ``SanitizeCommand``: comment lines dropped, trailing backslashes joined, POSIX shlex.
- ``ttl`` -1 (default) means ``globalTTL``; 0 means never. ``SwapModel.ttl`` is the
  effective value in seconds, or None when the model is never unloaded for idleness.
- Keys of ``filters.setParamsByID`` become extra aliases of their model.

Routing: ``routing.router.use`` is ``group`` (default) or ``matrix``; groups live under
``routing.router.settings.groups`` and the legacy top-level ``groups:`` / ``matrix:`` keys
are still read (mixing both styles is an error). Group defaults: swap=true,
exclusive=true, persistent=false. Models in no group go to the ``(default)`` group
(swap and exclusive); with no groups at all every model is in it: one model at a time.

Matrix sets are parsed and checked here (:mod:`.matrix` holds the DSL); which models a
swap unloads is :mod:`.evictions`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from monitor.errors import InputError
from monitor.integrations.llamaswap.matrix import Node, parse_dsl, support, walk

__all__ = [
    "DEFAULT_GROUP_ID",
    "SwapConfig",
    "SwapConfigError",
    "SwapGroup",
    "SwapMatrix",
    "SwapModel",
    "load_config",
    "resolve",
]

DEFAULT_GROUP_ID = "(default)"
DEFAULT_START_PORT = 5800
DEFAULT_PROXY = "http://localhost:${PORT}"

_MACRO_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_MACRO_REF = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
_ENV_REF = re.compile(r"\$\{env\.([a-zA-Z_][a-zA-Z0-9_]*)\}")
_VAR_KEY = re.compile(r"^[a-zA-Z0-9.-]{1,32}$")
_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_MAX_CMD_CHARS = 1 << 20  # a cmd whose macros expand past this is refused (nested macros)


class SwapConfigError(InputError):
    """A llama-swap config vramscope cannot use; the message is one line."""


@dataclass(frozen=True, slots=True)
class SwapModel:
    model_id: str
    cmd: tuple[str, ...]
    env: tuple[str, ...]
    aliases: tuple[str, ...]
    ttl: int | None


@dataclass(frozen=True, slots=True)
class SwapGroup:
    name: str
    swap: bool
    exclusive: bool
    persistent: bool
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SwapMatrix:
    vars: dict[str, str]
    evict_costs: dict[str, int]  # model ID -> multiplier (vars resolved)
    sets: tuple[tuple[str, str], ...]  # (name, DSL) in file order
    _program: tuple[Any, ...]  # compiled sets in solve order: (name, root node, models)


@dataclass(frozen=True, slots=True)
class SwapConfig:
    models: dict[str, SwapModel]
    groups: tuple[SwapGroup, ...]
    router: str  # "groups" | "matrix" | "default"
    matrix: SwapMatrix | None


# --------------------------------------------------------------------------- YAML nodes


class _Doc:
    """Error context: the file name, for ``file:line: message``."""

    def __init__(self, path: str) -> None:
        self.path = path
        # mappings already read, by node: YAML aliases share nodes, and a merge key
        # (``<<: [*a, *a]``) repeated down a chain would read them 2**depth times
        self.items: dict[int, list[tuple[str, yaml.Node, yaml.Node]]] = {}

    def error(self, node: yaml.Node | None, message: str) -> SwapConfigError:
        message = " ".join(str(message).split())
        if node is not None:
            return SwapConfigError(f"{self.path}:{node.start_mark.line + 1}: {message}")
        return SwapConfigError(f"{self.path}: {message}")


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return f"'{node.value}'"


def _is_null(node: yaml.Node) -> bool:
    return (
        isinstance(node, yaml.ScalarNode)
        and node.style is None
        and node.value in ("", "~", "null", "Null", "NULL")
    )


def _items(doc: _Doc, node: yaml.Node, what: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
    """(key, key node, value node) of a mapping, in order, YAML merge keys applied."""
    if _is_null(node):
        return []
    if not isinstance(node, yaml.MappingNode):
        raise doc.error(node, f"{what}: expected a mapping, got {_kind(node)}")
    if id(node) in doc.items:
        return doc.items[id(node)]
    doc.items[id(node)] = []  # a mapping that merges itself (``&a {<<: *a}``) adds nothing
    merged: list[tuple[str, yaml.Node, yaml.Node]] = []
    explicit: list[tuple[str, yaml.Node, yaml.Node]] = []
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            sources = (
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
            for source in sources:
                for item in _items(doc, source, what):
                    if all(item[0] != m[0] for m in merged):
                        merged.append(item)
            continue
        if not isinstance(key_node, yaml.ScalarNode):
            raise doc.error(key_node, f"{what}: keys must be strings")
        key = key_node.value
        if key in seen:
            raise doc.error(
                key_node, f"{what}: mapping key '{key}' already defined at line {seen[key]}"
            )
        seen[key] = key_node.start_mark.line + 1
        explicit.append((key, key_node, value_node))
    out = [m for m in merged if m[0] not in seen] + explicit
    doc.items[id(node)] = out
    return out


def _scalar(node: yaml.ScalarNode) -> Any:
    """A scalar's value as yaml.v3 decodes it into ``any`` (YAML 1.2 core resolution)."""
    text = node.value
    if node.style is not None:
        return text
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    number = _go_int(text.replace("_", ""))
    if number is not None:
        return number
    plain = text.replace("_", "")
    if _YAML_FLOAT.match(plain):
        return float(plain)
    if plain.lower() in (".inf", "+.inf"):
        return float("inf")
    if plain.lower() == "-.inf":
        return float("-inf")
    if plain.lower() == ".nan":
        return float("nan")
    return text


def _go_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 0, 64)``: 0x / 0o / 0b prefixes, a leading 0 is octal."""
    sign, body = 1, text
    if body[:1] in "+-" and body:
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    base, digits = 10, body
    lowered = body.lower()
    if lowered.startswith(("0x", "0o", "0b")):
        base, digits = {"x": 16, "o": 8, "b": 2}[lowered[1]], body[2:]
    elif len(body) > 1 and body.startswith("0"):
        base, digits = 8, body[1:]
    if not digits or not all(c in "0123456789abcdef"[:base] for c in digits.lower()):
        return None
    value = sign * int(digits, base)
    return value if -(2**63) <= value < 2**63 else None


def _str(doc: _Doc, node: yaml.Node, what: str, default: str = "") -> str:
    if _is_null(node):
        return default
    if not isinstance(node, yaml.ScalarNode):
        raise doc.error(node, f"{what}: expected a string, got {_kind(node)}")
    return node.value


def _int(doc: _Doc, node: yaml.Node, what: str, default: int) -> int:
    if _is_null(node):
        return default
    value = _scalar(node) if isinstance(node, yaml.ScalarNode) else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(node, f"{what}: expected an integer, got {_kind(node)}")
    return value


def _bool(doc: _Doc, node: yaml.Node, what: str, default: bool) -> bool:
    if _is_null(node):
        return default
    if isinstance(node, yaml.ScalarNode):
        value = _scalar(node)
        if isinstance(value, bool):
            return value
        # yaml.v3 keeps YAML 1.1 words for bool fields
        if node.style is None and node.value in ("y", "Y", "yes", "Yes", "YES", "on", "On", "ON"):
            return True
        if node.style is None and node.value in ("n", "N", "no", "No", "NO", "off", "Off", "OFF"):
            return False
    raise doc.error(node, f"{what}: expected true or false, got {_kind(node)}")


def _str_list(doc: _Doc, node: yaml.Node, what: str) -> list[str]:
    if _is_null(node):
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise doc.error(node, f"{what}: expected a list of strings, got {_kind(node)}")
    out = []
    for item in node.value:
        if not isinstance(item, yaml.ScalarNode):
            raise doc.error(item, f"{what}: expected a string, got {_kind(item)}")
        out.append(item.value)
    return out


# --------------------------------------------------------------------------- macros


def _strings_in(value: Any) -> Iterable[str]:
    """Every string in a loaded YAML tree, each list or mapping visited once: an alias
    (``*a``) shares its object, so a "billion laughs" file stays as small as its text."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict | list) and id(item) not in seen:
            seen.add(id(item))
            if isinstance(item, dict):
                for key, sub in item.items():
                    yield str(key)
                    stack.append(sub)
            else:
                stack.extend(reversed(item))


def _substitute_env(doc: _Doc, text: str) -> str:
    """``substituteEnvMacros``: only references outside YAML comments count."""
    if "${env." not in text:
        return text
    try:
        scan = list(_strings_in(yaml.safe_load(text)))
    except (yaml.YAMLError, RecursionError):
        scan = [text]
    for chunk in scan:
        for match in _ENV_REF.finditer(chunk):
            name = match.group(1)
            value = os.environ.get(name)
            if value is None:
                raise doc.error(None, f"environment variable '{name}' is not set")
            if any(c in value for c in "\n\r\x00"):
                raise doc.error(
                    None,
                    f"environment variable '{name}' contains newlines or null bytes, "
                    "which llama-swap does not allow",
                )
            value = value.replace("\\", "\\\\").replace('"', '\\"')
            text = text.replace(match.group(0), value)
    return text


def _go_float(value: float) -> str:
    """Go's ``%v`` for a float64 (``strconv.FormatFloat(f, 'g', -1, 64)``, %e from 1e+06)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    point = len(digit_tuple) + exponent  # digits before the decimal point
    neg = "-" if sign else ""
    exp = point - 1
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{neg}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{neg}{digits}{'0' * (point - len(digits))}"
    return f"{neg}{digits[:point]}.{digits[point:]}"


def _macro_text(value: Any) -> str | None:
    """The text Go's ``%v`` gives a scalar macro value; None for a mapping macro."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, (int, str)):
        return str(value)
    return None


def _macro_list(doc: _Doc, node: yaml.Node, where: str) -> list[tuple[str, Any, yaml.Node]]:
    out: list[tuple[str, Any, yaml.Node]] = []
    for name, key_node, value_node in _items(doc, node, f"{where}macros"):
        if len(name) >= 64:
            raise doc.error(key_node, f"{where}macro name '{name}' exceeds 63 characters")
        if not _MACRO_NAME.match(name):
            raise doc.error(key_node, f"{where}macro name '{name}' must match ^[a-zA-Z0-9_-]+$")
        if name in ("PORT", "MODEL_ID"):
            raise doc.error(key_node, f"{where}macro name '{name}' is reserved")
        value: Any
        if isinstance(value_node, yaml.MappingNode):
            value = {"__mapping__": True}  # only usable as a whole YAML value, never in cmd
        elif isinstance(value_node, yaml.ScalarNode) and not _is_null(value_node):
            value = _scalar(value_node)
            if isinstance(value, str) and f"${{{name}}}" in value:
                raise doc.error(value_node, f"{where}macro '{name}' contains self-reference")
        else:
            raise doc.error(
                value_node,
                f"{where}macro '{name}' must be a scalar (string, number, bool) or a mapping",
            )
        out.append((name, value, value_node))
    return out


def _split_cmd(text: str) -> list[str]:
    """``SanitizeCommand``: drop comment lines, join trailing backslashes, POSIX split."""
    lines = []
    for line in text.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        lines.append(trimmed[:-1] + " " if trimmed.endswith("\\") else line)
    return shlex.split("\n".join(lines), comments=False, posix=True)


def _strip_comment_lines(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if not line.strip().startswith("#"))


# --------------------------------------------------------------------------- loading


_MAX_FLOW_DEPTH = 200


def _flow_depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting, counting brackets in strings too (over-counting
    only refuses configs no one writes)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}" and depth:
            depth -= 1
    return deepest


def load_config(path: str | os.PathLike[str]) -> SwapConfig:
    """Read a llama-swap config.yaml; raises SwapConfigError (one line, file:line)."""
    doc = _Doc(str(path))
    root = _compose(doc, path)
    top = {key: (key_node, value) for key, key_node, value in _items(doc, root, "config")}

    def get(key: str) -> yaml.Node | None:
        return top[key][1] if key in top else None

    start_port = _int(doc, get("startPort") or _NULL, "startPort", DEFAULT_START_PORT)
    if start_port < 1:
        raise doc.error(get("startPort"), "startPort must be greater than 1")
    global_ttl = _int(doc, get("globalTTL") or _NULL, "globalTTL", 0)
    if global_ttl < 0:
        raise doc.error(get("globalTTL"), "globalTTL must be >= 0")
    global_macros = _macro_list(doc, get("macros") or _NULL, "")

    model_items = _items(doc, get("models") or _NULL, "models")
    if not model_items:
        raise doc.error(get("models"), "no models defined")
    raw_models, alias_owner = _first_pass(doc, model_items)
    model_ids = {mid for mid, _, _ in model_items}
    models: dict[str, SwapModel] = {}
    next_port = start_port
    for mid in sorted(raw_models):  # ports go out in sorted model-ID order
        models[mid], next_port = _model(
            doc, mid, raw_models[mid], (global_ttl, global_macros, next_port)
        )
        extra = _param_aliases(doc, mid, raw_models[mid]["fields"], model_ids, alias_owner)
        if extra:
            models[mid] = replace(models[mid], aliases=models[mid].aliases + tuple(extra))
    models = {mid: models[mid] for mid, _, _ in model_items}  # file order

    groups_node, matrix_node = _routing(doc, top)
    if matrix_node is not None:
        matrix = _load_matrix(doc, matrix_node, models)
        return SwapConfig(models=models, groups=(), router="matrix", matrix=matrix)
    groups = _load_groups(doc, groups_node, models, alias_owner)
    router = "groups" if any(g.name != DEFAULT_GROUP_ID for g in groups) else "default"
    return SwapConfig(models=models, groups=groups, router=router, matrix=None)


def _compose(doc: _Doc, path: str | os.PathLike[str]) -> yaml.Node:
    """The file's YAML node tree, ``${env.X}`` substituted first (as llama-swap does)."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise doc.error(None, f"cannot read: {exc}") from None
    if _flow_depth(raw) > _MAX_FLOW_DEPTH:  # PyYAML's scanner is quadratic in the depth
        raise doc.error(None, f"invalid YAML: nested deeper than {_MAX_FLOW_DEPTH} levels")
    text = _substitute_env(doc, raw)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{doc.path}:{mark.line + 1}" if mark else doc.path
        problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        raise SwapConfigError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise doc.error(None, f"invalid YAML: {exc}") from None
    except RecursionError:  # PyYAML composes recursively: "[[[[..." thousands deep
        raise doc.error(None, "invalid YAML: nested too deeply") from None
    if root is None:
        raise doc.error(None, "empty config: no models defined")
    return root


def _first_pass(
    doc: _Doc, model_items: list[tuple[str, yaml.Node, yaml.Node]]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each model's raw fields, cmd and aliases; which model owns each alias."""
    raw_models: dict[str, dict[str, Any]] = {}
    alias_owner: dict[str, str] = {}
    for mid, key_node, value_node in model_items:
        where = f"models.{mid}"
        fields = {k: v for k, _, v in _items(doc, value_node, where)}
        cmd = _str(doc, fields.get("cmd", _NULL), f"{where}.cmd")
        if not cmd.strip():
            raise doc.error(key_node, f"model '{mid}' has no cmd")
        aliases = _str_list(doc, fields.get("aliases", _NULL), f"{where}.aliases")
        for alias in aliases:
            if alias in alias_owner:
                raise doc.error(fields["aliases"], f"duplicate alias {alias} found in model: {mid}")
            alias_owner[alias] = mid
        raw_models[mid] = {"key": key_node, "fields": fields, "cmd": cmd, "aliases": aliases}
    return raw_models, alias_owner


def _model(
    doc: _Doc, mid: str, info: dict[str, Any], context: tuple[int, list[Any], int]
) -> tuple[SwapModel, int]:
    """One model with its macros and ``${PORT}`` expanded; the next free port after it.
    ``context``: (globalTTL, the global macros, the next port)."""
    global_ttl, global_macros, next_port = context
    fields, key_node = info["fields"], info["key"]
    where = f"models.{mid}"
    env = _str_list(doc, fields.get("env", _NULL), f"{where}.env")
    ttl = _int(doc, fields.get("ttl", _NULL), f"{where}.ttl", -1)
    if ttl == -1:
        ttl = global_ttl
    if ttl < 0:
        raise doc.error(fields.get("ttl"), f"model {mid}: invalid TTL value {ttl}")
    proxy = _str(doc, fields.get("proxy", _NULL), f"{where}.proxy", DEFAULT_PROXY)
    own_macros = _macro_list(doc, fields.get("macros", _NULL), f"model {mid}: ")
    cmd = _strip_comment_lines(info["cmd"])
    if not cmd.strip():
        raise doc.error(key_node, f"model '{mid}' has no cmd")
    merged = _merged_macros(mid, global_macros, own_macros)
    cmd, proxy = _expand_macros(doc, key_node, mid, (cmd, proxy), merged)
    if "${PORT}" in cmd:
        cmd = cmd.replace("${PORT}", str(next_port))
        proxy = proxy.replace("${PORT}", str(next_port))
        next_port += 1
    elif "${PORT}" in proxy:
        raise doc.error(
            key_node,
            f"model {mid}: proxy uses ${{PORT}} but cmd does not; set proxy "
            "(${PORT} is only available when used in cmd)",
        )
    for field_name, value in (("cmd", cmd), ("proxy", proxy)):
        match = _MACRO_REF.search(value)
        if match:
            raise doc.error(
                key_node, f"unknown macro '${{{match.group(1)}}}' found in {mid}.{field_name}"
            )
    try:
        argv = _split_cmd(cmd)
    except ValueError as exc:
        raise doc.error(key_node, f"model {mid}: cannot split cmd: {exc}") from None
    if not argv:
        raise doc.error(key_node, f"model '{mid}' has no cmd")
    aliases = tuple(info["aliases"])
    return SwapModel(mid, tuple(argv), tuple(env), aliases, ttl or None), next_port


def _merged_macros(
    mid: str, global_macros: list[Any], own_macros: list[Any]
) -> list[tuple[str, Any]]:
    """MODEL_ID, the global macros, then the model's own (which replace a global one of
    the same name in place)."""
    merged: list[tuple[str, Any]] = [("MODEL_ID", mid)]
    merged += [(name, value) for name, value, _ in global_macros]
    for name, value, _ in own_macros:
        for i, (existing, _old) in enumerate(merged):
            if existing == name:
                merged[i] = (name, value)
                break
        else:
            merged.append((name, value))
    return merged


def _expand_macros(
    doc: _Doc,
    key_node: yaml.Node,
    mid: str,
    texts: tuple[str, str],
    merged: list[tuple[str, Any]],
) -> tuple[str, str]:
    """``${NAME}`` in cmd and proxy replaced, the last defined first (llama-swap's order),
    bounded: a cmd that would grow past _MAX_CMD_CHARS is an error, not a memory bomb."""
    cmd, proxy = texts
    for name, value in reversed(merged):
        slug = f"${{{name}}}"
        if slug not in cmd and slug not in proxy:
            continue
        rendered = _macro_text(value)
        if rendered is None:
            raise doc.error(
                key_node, f"model {mid}: mapping macro '{name}' cannot be used in cmd or proxy"
            )
        grow = len(rendered) - len(slug)
        if (
            max(len(cmd) + cmd.count(slug) * grow, len(proxy) + proxy.count(slug) * grow)
            > _MAX_CMD_CHARS
        ):
            raise doc.error(
                key_node,
                f"model {mid}: cmd grows past {_MAX_CMD_CHARS} "
                f"characters when macro '{name}' is expanded",
            )
        cmd = cmd.replace(slug, rendered)
        proxy = proxy.replace(slug, rendered)
    return cmd, proxy


def _param_aliases(
    doc: _Doc,
    mid: str,
    fields: dict[str, yaml.Node],
    model_ids: set[str],
    alias_owner: dict[str, str],
) -> list[str]:
    """The ``filters.setParamsByID`` keys that act as extra aliases of this model."""
    where = f"models.{mid}"
    filters = {k: v for k, _, v in _items(doc, fields.get("filters", _NULL), f"{where}.filters")}
    by_id = _items(doc, filters.get("setParamsByID", _NULL), f"{where}.filters.setParamsByID")
    extra = []
    for key, key_node2, _value in by_id:
        if key == mid:
            continue
        if key in model_ids:
            raise doc.error(
                key_node2,
                f"model {mid} filters.setParamsByID: key '{key}' conflicts with a model ID",
            )
        owner = alias_owner.get(key)
        if owner is not None and owner != mid:
            raise doc.error(
                key_node2, f"duplicate alias '{key}' in model {mid}, already used by {owner}"
            )
        if owner is None:
            alias_owner[key] = mid
            extra.append(key)
    return extra


_NULL = yaml.ScalarNode("tag:yaml.org,2002:null", "")


def _routing(
    doc: _Doc, top: dict[str, tuple[yaml.Node, yaml.Node]]
) -> tuple[yaml.Node | None, yaml.Node | None]:
    """(groups node, matrix node) after the legacy/new-style normalisation of load.go."""

    def present(node: yaml.Node | None) -> TypeGuard[yaml.Node]:
        return node is not None and not _is_null(node)

    legacy_groups = top.get("groups", (None, None))[1]
    legacy_matrix = top.get("matrix", (None, None))[1]
    has_groups = present(legacy_groups) and bool(_items(doc, legacy_groups, "groups"))
    has_top_level = present(legacy_matrix) or has_groups

    routing = {k: v for k, _, v in _items(doc, top.get("routing", (None, _NULL))[1], "routing")}
    router = {k: v for k, _, v in _items(doc, routing.get("router", _NULL), "routing.router")}
    use_node = router.get("use", _NULL)
    use = _str(doc, use_node, "routing.router.use")
    settings = {
        k: v for k, _, v in _items(doc, router.get("settings", _NULL), "routing.router.settings")
    }
    new_groups = settings.get("groups")
    new_matrix = settings.get("matrix")
    has_new_groups = present(new_groups) and bool(
        _items(doc, new_groups, "routing.router.settings.groups")
    )
    has_routing = bool(use) or present(new_matrix) or has_new_groups

    if has_top_level and has_routing:
        raise doc.error(
            top.get("routing", (None, None))[0],
            "config uses both the legacy top-level 'matrix'/'groups' keys and the "
            "'routing.router' block",
        )
    if has_top_level:
        if present(legacy_matrix) and has_groups:
            raise doc.error(legacy_matrix, "config cannot use both 'groups' and 'matrix'")
        return (legacy_groups if has_groups else None), (
            legacy_matrix if present(legacy_matrix) else None
        )
    if use == "matrix":
        if not present(new_matrix):
            raise doc.error(
                use_node,
                "routing.router.use is 'matrix' but routing.router.settings.matrix is not set",
            )
        return None, new_matrix
    if use in ("group", ""):
        return (new_groups if has_new_groups else None), None
    raise doc.error(use_node, f"routing.router.use: unknown router '{use}' (valid: group, matrix)")


def _load_groups(
    doc: _Doc,
    node: yaml.Node | None,
    models: dict[str, SwapModel],
    alias_owner: dict[str, str],
) -> tuple[SwapGroup, ...]:
    groups: list[SwapGroup] = []
    used: dict[str, str] = {}
    for name, key_node, value in _items(doc, node or _NULL, "groups"):
        where = f"groups.{name}"
        if name == DEFAULT_GROUP_ID:
            raise doc.error(key_node, f"group name '{DEFAULT_GROUP_ID}' is reserved by llama-swap")
        fields = {k: v for k, _, v in _items(doc, value, where)}
        members = _str_list(doc, fields.get("members", _NULL), f"{where}.members")
        seen: set[str] = set()
        for member in members:
            if member in seen:
                raise doc.error(
                    fields["members"], f"duplicate model member {member} found in group: {name}"
                )
            seen.add(member)
            if member in used:
                raise doc.error(
                    fields["members"],
                    f"model member {member} is used in multiple groups: {used[member]} and {name}",
                )
            used[member] = name
            if member not in models:
                hint = (
                    f"; it is an alias of '{alias_owner[member]}', use the model ID"
                    if member in alias_owner
                    else ""
                )
                raise doc.error(
                    fields["members"], f"group '{name}': member '{member}' is not a model ID{hint}"
                )
        groups.append(
            SwapGroup(
                name=name,
                swap=_bool(doc, fields.get("swap", _NULL), f"{where}.swap", True),
                exclusive=_bool(doc, fields.get("exclusive", _NULL), f"{where}.exclusive", True),
                persistent=_bool(
                    doc, fields.get("persistent", _NULL), f"{where}.persistent", False
                ),
                members=tuple(members),
            )
        )
    orphans = tuple(sorted(mid for mid in models if mid not in used))
    if orphans:
        groups.append(SwapGroup(DEFAULT_GROUP_ID, True, True, False, orphans))
    return tuple(groups)


# --------------------------------------------------------------------------- matrix sets


def _load_matrix(doc: _Doc, node: yaml.Node, models: dict[str, SwapModel]) -> SwapMatrix:
    fields = {k: (kn, v) for k, kn, v in _items(doc, node, "matrix")}
    known = {"vars", "evict_costs", "sets"}
    for key, (key_node, _v) in fields.items():
        if key not in known:
            raise doc.error(key_node, f"matrix feature '{key}' not supported")
    variables: dict[str, str] = {}
    for key, key_node, value in _items(doc, fields.get("vars", (None, _NULL))[1], "matrix.vars"):
        if not _VAR_KEY.match(key):
            raise doc.error(
                key_node, f"matrix: var key '{key}' must be 1-32 characters of [a-zA-Z0-9.-]"
            )
        target = _str(doc, value, f"matrix.vars.{key}")
        if target not in models:
            raise doc.error(value, f"matrix: var key '{key}' references unknown model '{target}'")
        variables[key] = target

    def lookup(ident: str) -> str | None:
        if ident in variables:
            return variables[ident]
        return ident if ident in models else None

    costs: dict[str, int] = {}
    for key, key_node, value in _items(
        doc, fields.get("evict_costs", (None, _NULL))[1], "matrix.evict_costs"
    ):
        cost = _int(doc, value, f"matrix.evict_costs.{key}", 0)
        if cost <= 0:
            raise doc.error(
                value, f"matrix: evict_cost multiplier for '{key}' must be a positive integer"
            )
        real = lookup(key)
        if real is None:
            raise doc.error(key_node, f"matrix: evict_costs: unknown var or model '{key}'")
        costs[real] = cost

    set_items = _items(doc, fields.get("sets", (None, _NULL))[1], "matrix.sets")
    if not set_items:
        raise doc.error(node, "matrix must define at least one set")
    names = {name for name, _, _ in set_items}
    roots: dict[str, Node] = {}
    deps: dict[str, list[str]] = {}
    sets: list[tuple[str, str]] = []
    for name, _key_node, value in set_items:
        dsl = _str(doc, value, f"matrix.sets.{name}")
        try:
            root = parse_dsl(dsl)
        except ValueError as exc:
            raise doc.error(value, f"matrix: set '{name}': {exc}") from None
        refs: list[str] = []
        for item in walk(root):
            if item.kind == "leaf":
                real = lookup(item.name)
                if real is None:
                    raise doc.error(
                        value, f"matrix: set '{name}': unknown var or model '{item.name}'"
                    )
                item.name = real
            elif item.kind == "ref":
                if item.name not in names:
                    raise doc.error(
                        value, f"matrix: set '{name}' references undefined set '{item.name}'"
                    )
                if item.name not in refs:
                    refs.append(item.name)
        roots[name], deps[name] = root, refs
        sets.append((name, dsl))

    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str) -> None:
        if state.get(name) == 1:
            raise doc.error(node, f"matrix: circular reference detected involving set '{name}'")
        if state.get(name) == 2:
            return
        state[name] = 1
        for dep in deps[name]:
            visit(dep)
        state[name] = 2
        order.append(name)

    for name, _dsl in sets:
        visit(name)
    for root in roots.values():
        for item in walk(root):
            if item.kind == "ref":
                item.ref = roots[item.name]

    program = tuple((name, roots[name], frozenset(support(roots[name]))) for name in order)
    return SwapMatrix(vars=variables, evict_costs=costs, sets=tuple(sets), _program=program)


# --------------------------------------------------------------------------- queries


def resolve(config: SwapConfig, name: str) -> SwapModel:
    """A model by ID or alias (IDs win, as in llama-swap's RealModelName)."""
    if name in config.models:
        return config.models[name]
    for model in config.models.values():
        if name in model.aliases:
            return model
    known = ", ".join(sorted(config.models))
    raise SwapConfigError(f"unknown model '{name}' (known: {known})")
