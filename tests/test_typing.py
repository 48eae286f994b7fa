"""The strict typing of the judgements, the store and the daemon (issue 30): mypy's
``--strict`` is global-only, so pyproject.toml names its per-module flags for
``monitor.analysis``, ``monitor.store`` and ``monitor.daemon``; scripts/test's ``mypy``
run enforces them. This keeps that list whole and pointed at the right packages."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# what `mypy --strict` turns on that a per-module override may set (mypy's config docs:
# "strict"), beyond the global settings of [tool.mypy]
STRICT_PER_MODULE = {
    "disallow_any_generics": True,
    "disallow_subclassing_any": True,
    "disallow_untyped_calls": True,
    "disallow_untyped_decorators": True,
    "warn_return_any": True,
    "implicit_reexport": False,
    "extra_checks": True,
}
STRICT_GLOBAL = {
    "disallow_untyped_defs": True,
    "disallow_incomplete_defs": True,
    "check_untyped_defs": True,
    "strict_equality": True,
    "warn_redundant_casts": True,
    "warn_unused_ignores": True,
}


def test_the_verdict_packages_are_typed_strictly() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert {k: mypy.get(k) for k in STRICT_GLOBAL} == STRICT_GLOBAL
    (strict,) = [o for o in mypy["overrides"] if "monitor.store.*" in o["module"]]
    assert set(strict["module"]) >= {"monitor.analysis.*", "monitor.store.*", "monitor.daemon.*"}
    assert {k: strict.get(k) for k in STRICT_PER_MODULE} == STRICT_PER_MODULE
