"""Typed reads of llama-swap's YAML nodes as Go's yaml.v3 decodes them (ints, bools, lists,
null), each error one line naming ``file:line``."""

from __future__ import annotations

import re
from typing import Any

import yaml

from monitor.integrations.llamaswap.schema import SwapConfigError

_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_NULL = yaml.ScalarNode("tag:yaml.org,2002:null", "")


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
