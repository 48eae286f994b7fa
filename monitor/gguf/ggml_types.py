"""gguf's type tables (``gguf/constants.py``) without the rest of the ``gguf`` package.

``import gguf`` runs its package ``__init__``, which imports numpy, the reader, the writer
and the vocabulary tools: ~90 ms of a ~300 ms ``vramscope predict`` on a 2 vCPU box
(``python -X importtime``). The tables we need (``GGML_QUANT_SIZES``, the value and
quantisation type enums, the metadata ``Keys``) live in ``gguf/constants.py``, which imports
only ``enum`` and ``typing``, but executing it still costs 11-24 ms of a cold ``predict``
here (``python -X importtime``, issue 32 item 4: hundreds of enum members and tensor-name
tables for every architecture). So the few tables used are copied below from gguf 0.19.0's
``gguf/constants.py`` (the GGUF spec's value types; ggml's ``ggml_type`` ids and block
sizes from ggml.h / ggml.c ``type_traits``); tests/monitor/gguf/test_ggml_types.py compares them
with the installed package in a fresh interpreter, so an upgrade that adds a type fails
there. When ``gguf.constants`` is already imported (a test writing models with
``gguf.GGUFWriter``), that module is reused. Both sets are ``IntEnum``/``str`` constants,
so values, dictionary keys and comparisons agree.
"""

from __future__ import annotations

import sys
from enum import IntEnum


class GGMLQuantizationType(IntEnum):
    """ggml's tensor types (``enum ggml_type``), as gguf 0.19.0 names them."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


class GGUFValueType(IntEnum):
    """The GGUF metadata value types (``gguf_type``)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# type -> (elements per block, bytes per block), gguf 0.19.0's GGML_QUANT_SIZES
GGML_QUANT_SIZES: dict[int, tuple[int, int]] = {  # IntEnum keys: an int finds them
    GGMLQuantizationType.F32: (1, 4),
    GGMLQuantizationType.F16: (1, 2),
    GGMLQuantizationType.Q4_0: (32, 18),
    GGMLQuantizationType.Q4_1: (32, 20),
    GGMLQuantizationType.Q5_0: (32, 22),
    GGMLQuantizationType.Q5_1: (32, 24),
    GGMLQuantizationType.Q8_0: (32, 34),
    GGMLQuantizationType.Q8_1: (32, 40),
    GGMLQuantizationType.Q2_K: (256, 84),
    GGMLQuantizationType.Q3_K: (256, 110),
    GGMLQuantizationType.Q4_K: (256, 144),
    GGMLQuantizationType.Q5_K: (256, 176),
    GGMLQuantizationType.Q6_K: (256, 210),
    GGMLQuantizationType.Q8_K: (256, 292),
    GGMLQuantizationType.IQ2_XXS: (256, 66),
    GGMLQuantizationType.IQ2_XS: (256, 74),
    GGMLQuantizationType.IQ3_XXS: (256, 98),
    GGMLQuantizationType.IQ1_S: (256, 50),
    GGMLQuantizationType.IQ4_NL: (32, 18),
    GGMLQuantizationType.IQ3_S: (256, 110),
    GGMLQuantizationType.IQ2_S: (256, 82),
    GGMLQuantizationType.IQ4_XS: (256, 136),
    GGMLQuantizationType.I8: (1, 1),
    GGMLQuantizationType.I16: (1, 2),
    GGMLQuantizationType.I32: (1, 4),
    GGMLQuantizationType.I64: (1, 8),
    GGMLQuantizationType.F64: (1, 8),
    GGMLQuantizationType.IQ1_M: (256, 56),
    GGMLQuantizationType.BF16: (1, 2),
    GGMLQuantizationType.TQ1_0: (256, 54),
    GGMLQuantizationType.TQ2_0: (256, 66),
    GGMLQuantizationType.MXFP4: (32, 17),
    GGMLQuantizationType.NVFP4: (64, 36),
    GGMLQuantizationType.Q1_0: (128, 18),
}


class Keys:
    """The metadata keys read (gguf's ``Keys``, only these)."""

    class General:
        ARCHITECTURE = "general.architecture"
        ALIGNMENT = "general.alignment"

    class Tokenizer:
        LIST = "tokenizer.ggml.tokens"

    class Split:
        LLM_KV_SPLIT_NO = "split.no"
        LLM_KV_SPLIT_COUNT = "split.count"
        LLM_KV_SPLIT_TENSORS_COUNT = "split.tensors.count"


if "gguf.constants" in sys.modules:  # the package's own, so identities agree in tests
    _c = sys.modules["gguf.constants"]
    GGML_QUANT_SIZES = _c.GGML_QUANT_SIZES
    GGMLQuantizationType = _c.GGMLQuantizationType  # type: ignore[misc]
    GGUFValueType = _c.GGUFValueType  # type: ignore[misc]
    Keys = _c.Keys  # type: ignore[misc]
