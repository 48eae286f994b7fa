"""The TUI sits on top: nothing below it imports it, and its data layer needs no textual.

(``tests/test_import_hygiene.py`` already checks, in a subprocess, that ``monitor.daemon.loop``
and ``monitor.cli.main`` import neither textual, rich nor tui.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(statement: str) -> set[str]:
    code = (
        f"import sys; {statement}; "
        "print(','.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return set(out.stdout.strip().split(","))


def test_the_daemon_never_imports_textual() -> None:
    assert not loaded_after("import monitor.daemon.loop") & {"textual", "rich", "tui"}


def test_the_tui_data_layer_needs_no_textual_and_no_nvml_at_import() -> None:
    loaded = loaded_after("import tui.source")
    assert "textual" not in loaded
    assert "pynvml" not in loaded  # the sampler (and NVML) load in the poll worker


def test_the_app_module_loads_no_vendor_library() -> None:
    loaded = loaded_after("import tui.app")
    assert "textual" in loaded
    assert not loaded & {"pynvml", "amdsmi"}
