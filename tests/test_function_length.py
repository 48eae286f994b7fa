"""No function over 100 lines in the product (issue 30): long functions grow by accretion
(five became ten in one turn). Counted as ruff's PLR0915 cannot: every line from ``def``
to the last line of the body, docstring and help text included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 100


def _long_functions(
    root: Path = ROOT, packages: tuple[str, ...] = ("collectors", "monitor", "tui")
) -> list[str]:
    out = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > MAX_LINES:
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} {lines}")
    return out


def test_no_function_is_over_100_lines() -> None:
    assert _long_functions() == []


def test_the_count_sees_a_long_function(tmp_path: Path) -> None:
    """The walk finds a 101-line method in a nested module and leaves a 100-line one."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    long_body = "\n".join(f"        x{i} = {i}" for i in range(100))
    ok_body = "\n".join(f"    y{i} = {i}" for i in range(99))
    (tmp_path / "pkg" / "sub" / "m.py").write_text(
        f"class C:\n    def long(self):\n{long_body}\n\ndef fine():\n{ok_body}\n"
    )
    assert _long_functions(tmp_path, ("pkg",)) == ["pkg/sub/m.py:2 long 101"]
