"""The arrows of DESIGN.md: collectors <- monitor <- tui, and the daemon carries no UI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_daemon_and_cli_never_import_textual_or_rich() -> None:
    code = (
        "import sys, monitor.daemon.loop, monitor.cli.main, monitor.store.database,"
        " monitor.daemon.sampler;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'textual', 'rich', 'tui'});"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == ""


def imports_of(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


def test_collectors_import_neither_monitor_nor_tui() -> None:
    for path, names in imports_of("collectors").items():
        assert not names & {"monitor", "tui", "textual", "rich"}, path


def test_monitor_imports_no_ui() -> None:
    for path, names in imports_of("monitor").items():
        assert not names & {"tui", "textual", "rich"}, path


def test_only_the_vendor_wrappers_import_vendor_libraries() -> None:
    for package in ("collectors", "monitor", "tui"):
        for path, names in imports_of(package).items():
            if "pynvml" in names:  # and the recorder of the driver's answers, for fixtures
                assert path in {"collectors/nvml.py", "collectors/nvml_recorder.py"}, path
            if "amdsmi" in names:
                assert path == "collectors/amdsmi.py", path


def test_the_layers_contracts_hold() -> None:
    """``[tool.importlinter]`` in pyproject.toml (docs/architecture.md's arrows), function-
    local imports included; scripts/test runs it too, this keeps a plain pytest honest."""
    lint = Path(sys.executable).parent / "lint-imports"
    assert lint.exists(), "import-linter is missing: bash scripts/install --test"
    out = subprocess.run(
        [str(lint), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert "0 broken" in out.stdout


def test_the_tui_facade_gives_each_name_from_its_module_lazily() -> None:
    """monitor/api.py: every name of its table is the object its module defines, the
    ``TYPE_CHECKING`` imports (what mypy and import-linter see) are the same table, and
    importing the facade loads none of the modules behind it."""
    code = (
        "import sys, monitor.api as api;"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('monitor.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert set(out.stdout.strip().split(",")) == {"monitor.api"}

    import importlib

    import monitor.api as api

    assert sorted(api.__all__) == sorted(api._WHERE)
    for name, (module, attribute) in api._WHERE.items():
        assert getattr(api, name) is getattr(importlib.import_module(module), attribute), name
    typed: dict[str, tuple[str, str]] = {}
    for node in ast.walk(ast.parse((ROOT / "monitor" / "api.py").read_text())):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                for a in imp.names:
                    typed[a.asname or a.name] = (imp.module, a.name)
    assert typed == api._WHERE
    with pytest.raises(AttributeError, match="no attribute 'Store'"):
        api.Store  # noqa: B018


def test_the_facade_contract_forbids_every_other_part_of_monitor() -> None:
    """A new package of monitor/ is forbidden to the TUI until it is listed as allowed:
    the TUI may use monitor.api and the shared vocabulary only."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "forbidden"]
    allowed = {
        "monitor.api",
        "monitor.errors",
        "monitor.units",
        "monitor.textsafe",
        "monitor.device_names",
    }
    parts = {
        f"monitor.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "monitor").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert set(contract["forbidden_modules"]) == parts - allowed
