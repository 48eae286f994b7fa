"""gguf's type tables (``gguf/constants.py``) without the rest of the ``gguf`` package.

``import gguf`` runs its package ``__init__``, which imports numpy, the reader, the writer
and the vocabulary tools: ~90 ms of a ~300 ms ``vramscope predict`` on a 2 vCPU box
(``python -X importtime``). The tables we need (``GGML_QUANT_SIZES``, the value and
quantisation type enums, the metadata ``Keys``) live in ``gguf/constants.py``, which imports
only ``enum`` and ``typing``; this module loads that one file under a private name. When
``gguf.constants`` is already imported (a test writing models with ``gguf.GGUFWriter``),
that module is reused. Otherwise a later ``import gguf`` loads its own copy: the two enum
sets are ``IntEnum``/``str`` constants, so values, dictionary keys and comparisons agree.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

_PRIVATE_NAME = "monitor._gguf_constants"


def _constants() -> ModuleType:
    loaded = sys.modules.get("gguf.constants")
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("gguf")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the gguf package is not installed (pip install gguf)")
    path = f"{next(iter(spec.submodule_search_locations))}/constants.py"
    const_spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, path)
    if const_spec is None or const_spec.loader is None:
        raise ImportError(f"cannot load gguf's type tables from {path}")
    module = importlib.util.module_from_spec(const_spec)
    sys.modules[_PRIVATE_NAME] = module  # enum pickling and dataclasses look it up
    const_spec.loader.exec_module(module)
    return module


_c = _constants()
GGML_QUANT_SIZES = _c.GGML_QUANT_SIZES
GGMLQuantizationType = _c.GGMLQuantizationType
GGUFValueType = _c.GGUFValueType
Keys = _c.Keys
