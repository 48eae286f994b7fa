"""llama-swap's macros and ``${env.VAR}`` substitution (internal/config/macros.go, load.go):
what a macro value renders as (Go's float formatting), the model's macro list, and the
``cmd`` split as ``SanitizeCommand`` splits it."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import yaml

from monitor.integrations.llamaswap.yaml_nodes import _Doc, _is_null, _items, _scalar

_MACRO_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_ENV_REF = re.compile(r"\$\{env\.([a-zA-Z_][a-zA-Z0-9_]*)\}")


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
