"""The GGUF header reader under 10,000+ hypothesis cases: mutated real headers, spliced
prefixes and random bytes end in GgufError (one line naming the file) or a header, each
within a time bound and a bounded peak of Python memory (tracemalloc)."""

from __future__ import annotations

import struct
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from gguf_models import qwen3_8b, write_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.gguf import reader as mg
from monitor.gguf.reader import GgufError, GgufHeader, read_header

# a hang guard, not a speed claim: CPU seconds of this process (a busy box's waits do not
# count); the reader's own bound is its item and byte budget (reader.MAX_HEADER_ITEMS)
CPU_GUARD_S = 5.0
PEAK_BOUND_BYTES = 32 * 1024 * 1024  # the seed header itself reads in well under 2 MiB
CASES = 10_500


def _seed() -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        metadata, tensors = qwen3_8b(n_layer=2, n_vocab=300)
        path = Path(d) / "seed.gguf"
        write_model(path, "qwen3", metadata, tensors, vocab_size=300, merges=200, sparse_data=False)
        return path.read_bytes()


SEED = _seed()
_U64 = st.sampled_from([0, 1, 255, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**64 - 1])


def _mutate(data: bytes, edits: list[tuple[int, int, int, bytes]], cut: int) -> bytes:
    """Overwrite bytes, plant huge/odd u64 counts and lengths, insert, delete; then cut."""
    out = bytearray(data)
    for kind, where, value, blob in edits:
        at = where % max(1, len(out))
        if kind == 0:
            out[at] = value & 0xFF
        elif kind == 1:
            out[at : at + 8] = struct.pack("<Q", value)
        elif kind == 2:
            out[at:at] = blob
        else:
            del out[at : at + 1 + value % 64]
    return bytes(out[: cut % (len(out) + 1)]) if cut >= 0 else bytes(out)


_EDITS = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(0, 2**20),
        st.one_of(st.integers(0, 2**64 - 1), _U64),
        st.binary(max_size=16),
    ),
    min_size=1,
    max_size=6,
)
CONTENT = st.one_of(
    st.tuples(st.just(SEED), _EDITS, st.integers(-1, len(SEED))).map(lambda t: _mutate(*t)),
    st.binary(max_size=1024).map(lambda b: SEED[:24] + b),  # a valid preamble, then noise
    st.tuples(st.integers(0, 4), _U64, _U64, st.binary(max_size=256)).map(
        lambda t: b"GGUF" + struct.pack("<IQQ", *t[:3]) + t[3]
    ),
    st.binary(max_size=512),
)


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


@pytest.mark.slow
@settings(
    max_examples=CASES,
    deadline=None,  # wall-clock varies with the box; CPU_GUARD_S bounds each case
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(content=CONTENT)
def test_gguf_reader_10k_cases_only_gguf_error_bounded(
    traced: None, tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    mg.clear_cache()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.process_time()
    try:
        got = read_header(path)
    except GgufError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path)), str(exc)
    else:
        assert isinstance(got, GgufHeader)
    elapsed = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1] - base
    mg.clear_cache()
    assert elapsed < CPU_GUARD_S, elapsed
    assert peak < PEAK_BOUND_BYTES, peak


def test_seed_is_a_valid_header(tmp_path: Path) -> None:
    path = tmp_path / "seed.gguf"
    path.write_bytes(SEED)
    assert isinstance(read_header(path), GgufHeader)
