"""gguf's type tables without the gguf package (monitor/gguf/ggml_types.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fresh_python(code: str) -> str:
    """What ``code`` prints in a new interpreter (nothing imported beforehand)."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_reading_headers_does_not_import_numpy_or_the_gguf_package():
    code = (
        "import sys, monitor.gguf.reader, monitor.estimate.kv;"
        "print(sorted(m for m in ('numpy', 'gguf') if m in sys.modules))"
    )
    assert fresh_python(code) == "[]"


def test_tables_agree_with_the_gguf_package():
    import gguf

    from monitor.gguf import ggml_types as t

    assert set(t.GGML_QUANT_SIZES) == set(gguf.GGML_QUANT_SIZES)
    for qtype, sizes in gguf.GGML_QUANT_SIZES.items():
        assert t.GGML_QUANT_SIZES[qtype] == sizes
        assert t.GGMLQuantizationType(int(qtype)) == qtype
    assert t.Keys.General.ARCHITECTURE == gguf.Keys.General.ARCHITECTURE
    assert t.GGUFValueType.STRING == gguf.GGUFValueType.STRING


def test_loaded_after_gguf_it_reuses_gguf_constants():
    code = (
        "import gguf, monitor.gguf.ggml_types as t;"
        "print(t.GGMLQuantizationType is gguf.GGMLQuantizationType)"
    )
    assert fresh_python(code) == "True"
