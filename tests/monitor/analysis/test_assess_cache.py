"""The estimate cache keeps failures without the frames they went through (issue 32)."""

from __future__ import annotations

import gc
import struct
import tracemalloc
from pathlib import Path

import pytest

from monitor.analysis.assess_cache import detached
from monitor.daemon.watch import LoadWatch
from monitor.gguf.reader import GgufError
from monitor.servers import parse_command


def corrupt_gguf(path: Path, size_bytes: int) -> Path:
    """A GGUF v3 header whose first key's string claims 1 GiB: the parser has read its
    first 1 MiB chunk when it fails."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + struct.pack("<Q", 5) + b"key.x"
    head += struct.pack("<I", 8) + struct.pack("<Q", 1 << 30)
    path.write_bytes(head + b"\0" * size_bytes)
    return path


def test_a_cached_failure_does_not_keep_the_parsers_buffer(tmp_path: Path) -> None:
    """Before: each cached GgufError kept its traceback, so the parser's frame and its 1 MiB
    read buffer (1,040 KiB a launch, up to 256 launches) outlived the estimate."""
    watch = LoadWatch(tmp_path)
    specs = [
        parse_command(["llama-server", "-m", str(corrupt_gguf(tmp_path / f"m{i}.gguf", 3 << 20))])
        for i in range(8)
    ]
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for spec in specs:
            with pytest.raises(GgufError):
                watch.estimates.estimate(spec, [], None)
        gc.collect()
        kept_bytes = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert watch.estimates.estimated == 8
    assert kept_bytes / 8 < 128 * 1024  # was ~1 MiB each


def test_a_cached_failure_is_raised_again_the_same(tmp_path: Path) -> None:
    watch = LoadWatch(tmp_path)
    spec = parse_command(["llama-server", "-m", str(corrupt_gguf(tmp_path / "m.gguf", 64))])
    with pytest.raises(GgufError) as first:
        watch.estimates.estimate(spec, [], None)
    with pytest.raises(GgufError) as again:
        watch.estimates.estimate(spec, [], None)
    assert (watch.estimates.estimated, watch.estimates.hits) == (1, 1)
    assert str(again.value) == str(first.value) and "1,073,741,824 bytes" in str(again.value)
    assert again.value.path == first.value.path  # its attributes too


def test_detached_copies_keep_type_message_and_file_name() -> None:
    missing = FileNotFoundError(2, "No such file or directory", "/models/x.gguf")
    try:
        raise missing
    except FileNotFoundError as exc:
        copy = detached(exc)
    assert type(copy) is FileNotFoundError and copy is not missing
    assert (str(copy), copy.filename, copy.__traceback__) == (str(missing), "/models/x.gguf", None)
    assert str(detached(GgufError("/m.gguf", "bad magic"))) == "/m.gguf: bad magic"
