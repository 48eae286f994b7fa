"""llama-swap's matrix router DSL: ``a & b``, ``a | b``, parentheses, ``+set`` references.

Source: mostlygeek/llama-swap ``internal/matrix/{dsl,program}.go``. Every set is an
expression describing model sets that may run together; identifiers are ``vars`` keys or
model IDs (:mod:`.config` resolves them). :func:`evaluate` gives the maximal sets of models
an expression allows among the ones that matter (the target and the running models).
"""

from __future__ import annotations

from collections.abc import Iterable


class Node:
    __slots__ = ("children", "kind", "name", "ref")

    def __init__(self, kind: str, name: str = "", children: list[Node] | None = None) -> None:
        self.kind = kind  # "leaf" | "ref" | "and" | "or"
        self.name = name
        self.children = children or []
        self.ref: Node | None = None


def _is_ident(ch: str) -> bool:
    return ch.isalpha() or ch.isdigit() or ch in "_-."


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "&|()":
            tokens.append((ch, ch))
            i += 1
        elif ch == "+":
            i += 1
            start = i
            while i < len(text) and _is_ident(text[i]):
                i += 1
            if i == start:
                raise ValueError(f"expected set name after '+' at position {start}")
            tokens.append(("ref", text[start:i]))
        elif _is_ident(ch):
            start = i
            while i < len(text) and _is_ident(text[i]):
                i += 1
            tokens.append(("ident", text[start:i]))
        else:
            raise ValueError(f"unexpected character {ch!r} at position {i}")
    tokens.append(("eof", ""))
    return tokens


def parse_dsl(text: str) -> Node:
    text = text.strip()
    if not text:
        raise ValueError("empty DSL expression")
    tokens = _tokenize(text)
    pos = 0

    def peek() -> str:
        return tokens[pos][0]

    def take() -> tuple[str, str]:
        nonlocal pos
        token = tokens[pos]
        if token[0] != "eof":
            pos += 1
        return token

    def parse_or() -> Node:
        children = [parse_and()]
        while peek() == "|":
            take()
            children.append(parse_and())
        return children[0] if len(children) == 1 else Node("or", children=children)

    def parse_and() -> Node:
        children = [parse_atom()]
        while peek() == "&":
            take()
            children.append(parse_atom())
        return children[0] if len(children) == 1 else Node("and", children=children)

    def parse_atom() -> Node:
        kind, value = take()
        if kind == "ident":
            return Node("leaf", value)
        if kind == "ref":
            return Node("ref", value)
        if kind == "(":
            inner = parse_or()
            if take()[0] != ")":
                raise ValueError("missing closing parenthesis")
            return inner
        raise ValueError(f"unexpected token {value!r}")

    root = parse_or()
    if peek() != "eof":
        raise ValueError(f"unexpected token {tokens[pos][1]!r} after expression")
    return root


def walk(node: Node) -> Iterable[Node]:
    yield node
    for child in node.children:
        yield from walk(child)


def support(node: Node) -> set[str]:
    if node.kind == "leaf":
        return {node.name}
    if node.kind == "ref":
        assert node.ref is not None
        return support(node.ref)
    out: set[str] = set()
    for child in node.children:
        out |= support(child)
    return out


def _add_to_frontier(states: list[frozenset[str]], candidate: frozenset[str]) -> None:
    """``addToFrontier``: keep only maximal masks, in first-seen order."""
    if any(candidate <= state for state in states):
        return
    states[:] = [state for state in states if not state <= candidate]
    states.append(candidate)


def evaluate(
    node: Node, relevant: frozenset[str], memo: dict[int, list[frozenset[str]]]
) -> list[frozenset[str]]:
    cached = memo.get(id(node))
    if cached is not None:
        return cached
    states: list[frozenset[str]]
    if node.kind == "leaf":
        states = [frozenset({node.name}) & relevant]
    elif node.kind == "ref":
        assert node.ref is not None
        states = evaluate(node.ref, relevant, memo)
    elif node.kind == "or":
        states = []
        for child in node.children:
            for state in evaluate(child, relevant, memo):
                _add_to_frontier(states, state)
    else:
        states = [frozenset()]
        for child in node.children:
            combined: list[frozenset[str]] = []
            for left in states:
                for right in evaluate(child, relevant, memo):
                    _add_to_frontier(combined, left | right)
            states = combined
    memo[id(node)] = states
    return states
