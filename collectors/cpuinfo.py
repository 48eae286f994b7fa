"""The CPU's feature flags, from ``/proc/cpuinfo``: they decide which weights llama.cpp's CPU
backend copies into AMX / CPU_REPACK buffers (monitor/estimate/repack.py).

The kernel lists one block per logical CPU, each with the same ``flags`` line on x86 (on arm64
the line is ``Features``); the first is enough. Bounded: /proc/cpuinfo of a 512-thread box
is ~1 MiB, and only the first block is parsed. Read through ``collectors._fs``, so
``--proc-root`` trees and ``vramscope capture`` include it.
"""

from __future__ import annotations

from collectors import _fs
from collectors.base import Roots

_MAX_FLAGS_LINE = 16 * 1024
# The flags that change where llama.cpp's CPU backend puts weights (ggml-cpu: AMX needs
# amx_int8 + avx512_vnni, CPU_REPACK's x86 layouts avx2 / avx512f).
LLAMA_CPU_FEATURES = ("amx_int8", "avx512_vnni", "avx512f", "avx2")


def parse_cpu_flags(text: str) -> frozenset[str] | None:
    """The first ``flags`` (x86) or ``Features`` (arm64) line's words; None when absent."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features") and len(value) <= _MAX_FLAGS_LINE:
            return frozenset(value.split())
    return None


def read_cpu_flags(roots: Roots | None = None) -> frozenset[str] | None:
    """This box's CPU flags (or the recorded tree's); None when /proc/cpuinfo is unreadable."""
    root = (roots or Roots()).proc
    text = _fs.try_read_text(root / "cpuinfo")
    return None if text is None else parse_cpu_flags(text)


def llama_cpu_features(flags: frozenset[str] | None) -> tuple[str, ...] | None:
    """Of ``flags``, those in :data:`LLAMA_CPU_FEATURES`, in that order; None stays None."""
    return None if flags is None else tuple(f for f in LLAMA_CPU_FEATURES if f in flags)
