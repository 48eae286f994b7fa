"""One read side (issue 15): SQL lives in monitor/store/ only. The TUI holds no SQL and
touches no SQLite; the rest of monitor/ runs no query (it may catch sqlite3's errors)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SQL = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b|\bINSERT\s+(OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b"
    r"|\bDELETE\s+FROM\b|\b(CREATE|DROP|ALTER)\s+(TABLE|INDEX|VIEW|TRIGGER)\b"
    r"|\bPRAGMA\s+\w+"
)
# the calls of a DB-API connection / cursor and of sqlite-utils' Database and Table
DB_CALLS = {
    "execute",
    "executemany",
    "executescript",
    "fetchone",
    "fetchall",
    "fetchmany",
    "rows_where",
    "insert_all",
    "upsert_all",
    "create_table",
    "enable_wal",
}
DB_MODULES = {"sqlite3", "sqlite_utils", "apsw"}


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal, an f-string's literal parts joined (so a query split over
    f-string pieces is still seen)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else " x "
                for v in node.values
            )
            out.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return out


def sql_found(path: Path, *, imports_allowed: bool) -> list[str]:
    """What in ``path`` is SQL or a database call, as ``file:line what`` lines."""
    tree = ast.parse(path.read_text(), str(path))
    name = str(path.relative_to(ROOT))
    found = []
    for line, text in _strings(tree):
        if SQL.search(text):
            found.append(f"{name}:{line} SQL text {text[:60]!r}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and (node.func.attr in DB_CALLS)
        ):
            found.append(f"{name}:{node.lineno} calls .{node.func.attr}()")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and (
                node.func.attr == "connect"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in DB_MODULES
            )
        ):
            found.append(f"{name}:{node.lineno} opens a database")
        if imports_allowed:
            continue
        modules = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for module in modules:
            if module.split(".")[0] in DB_MODULES:
                found.append(f"{name}:{node.lineno} imports {module}")
    return found


def test_the_tui_holds_no_sql_and_no_sqlite() -> None:
    found = [
        f
        for path in sorted((ROOT / "tui").rglob("*.py"))
        for f in sql_found(path, imports_allowed=False)
    ]
    assert found == []


def test_monitor_runs_sql_only_in_its_store_package() -> None:
    store = ROOT / "monitor" / "store"
    found = [
        f
        for path in sorted((ROOT / "monitor").rglob("*.py"))
        if store not in path.parents
        for f in sql_found(path, imports_allowed=True)
    ]
    assert found == []


def test_the_check_sees_sql_where_it_is() -> None:
    """The checks above are only worth their silence if they do see the store's queries."""
    found = [
        f
        for path in sorted((ROOT / "monitor" / "store").rglob("*.py"))
        for f in sql_found(path, imports_allowed=False)
    ]
    assert any("reads.py" in f and "SQL text" in f for f in found)
    assert any("reads.py" in f and ".execute()" in f for f in found)
    assert any("imports sqlite3" in f for f in found)
