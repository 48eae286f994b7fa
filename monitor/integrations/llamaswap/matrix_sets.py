"""llama-swap's matrix routing (``routing.router.settings`` / legacy ``matrix:``) parsed and
checked as internal/config/matrix.go does: its vars, evict costs and sets, each set's DSL
compiled by matrix.py."""

from __future__ import annotations

import re

import yaml

from monitor.integrations.llamaswap.matrix import Node, parse_dsl, support, walk
from monitor.integrations.llamaswap.schema import SwapMatrix, SwapModel
from monitor.integrations.llamaswap.yaml_nodes import _NULL, _Doc, _int, _items, _str

_VAR_KEY = re.compile(r"^[a-zA-Z0-9.-]{1,32}$")


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
