"""gguf's type tables without the gguf package (monitor/gguf/ggml_types.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


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


def test_the_copied_tables_agree_with_the_installed_gguf_package():
    """Issue 32 item 4: the tables are copied (gguf/constants.py costs 11-24 ms to run);
    loaded before gguf in a fresh interpreter they are the copies, and every type, size,
    value type and key must equal the installed package's (an upgrade adding a type fails
    here)."""
    code = (
        "import json, monitor.gguf.ggml_types as t, gguf.constants as c;"
        "own = t.GGMLQuantizationType is not c.GGMLQuantizationType;"
        "q = lambda e: sorted((m.name, int(m)) for m in e);"
        "s = lambda d: sorted((int(k), v) for k, v in d.items());"
        "keys = [(a, b) for a, b in (('General', 'ARCHITECTURE'), ('General', 'ALIGNMENT'),"
        " ('Tokenizer', 'LIST'), ('Split', 'LLM_KV_SPLIT_NO'), ('Split', 'LLM_KV_SPLIT_COUNT'),"
        " ('Split', 'LLM_KV_SPLIT_TENSORS_COUNT'))];"
        "k = lambda m: [getattr(getattr(m.Keys, a), b) for a, b in keys];"
        "print(json.dumps([own, q(t.GGMLQuantizationType) == q(c.GGMLQuantizationType),"
        " q(t.GGUFValueType) == q(c.GGUFValueType),"
        " s(t.GGML_QUANT_SIZES) == s(c.GGML_QUANT_SIZES), k(t) == k(c)]))"
    )
    assert fresh_python(code) == "[true, true, true, true, true]"
