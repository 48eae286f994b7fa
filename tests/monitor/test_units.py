"""Byte units (monitor/units.py): what each way of writing a byte count gives, and that no
module keeps its own copy of the constants or of a formatter."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from monitor.units import (
    GIB,
    KIB,
    MIB,
    TIB,
    gib,
    gib_number,
    gib_or_mib,
    human_bytes,
    mib,
    precise_bytes,
)

ROOT = Path(__file__).resolve().parents[2]


def test_constants() -> None:
    assert (KIB, MIB, GIB, TIB) == (2**10, 2**20, 2**30, 2**40)


@pytest.mark.parametrize(("n", "one", "two"), [
    (0, "0.0 GiB", "0.00 GiB"),
    (GIB, "1.0 GiB", "1.00 GiB"),
    (int(12.345 * GIB), "12.3 GiB", "12.34 GiB"),
    (-GIB // 2, "-0.5 GiB", "-0.50 GiB"),
])  # fmt: skip
def test_gib(n: int, one: str, two: str) -> None:
    assert gib(n) == one and gib(n, 2) == two
    assert gib(None) == "?" and gib(None, unknown="unknown") == "unknown"


def test_mib_and_gib_number() -> None:
    assert mib(1536 * KIB) == "1.50 MiB" and mib(None) == "?"
    assert gib_number(int(1.256 * GIB)) == 1.26 and gib_number(0) == 0.0


@pytest.mark.parametrize(("n", "text"), [
    (None, "?"), (0, "0 MiB"), (300 * MIB, "300 MiB"), (GIB - 1, "1024 MiB"), (GIB, "1.0 GiB"),
    (int(3.25 * GIB), "3.2 GiB"),
])  # fmt: skip
def test_gib_or_mib(n: int | None, text: str) -> None:
    assert gib_or_mib(n) == text


@pytest.mark.parametrize(("n", "text"), [
    (None, "-"), (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (MIB, "1.0 MiB"), (GIB, "1.0 GiB"), (TIB, "1.0 TiB"), (3 * 1024 * TIB, "3072.0 TiB"),
    (-1536, "-1.5 KiB"),
])  # fmt: skip
def test_human_bytes(n: int | None, text: str) -> None:
    assert human_bytes(n) == text


@pytest.mark.parametrize(("n", "text"), [
    (None, "?"), (0, "0 B"), (512, "512 B"), (1536, "1.5 KiB"), (12 * MIB, "12.0 MiB"),
    (-int(1.5 * GIB), "-1.50 GiB"), (0.5, "0 B"),
])  # fmt: skip
def test_precise_bytes(n: float | None, text: str) -> None:
    assert precise_bytes(n) == text


def test_no_module_keeps_its_own_constants_or_formatters() -> None:
    """GIB/MIB/KIB come from monitor/units.py only; the old local formatters are gone."""
    own = re.compile(r"^\s*(GIB|MIB|KIB|TIB|gib)\s*=\s*1024", re.MULTILINE)
    local_fmt = re.compile(r"^def (_gib|gib|_mib|human_bytes)\(", re.MULTILINE)
    offenders = []
    for folder in ("monitor", "tui", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "monitor" / "units.py":
                continue
            text = path.read_text()
            if own.search(text) or local_fmt.search(text):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
