"""No function over 100 lines in the product (issue 30): long functions grow by accretion
(five became ten in one turn). Counted as ruff's PLR0915 cannot: every line from ``def``
to the last line of the body, docstring and help text included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 100


def _long_functions() -> list[str]:
    out = []
    for package in ("collectors", "monitor", "tui"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > MAX_LINES:
                        out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} {lines}")
    return out


def test_no_function_is_over_100_lines() -> None:
    assert _long_functions() == []


def test_the_count_sees_a_long_function(tmp_path: Path) -> None:
    """The walk counts what it says: a 101-line function in a parsed module is found."""
    body = "\n".join(f"    x{i} = {i}" for i in range(100))
    tree = ast.parse(f"def f():\n{body}\n")
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert (node.end_lineno or 0) - node.lineno + 1 == 101
