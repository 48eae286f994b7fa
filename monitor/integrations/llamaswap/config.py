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

The loading is here; the typed result is :mod:`.schema`, the YAML reads :mod:`.yaml_nodes`,
macros :mod:`.macros`, matrix sets :mod:`.matrix_sets` (:mod:`.matrix` holds the DSL); which
models a swap unloads is :mod:`.evictions`.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from monitor.integrations.llamaswap.macros import (
    _macro_list,
    _macro_text,
    _split_cmd,
    _strip_comment_lines,
    _substitute_env,
)
from monitor.integrations.llamaswap.matrix_sets import _load_matrix
from monitor.integrations.llamaswap.schema import (
    DEFAULT_GROUP_ID,
    DEFAULT_PROXY,
    DEFAULT_START_PORT,
    SwapConfig,
    SwapConfigError,
    SwapGroup,
    SwapModel,
)
from monitor.integrations.llamaswap.yaml_nodes import (
    _NULL,
    _bool,
    _Doc,
    _int,
    _is_null,
    _items,
    _str,
    _str_list,
)

_MACRO_REF = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
_MAX_CMD_CHARS = 1 << 20  # a cmd whose macros expand past this is refused (nested macros)


__all__ = ["load_config", "resolve"]

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
