"""monitor.gguf.reader: real-shape headers written by gguf's GGUFWriter, read back and cross-checked
with gguf.GGUFReader; malformed and random files end in GgufError within a time bound."""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
import time
import tracemalloc
from pathlib import Path

import gguf
import pytest
from gguf_models import (
    F32,
    Q4_K,
    Q8_0,
    GGUFValue,
    GGUFValueType,
    dense_tensors,
    qwen3_8b,
    write_model,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.gguf import reader as mg
from monitor.gguf.reader import GgufError, GgufHeader, SkippedArray, TensorInfo, read_header

TIME_BOUND_S = 5.0  # a hang or a blow-up, not speed: speed is bench/bench_gguf.py
STRING = GGUFValueType.STRING

# Qwen3-8B, computed here from the shapes, not through any table: Q8_0 blocks are 32
# elements in 34 bytes (2-byte scale + 32 int8), F32 is 4 bytes.
N_LAYER, N_EMBD, N_FF, N_VOCAB, HEAD, N_HEAD, N_KV = 36, 4096, 12288, 151936, 128, 32, 8
Q8_PER_LAYER = N_EMBD * (2 * N_HEAD * HEAD + 2 * N_KV * HEAD + 3 * N_FF)  # q,o + k,v + ffn
F32_PER_LAYER = 2 * N_EMBD + 2 * HEAD  # attn/ffn norms + q/k norms
QWEN3_8B_BYTES = (
    N_LAYER * (Q8_PER_LAYER // 32 * 34 + F32_PER_LAYER * 4)
    + 2 * (N_EMBD * N_VOCAB // 32 * 34)  # token_embd + output
    + N_EMBD * 4  # output_norm
)


@pytest.fixture(autouse=True)
def _fresh_cache():
    mg.clear_cache()
    yield
    mg.clear_cache()


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Path:
    """Qwen3-8B header with the real vocabulary length and 151,000 merges, sparse data."""
    metadata, tensors = qwen3_8b()
    path = tmp_path_factory.mktemp("qwen3") / "Qwen3-8B-Q8_0.gguf"
    write_model(path, "qwen3", metadata, tensors, vocab_size=N_VOCAB, merges=151_000)
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A 2-layer header with a 3,000-token vocabulary, ending after the header."""
    metadata, tensors = qwen3_8b(n_layer=2, n_vocab=3000)
    path = tmp_path_factory.mktemp("small") / "small.gguf"
    write_model(path, "qwen3", metadata, tensors, vocab_size=3000, merges=2000, sparse_data=False)
    return path


@pytest.fixture(scope="module")
def small_sparse(tmp_path_factory) -> Path:
    """The same with its (sparse) data region, which GGUFReader needs to map."""
    metadata, tensors = qwen3_8b(n_layer=2, n_vocab=3000)
    path = tmp_path_factory.mktemp("small") / "small-sparse.gguf"
    write_model(path, "qwen3", metadata, tensors, vocab_size=3000, merges=2000, scores=True)
    return path


def timed_error(path: Path, *fragments: str, names: Path | None = None, **kw) -> GgufError:
    """read_header fails with GgufError in bounded time; the one-line message names a file."""
    t0 = time.perf_counter()
    with pytest.raises(GgufError) as info:
        read_header(path, **kw)
    elapsed = time.perf_counter() - t0
    assert elapsed < TIME_BOUND_S, (elapsed, str(info.value))
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{names or path}: "), msg
    for fragment in fragments:
        assert fragment in msg, msg
    return info.value


# --- real shapes ------------------------------------------------------------------------


def test_qwen3_8b_metadata_tensors_and_bytes(qwen3: Path) -> None:
    h = read_header(qwen3)
    assert isinstance(h, GgufHeader)
    assert h.path == str(qwen3) and h.version == 3 and h.split_count == 1
    assert h.architecture == "qwen3"
    assert h.arch_get("block_count") == 36
    assert h.arch_get("embedding_length") == 4096
    assert h.arch_get("feed_forward_length") == 12288
    assert h.arch_get("attention.head_count") == 32
    assert h.arch_get("attention.head_count_kv") == 8
    assert h.arch_get("attention.key_length") == 128
    assert h.arch_get("context_length") == 40960
    assert h.arch_get("missing", "dflt") == "dflt"
    assert h.get("general.name") == "Qwen3 8B"
    assert h.get(gguf.Keys.General.FILE_TYPE) == 7
    assert h.get("qwen3.rope.freq_base") == 1_000_000.0
    assert h.get("qwen3.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    assert h.get("tokenizer.ggml.model") == "gpt2"
    assert h.get("tokenizer.ggml.tokens") == SkippedArray(STRING, N_VOCAB)
    assert h.get("tokenizer.ggml.merges") == SkippedArray(STRING, 151_000)
    assert h.get("tokenizer.ggml.token_type") == SkippedArray(GGUFValueType.INT32, N_VOCAB)
    assert h.n_vocab == N_VOCAB

    assert len(h.tensors) == 36 * 11 + 3
    by_name = {t.name: t for t in h.tensors}
    assert by_name["token_embd.weight"] == TensorInfo(
        "token_embd.weight", (4096, 151936), 8, 4096 * 151936 // 32 * 34
    )
    assert by_name["blk.35.attn_k.weight"].shape == (4096, 1024)
    assert by_name["blk.0.ffn_down.weight"].shape == (12288, 4096)
    assert by_name["blk.0.attn_q_norm.weight"] == TensorInfo(
        "blk.0.attn_q_norm.weight", (128,), 0, 512
    )
    assert by_name["output.weight"].type_name == "Q8_0"
    assert h.tensor_bytes == QWEN3_8B_BYTES == 8_703_561_728  # Q8_0 Qwen3-8B: ~8.7 GB
    assert h.file_bytes == os.path.getsize(qwen3)
    assert h.file_bytes - h.tensor_bytes < 7 * 2**20  # header + padding only


def test_all_value_types_and_small_arrays(tmp_path: Path) -> None:
    V = GGUFValueType
    metadata = {
        "t.u8": GGUFValue(255, V.UINT8),
        "t.i8": GGUFValue(-128, V.INT8),
        "t.u16": GGUFValue(65535, V.UINT16),
        "t.i16": GGUFValue(-32768, V.INT16),
        "t.u32": GGUFValue(2**32 - 1, V.UINT32),
        "t.i32": GGUFValue(-(2**31), V.INT32),
        "t.f32": GGUFValue(0.5, V.FLOAT32),
        "t.bool": GGUFValue(True, V.BOOL),
        "t.str": GGUFValue("héllo", V.STRING),
        "t.u64": GGUFValue(2**64 - 1, V.UINT64),
        "t.i64": GGUFValue(-(2**63), V.INT64),
        "t.f64": GGUFValue(0.1, V.FLOAT64),
        "t.head_count_kv": [8, 0, 8, 4],  # per-layer, INT32 as the converters write
        "t.swa_pattern": [True, False, True, True],
        "t.floats": [0.25, 0.5],
        "t.strings": ["a", "bc"],
        "t.u64s": GGUFValue([1, 2**40], V.ARRAY, V.UINT64),
        "t.nested": [[1, 2], [3]],
    }
    (path,) = write_model(tmp_path / "v.gguf", "t", metadata, [("a", (32,), F32)])
    m = read_header(path).metadata
    assert m["t.u8"] == 255 and m["t.i8"] == -128
    assert m["t.u16"] == 65535 and m["t.i16"] == -32768
    assert m["t.u32"] == 2**32 - 1 and m["t.i32"] == -(2**31)
    assert m["t.f32"] == 0.5 and m["t.f64"] == 0.1
    assert m["t.bool"] is True and m["t.str"] == "héllo"
    assert m["t.u64"] == 2**64 - 1 and m["t.i64"] == -(2**63)
    assert m["t.head_count_kv"] == (8, 0, 8, 4)
    assert m["t.swa_pattern"] == (True, False, True, True)
    assert m["t.floats"] == (0.25, 0.5)
    assert m["t.strings"] == ("a", "bc")
    assert m["t.u64s"] == (1, 2**40)
    assert m["t.nested"] == ((1, 2), (3,))

    short = read_header(path, max_array_items=3).metadata
    assert short["t.head_count_kv"] == SkippedArray(GGUFValueType.INT32, 4)
    assert short["t.swa_pattern"] == SkippedArray(GGUFValueType.BOOL, 4)
    assert short["t.floats"] == (0.25, 0.5)
    assert short["t.u8"] == 255  # what follows a skipped array is still read right
    none = read_header(path, max_array_items=0).metadata
    assert none["t.strings"] == SkippedArray(STRING, 2)
    assert none["t.nested"] == SkippedArray(GGUFValueType.ARRAY, 2)
    assert none["t.f64"] == 0.1


def test_per_layer_head_count_kv_and_vocab_size_fallback(tmp_path: Path) -> None:
    kv = [8, 0, 0, 8, 0, 0]  # lfm2-style: 0 marks a recurrent layer
    tensors = dense_tensors(
        n_layer=6,
        n_embd=256,
        n_head=4,
        n_head_kv=[max(k, 1) for k in kv],
        head_dim=64,
        n_ff=512,
        n_vocab=1000,
        ggml_type=Q4_K,
        output=False,
    )
    metadata = {"lfm2.block_count": 6, "lfm2.attention.head_count_kv": kv, "lfm2.vocab_size": 1000}
    (path,) = write_model(tmp_path / "lfm2.gguf", "lfm2", metadata, tensors)
    h = read_header(path)
    assert h.arch_get("attention.head_count_kv") == tuple(kv)
    assert h.n_vocab == 1000  # no token list: {arch}.vocab_size
    assert "output.weight" not in {t.name for t in h.tensors}  # tied embeddings
    # Q4_K: 256-element blocks of 144 bytes
    assert h.tensors[0] == TensorInfo("token_embd.weight", (256, 1000), 12, 1000 * 144)


def test_version_2_is_read(tmp_path: Path) -> None:
    (path,) = write_model(
        tmp_path / "v2.gguf", "llama", {"llama.block_count": 1}, [("x", (64,), Q8_0)], version=2
    )
    h = read_header(path)
    assert h.version == 2 and h.tensor_bytes == 2 * 34 and h.arch_get("block_count") == 1


# --- splits -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def split3(tmp_path_factory) -> list[Path]:
    metadata, tensors = qwen3_8b()
    metadata["qwen3.vocab_size"] = N_VOCAB
    base = tmp_path_factory.mktemp("split") / "Qwen3-8B-Q8_0.gguf"
    return write_model(base, "qwen3", metadata, tensors, split=3)


def test_split_model_sums_tensors_and_takes_metadata_from_split_1(split3: list[Path]) -> None:
    assert [p.name for p in split3] == [f"Qwen3-8B-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    h = read_header(split3[0])
    assert h.split_count == 3 and h.path == str(split3[0])
    assert len(h.tensors) == 399
    assert h.tensors[0].name == "token_embd.weight" and h.tensors[-1].name == "output.weight"
    assert h.tensor_bytes == QWEN3_8B_BYTES
    assert h.file_bytes == sum(os.path.getsize(p) for p in split3)
    assert h.arch_get("block_count") == 36 and h.get("general.name") == "Qwen3 8B"
    assert h.get("split.count") == 3 and h.get("split.no") == 0
    assert h.n_vocab == N_VOCAB
    # a later split resolves to split 1 (and hits the same cache entry)
    assert read_header(split3[2]) is h
    # each later split on its own holds only the split keys
    with contextlib.ExitStack() as stack:
        opened = mg._open_split(str(split3[1]), 1, 3, stack)
        later = mg._read_one(str(split3[1]), opened, 4096, mg._Budget())[1]
    assert set(later) == {"split.no", "split.count", "split.tensors.count"}


def test_split_missing_part_is_named(tmp_path: Path) -> None:
    paths = write_model(
        tmp_path / "m.gguf", "llama", {}, [(f"t{i}", (32,), F32) for i in range(6)], split=3
    )
    paths[1].unlink()
    for p in (paths[0], paths[2]):
        err = timed_error(p, "split 2 of 3 is missing", names=paths[1])
        assert err.path == str(paths[1])


def test_split_count_must_agree_with_the_name(tmp_path: Path) -> None:
    paths = write_model(
        tmp_path / "m.gguf", "llama", {}, [(f"t{i}", (32,), F32) for i in range(6)], split=3
    )
    two = [tmp_path / f"two-0000{i}-of-00002.gguf" for i in (1, 2)]
    for src, dst in zip(paths, two, strict=False):
        os.link(src, dst)
    timed_error(two[0], "split.count is 3 but the name says 2")
    plain = tmp_path / "renamed.gguf"
    os.link(paths[0], plain)
    timed_error(plain, "split.count is 3", "-00001-of-00003.gguf")
    # a split whose split.no is wrong: swap parts 2 and 3
    swapped = [tmp_path / f"sw-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for src, dst in zip([paths[0], paths[2], paths[1]], swapped, strict=True):
        os.link(src, dst)
    err = timed_error(swapped[0], "split.no is 2 but this is split 2", names=swapped[1])
    assert err.path == str(swapped[1])


# --- agreement with gguf.GGUFReader -------------------------------------------------------


def test_agrees_with_gguf_reader(small_sparse: Path) -> None:
    ours = read_header(small_sparse, max_array_items=10**6)
    theirs = gguf.GGUFReader(small_sparse)
    assert ours.version == 3
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for mine, ref in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.ggml_type == int(ref.tensor_type), mine.name
        assert mine.n_bytes == int(ref.n_bytes), mine.name
        assert list(mine.shape) == [int(d) for d in ref.shape], mine.name
    assert set(ours.metadata) == set(theirs.fields) - {
        "GGUF.version",
        "GGUF.tensor_count",
        "GGUF.kv_count",
    }
    for key, value in ours.metadata.items():
        ref = theirs.fields[key].contents()
        assert (list(value) if isinstance(value, tuple) else value) == ref, key
    # past the limit the long lists are skipped but keep their length
    skipped = read_header(small_sparse, max_array_items=1000)
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        assert skipped.get(key) == SkippedArray(STRING, len(theirs.fields[key].data))


# --- malformed ----------------------------------------------------------------------------


def raw(version: int = 3, n_tensors: int = 0, n_kv: int = 0, magic: bytes = b"GGUF") -> bytes:
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def gstr(s: bytes | str) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def tensor(name: str, dims: list[int], ggml_type: int, n_dims: int | None = None) -> bytes:
    n = len(dims) if n_dims is None else n_dims
    return gstr(name) + struct.pack(f"<I{len(dims)}QIQ", n, *dims, ggml_type, 0)


def kv_u32(key: str, v: int) -> bytes:
    return gstr(key) + struct.pack("<II", GGUFValueType.UINT32, v)


PAD = b"\0" * 64  # room after the claims, so only the claim is wrong


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (b"", ("truncated at byte 0 while reading the magic",)),
        (b"GGU", ("truncated at byte 3",)),
        (b"PK\x03\x04" + PAD, ("not a GGUF file (magic b'PK\\x03\\x04')",)),
        (raw(version=1) + PAD, ("unsupported GGUF version 1",)),
        (raw(version=99) + PAD, ("unsupported GGUF version 99",)),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), ("big-endian GGUF (version 3",)),
        (
            raw(n_tensors=2**63) + PAD,
            (
                "tensor count claims 9,223,372,036,854,775,808 items",
                "but the file has only 64 bytes left",
            ),
        ),
        (raw(n_kv=2**64 - 1) + PAD, ("metadata count claims",)),
        (raw(n_kv=1) + struct.pack("<Q", 2**62) + PAD, ("claims a string of",)),
        (
            raw(n_kv=1) + gstr("k") + struct.pack("<IIQ", 9, GGUFValueType.UINT64, 2**40) + PAD,
            ("metadata 'k' claims 1,099,511,627,776 items of at least 8 bytes",),
        ),
        (
            raw(n_kv=1) + gstr("k") + struct.pack("<IIQ", 9, GGUFValueType.STRING, 2**40) + PAD,
            ("metadata 'k' claims 1,099,511,627,776 items",),
        ),
        (
            raw(n_kv=1)
            + gstr("k")
            + struct.pack("<IIQ", 9, 8, 3)
            + gstr("a")
            + struct.pack("<Q", 2**62)
            + PAD,
            ("metadata 'k' claims a string of 4,611,686,018,427,387,904 bytes",),
        ),
        (raw(n_kv=1) + gstr("k") + struct.pack("<I", 13) + PAD, ("unknown value type 13",)),
        (raw(n_kv=1) + gstr("k") + struct.pack("<II", 9, 77) + PAD, ("unknown array item type",)),
        (
            raw(n_kv=1) + gstr("k") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 200 + PAD,
            ("nested deeper than 8",),
        ),
        (raw(n_kv=2) + kv_u32("k", 1) + kv_u32("k", 2) + PAD, ("duplicate metadata key 'k'",)),
        (raw(n_tensors=1) + tensor("w", [1] * 9, 0) + PAD, ("'w' has 9 dimensions (at most 4)",)),
        (raw(n_tensors=1) + tensor("w", [32], 1000) + PAD, ("'w' has unknown ggml type 1000",)),
        (raw(n_tensors=1) + tensor("w", [32], 4) + PAD, ("unknown ggml type 4",)),  # Q4_2, gone
        (raw(n_tensors=1) + tensor("w", [33], 8) + PAD, ("ne0 33 is not a multiple of Q8_0",)),
        (raw(n_tensors=1) + tensor("w", [2**62, 2**62], 0) + PAD, ("impossible shape",)),
        (raw(n_tensors=2) + tensor("w", [32], 0) * 2 + PAD, ("duplicate tensor name 'w'",)),
        (raw(n_tensors=1) + tensor("w", [32, 32], 0)[:-4], ("truncated at byte",)),
    ],
)
def test_malformed(tmp_path: Path, content: bytes, fragments: tuple[str, ...]) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    tracemalloc.start()
    try:
        timed_error(path, *fragments)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, peak  # a claim never turns into an allocation


def test_long_names_are_cut_in_messages(tmp_path: Path) -> None:
    path = tmp_path / "long.gguf"
    path.write_bytes(raw(n_kv=1) + gstr("k" * 100_000) + struct.pack("<I", 13) + PAD)
    err = timed_error(path, "metadata 'kkkk", "'... has unknown value type 13")
    assert len(err.problem) < 200


def test_truncated_everywhere(small: Path, tmp_path: Path) -> None:
    data = small.read_bytes()
    read_header(small)  # the whole thing is fine
    end = len(data) - 32  # the last <= 31 bytes are alignment padding after the tensor infos
    cuts = sorted({end * k // 50 for k in range(50)} | {end - 1, end - 9, 5, 8, 23, 24})
    for cut in cuts:
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        for limit in (0, 4096, 10**6):
            err = timed_error(path, max_array_items=limit)
            assert "truncated at byte" in err.problem or "claims" in err.problem, err
            assert f"truncated at byte {cut} " in err.problem or "claims" in err.problem, err
        path.unlink()


def test_not_regular_missing_and_one_line(tmp_path: Path) -> None:
    timed_error(tmp_path, "not a regular file")
    timed_error(tmp_path / "nope.gguf", "no such file")
    weird = tmp_path / "two\nlines.gguf"
    weird.write_bytes(b"nope" + PAD)
    with pytest.raises(GgufError) as info:
        read_header(weird)
    assert str(info.value) == f"{tmp_path}/two\\nlines.gguf: not a GGUF file (magic b'nope')"


def test_big_endian_file_from_gguf_writer(tmp_path: Path) -> None:
    path = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    timed_error(path, "big-endian GGUF (version 3 byte-swapped) is not supported")


_SEED_PREFIX = raw(n_tensors=2, n_kv=3)


@settings(
    max_examples=300,
    deadline=TIME_BOUND_S * 1000,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.one_of(
        st.binary(max_size=2048),
        st.binary(max_size=2048).map(lambda b: _SEED_PREFIX + b),
        st.binary(max_size=2048).map(lambda b: raw(n_kv=1) + gstr("k") + struct.pack("<I", 9) + b),
    )
)
def test_random_bytes_only_gguf_error(content: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(content)
        f.flush()
        mg.clear_cache()
        t0 = time.perf_counter()
        try:
            read_header(f.name)
        except GgufError as e:
            assert "\n" not in str(e) and str(e).startswith(f.name)
        assert time.perf_counter() - t0 < TIME_BOUND_S


@settings(
    max_examples=300,
    deadline=TIME_BOUND_S * 1000,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_header_only_gguf_error(small: Path, flips: list[tuple[int, int]]) -> None:
    data = bytearray(small.read_bytes())
    for where, byte in flips:
        data[where % len(data)] = byte
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(data)
        f.flush()
        mg.clear_cache()
        t0 = time.perf_counter()
        with contextlib.suppress(GgufError):
            read_header(f.name)
        assert time.perf_counter() - t0 < TIME_BOUND_S


# --- cache --------------------------------------------------------------------------------


def test_cache_hit_and_mtime_invalidation(small: Path, tmp_path: Path) -> None:
    path = tmp_path / "c.gguf"
    os.link(small, path)
    first = read_header(path)
    assert read_header(path) is first
    assert read_header(str(path)) is first
    assert read_header(path, max_array_items=10) is not first  # the limit is part of the key
    st_ = path.stat()
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000))
    second = read_header(path)
    assert second is not first and second == first
    assert read_header(path) is second


def test_cache_sees_each_split_and_is_bounded(tmp_path: Path) -> None:
    paths = write_model(
        tmp_path / "m.gguf", "llama", {}, [(f"t{i}", (32,), F32) for i in range(6)], split=3
    )
    first = read_header(paths[0])
    st_ = paths[2].stat()
    os.utime(paths[2], ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000))
    assert read_header(paths[0]) is not first
    for limit in range(100):
        read_header(paths[0], max_array_items=limit)
    assert len(mg._CACHE) == 64


# --- tensor data cut short ----------------------------------------------------------------


def test_tensor_data_cut_short_is_reported_not_raised(tmp_path: Path) -> None:
    """llama.cpp refuses a file whose last tensor's data runs past its end ("tensor data is
    not within file bounds"); the padding after the last tensor may be missing."""
    metadata, tensors = qwen3_8b(n_layer=2, n_vocab=3000)
    path = write_model(tmp_path / "m.gguf", "qwen3", metadata, tensors, vocab_size=3000)[0]
    full = path.stat().st_size
    assert read_header(path).truncated is None
    last = read_header(path).tensors[-1].n_bytes
    end = full - (-(-last // 32) * 32 - last)  # the writer pads every tensor to 32 bytes
    os.truncate(path, end)
    assert read_header(path).truncated is None  # only the padding is gone: llama.cpp loads it
    os.truncate(path, end - 1)
    assert read_header(path).truncated == (
        f"truncated: the file is {end - 1:,} bytes but its tensor data ends at byte {end:,} "
        "(an interrupted download or copy?)"
    )
    os.truncate(path, full // 3)
    h = read_header(path)  # the header itself still reads: the rest is the caller's choice
    assert h.tensor_bytes > full // 3 and f"is {full // 3:,} bytes" in (h.truncated or "")


def test_header_only_file_is_truncated(small: Path) -> None:
    assert (read_header(small).truncated or "").startswith("truncated: the file is ")


def test_truncated_split_is_named(tmp_path: Path) -> None:
    paths = write_model(
        tmp_path / "m.gguf", "llama", {}, [(f"t{i}", (4096,), F32) for i in range(6)], split=3
    )
    assert read_header(paths[0]).truncated is None
    os.truncate(paths[1], paths[1].stat().st_size - 100)
    assert (read_header(paths[2]).truncated or "").startswith(
        "truncated: split 2 ('m-00002-of-00003.gguf') is "
    )
