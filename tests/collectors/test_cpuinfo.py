"""collectors/cpuinfo.py on real /proc/cpuinfo text: this box's, an x86 block, an arm64
block, and files that hold no flags line."""

from __future__ import annotations

from pathlib import Path

from collectors.base import Roots
from collectors.cpuinfo import (
    LLAMA_CPU_FEATURES,
    llama_cpu_features,
    parse_cpu_flags,
    read_cpu_flags,
)

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu avx2 avx512f avx512_vnni amx_tile amx_int8 amx_bf16

processor\t: 1
flags\t\t: fpu sse
"""
ARM64 = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp sve i8mm
CPU implementer\t: 0x41
"""


def test_the_first_x86_block_gives_the_flags_and_llama_keeps_its_four() -> None:
    flags = parse_cpu_flags(X86)
    assert flags is not None and {"amx_int8", "avx512f", "fpu"} <= flags and "sse" not in flags
    assert llama_cpu_features(flags) == LLAMA_CPU_FEATURES


def test_arm64_features_line_and_no_line_at_all() -> None:
    arm = parse_cpu_flags(ARM64)
    assert arm is not None and "asimddp" in arm
    assert llama_cpu_features(arm) == ()  # known: none of the x86 layouts
    assert parse_cpu_flags("processor\t: 0\nmodel name\t: x\n") is None
    assert llama_cpu_features(None) is None


def test_this_box_and_a_recorded_tree(tmp_path: Path) -> None:
    here = read_cpu_flags()
    assert here is not None and here == parse_cpu_flags(Path("/proc/cpuinfo").read_text())
    (tmp_path / "proc").mkdir()
    (tmp_path / "sys").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(X86)
    tree = read_cpu_flags(Roots(tmp_path / "proc", tmp_path / "sys"))
    assert tree is not None and "amx_int8" in tree
    (tmp_path / "proc" / "cpuinfo").unlink()
    assert read_cpu_flags(Roots(tmp_path / "proc", tmp_path / "sys")) is None


def test_a_fifo_in_a_tree_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    (tmp_path / "proc").mkdir()
    (tmp_path / "sys").mkdir()
    os.mkfifo(tmp_path / "proc" / "cpuinfo")
    assert read_cpu_flags(Roots(tmp_path / "proc", tmp_path / "sys")) is None
