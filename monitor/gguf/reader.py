"""Header-only GGUF reader: metadata and tensor infos, never tensor data.

Layout (as gguf-py 0.19 ``GGUFWriter.write_header_to_file`` / ``write_ti_data_to_file``
write it): magic ``GGUF``, u32 version, u64 n_tensors, u64 n_kv, the KV pairs, then per
tensor: name, u32 n_dims (<= GGML_MAX_DIMS = 4), u64 dims (ne0 first), u32 ggml type, u64
offset. v2 and v3 share this layout; v1 used u32 counts and is refused, as are big-endian
files (v3 allows them; nothing we monitor writes them). Byte sizes come from gguf's
``GGML_QUANT_SIZES``.

Why not ``gguf.GGUFReader``: it builds numpy views for every array element, 6.7 s and
523 MiB for a 152k-token vocabulary (../shared/research/estimation.md section 7). Here an
array longer than ``max_array_items`` is skipped by length (string arrays by walking the
u64 lengths only) and kept as :class:`SkippedArray`. Every count and length is checked
against the bytes left in the file before it is used, and a header (all splits together)
may read at most :data:`MAX_HEADER_BYTES` and walk at most :data:`MAX_HEADER_ITEMS`
whatever the file's size (a sparse 100 GB file passes any size check), so a hostile or
truncated file ends in :class:`GgufError` without large allocations or long loops.

Every split is opened once, ``O_NONBLOCK|O_NOFOLLOW`` after ``os.path.realpath`` (a model
symlinked into place, as the Hugging Face cache does, is followed on purpose; a link
swapped in after that is refused), and judged by ``fstat`` on the descriptor: a FIFO or
device node is refused without blocking, and there is no stat-then-open window. A
``guard`` may refuse the opened descriptor (the HTTP API's model_dirs and caller checks,
monitor/http/access.py) before a byte is read, on cache hits too.

Splits (``%s-%05d-of-%05d.gguf``, 1-based, ``src/llama.cpp``): the metadata comes from
split 1, the tensor infos from every split (estimation.md section 7). Results are cached by
(path, size, mtime_ns, inode) of every split.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from monitor.errors import ModelFileError
from monitor.gguf.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, Keys

_MAGIC = b"GGUF"
_SUPPORTED_VERSIONS = (2, 3)
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 8  # arrays of arrays (GGUFReader.contents cannot decode them either)
_CHUNK = 1 << 20
_INT64_MAX = 2**63 - 1
# The smallest encodings, used to bound counts against the bytes left in the file.
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, one-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # name length, n_dims, type, offset
_MIN_NESTED_ARRAY_BYTES = 4 + 8  # item type, length
MAX_HEADER_BYTES = 64 * 2**20
"""Bytes read per header, all splits together. The largest real headers (a 256k-token
vocabulary with its merges, estimation.md section 7) take about 15 MiB; reading stops here
however large the (possibly sparse) file is."""
MAX_HEADER_ITEMS = 10_000_000
"""Items walked per header, all splits together: metadata keys, tensor infos, strings and
elements of arrays that are read (a fixed-size array skipped by one seek counts 1). Real
headers hold ~1M (vocabulary, merges, token types); 10M Python steps take seconds, not the
hours a header claiming 12e9 empty strings would."""
MAX_SPLITS = 256
"""Splits of one model opened at once; published models have fewer than 100, and this keeps
the descriptors held far below the default limit of 1024."""
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
Guard = Callable[[int, str], None]
"""Called with (descriptor, the resolved path opened) for every split before it is read;
raises (a :class:`GgufError`) to refuse it."""

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SCALAR_FORMATS: dict[int, str] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
_SCALARS = {t: struct.Struct("<" + f) for t, f in _SCALAR_FORMATS.items()}
_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class GgufError(ModelFileError):
    """A GGUF file that cannot be read; ``str()`` is one line naming the file."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{_one_line(path)}: {_one_line(problem)}")


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ne0 first, as stored in the file
    ggml_type: int  # gguf.GGMLQuantizationType value
    n_bytes: int

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.ggml_type).name


@dataclass(frozen=True, slots=True)
class SkippedArray:
    """An array longer than ``max_array_items`` that was not read (tokens, merges, ...)."""

    item_type: int  # gguf.GGUFValueType value
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True, slots=True)
class GgufHeader:
    path: str  # the first split
    version: int
    # scalars as int/float/bool/str, small arrays as tuples, long ones as SkippedArray.
    # Shared through the cache: do not mutate.
    metadata: dict[str, object]
    tensors: tuple[TensorInfo, ...]  # over all splits, in file order
    tensor_bytes: int  # sum of n_bytes over all splits
    file_bytes: int  # sum of file sizes over all splits
    split_count: int
    # "needs N bytes ... has M": a split shorter than its tensor infos say its data reaches
    # (an interrupted download or copy); llama.cpp refuses such a file ("tensor data is
    # not within file bounds"). None when every split is long enough.
    truncated: str | None = None

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get(Keys.General.ARCHITECTURE)
        return arch if isinstance(arch, str) else None

    def get(self, key: str, default: object = None) -> object:
        return self.metadata.get(key, default)

    def arch_get(self, suffix: str, default: object = None) -> object:
        """``{arch}.{suffix}``, e.g. ``arch_get("attention.head_count_kv")``."""
        arch = self.architecture
        if arch is None:
            return default
        return self.metadata.get(f"{arch}.{suffix}", default)

    @property
    def n_vocab(self) -> int | None:
        """Length of ``tokenizer.ggml.tokens`` (read or skipped), else ``{arch}.vocab_size``."""
        tokens = self.metadata.get(Keys.Tokenizer.LIST)
        if isinstance(tokens, SkippedArray | tuple):
            return len(tokens)
        size = self.arch_get("vocab_size")
        return size if isinstance(size, int) and not isinstance(size, bool) else None


def read_header(
    path: str | os.PathLike[str], *, max_array_items: int = 4096, guard: Guard | None = None
) -> GgufHeader:
    """Read a GGUF header (all splits), or return the cached one if no split changed.
    ``guard`` judges every opened split first (cache hits included)."""
    if max_array_items < 0:
        raise ValueError("max_array_items must be >= 0")
    paths = _split_paths(os.path.abspath(os.fsdecode(path)))
    with contextlib.ExitStack() as stack:
        files = [_open_split(p, i, len(paths), stack) for i, p in enumerate(paths)]
        if guard is not None:
            for f, _ in files:
                guard(f.fileno(), f.name)
        stats = [st for _, st in files]
        key = (
            max_array_items,
            *((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in stats),
            *paths,
        )
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return hit
        header = _read_splits(paths, files, max_array_items)
    with _CACHE_LOCK:
        _CACHE[key] = header
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return header


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()


_CACHE_MAX = 64
_CACHE: OrderedDict[tuple, GgufHeader] = OrderedDict()
_CACHE_LOCK = threading.Lock()


# --- splits -----------------------------------------------------------------------------


def _split_paths(path: str) -> list[str]:
    """All split paths when ``path`` is named like a split (any index), else ``[path]``."""
    m = _SPLIT_NAME.match(path)
    if m is None:
        return [path]
    no, count = int(m["no"]), int(m["count"])
    if not 1 <= no <= count:
        return [path]
    if count > MAX_SPLITS:
        raise GgufError(path, f"named as one of {count} splits; at most {MAX_SPLITS} are read")
    return [f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


class _NamedFile:
    """A read-only file on an opened descriptor; ``name`` is the resolved path opened."""

    def __init__(self, fd: int, name: str) -> None:
        self.raw = os.fdopen(fd, "rb", buffering=0)
        self.name = name

    def fileno(self) -> int:
        return self.raw.fileno()


def _open_split(
    path: str, index: int, count: int, stack: contextlib.ExitStack
) -> tuple[_NamedFile, os.stat_result]:
    """Open one split without blocking or following a final symlink, then fstat it: the
    descriptor, not the name, is what gets judged and read."""
    real = os.path.realpath(path)
    try:
        # not a judgement (fstat below is): no device node is ever opened (opening one
        # can act, e.g. arm /dev/watchdog); a swap after this meets O_NOFOLLOW and fstat
        if not stat.S_ISREG(os.lstat(real).st_mode):
            raise GgufError(path, "not a regular file")
        fd = os.open(real, _OPEN_FLAGS)
    except FileNotFoundError:
        what = f"split {index + 1} of {count} is missing" if count > 1 else "no such file"
        raise GgufError(path, what) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise GgufError(path, "is a symbolic link (swapped in while it was opened)") from None
        raise GgufError(path, f"cannot open: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise GgufError(path, "not a regular file")
        f = _NamedFile(fd, real)
    except BaseException:
        os.close(fd)
        raise
    stack.callback(f.raw.close)
    return f, st


def _read_splits(
    paths: list[str], files: list[tuple[_NamedFile, os.stat_result]], max_items: int
) -> GgufHeader:
    count = len(paths)
    stats = [st for _, st in files]
    budget = _Budget()
    version, metadata, tensors, data_end = _read_one(paths[0], files[0], max_items, budget)
    named_count = _SPLIT_NAME.match(paths[0]) is not None
    meta_count = _int_or_none(metadata.get(Keys.Split.LLM_KV_SPLIT_COUNT))
    if named_count and meta_count is None and count > 1:
        raise GgufError(paths[0], f"named as split 1 of {count} but has no split.count key")
    if named_count and meta_count is not None and meta_count != count:
        raise GgufError(paths[0], f"split.count is {meta_count} but the name says {count}")
    if not named_count and meta_count is not None and meta_count > 1:
        suffix = f"-00001-of-{meta_count:05d}.gguf"
        problem = f"split.count is {meta_count} but the name does not end in {suffix}"
        raise GgufError(paths[0], problem)
    _check_split_no(paths[0], metadata, 0)
    all_tensors = list(tensors)
    ends = [data_end]
    for i, p in enumerate(paths[1:], start=1):
        _, split_meta, split_tensors, split_end = _read_one(p, files[i], max_items, budget)
        _check_split_no(p, split_meta, i)
        all_tensors.extend(split_tensors)
        ends.append(split_end)
    if count > 1:
        seen: set[str] = set()
        for t in all_tensors:
            if t.name in seen:
                raise GgufError(paths[0], f"tensor {_quote(t.name)} appears in more than one split")
            seen.add(t.name)
    expected = _int_or_none(metadata.get(Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT))
    if expected is not None and count > 1 and expected != len(all_tensors):
        raise GgufError(
            paths[0], f"split.tensors.count is {expected} but the splits hold {len(all_tensors)}"
        )
    return GgufHeader(
        path=paths[0],
        version=version,
        metadata=metadata,
        tensors=tuple(all_tensors),
        tensor_bytes=sum(t.n_bytes for t in all_tensors),
        file_bytes=sum(s.st_size for s in stats),
        split_count=count,
        truncated=_truncation(paths, stats, ends),
    )


def _truncation(paths: list[str], stats: list[os.stat_result], ends: list[int]) -> str | None:
    for i, (path, st, end) in enumerate(zip(paths, stats, ends, strict=True)):
        if end > st.st_size:
            name = (
                f"split {i + 1} ({_quote(os.path.basename(path))})"
                if len(paths) > 1
                else "the file"
            )
            return (
                f"truncated: {name} is {st.st_size:,} bytes but its tensor data ends at "
                f"byte {end:,} (an interrupted download or copy?)"
            )
    return None


def _check_split_no(path: str, metadata: dict[str, object], index: int) -> None:
    no = _int_or_none(metadata.get(Keys.Split.LLM_KV_SPLIT_NO))
    if no is not None and no != index:
        raise GgufError(path, f"split.no is {no} but this is split {index + 1} (expected {index})")


def _int_or_none(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# --- one file ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Budget:
    """What is left of :data:`MAX_HEADER_BYTES` and :data:`MAX_HEADER_ITEMS` for one header."""

    bytes_left: int = MAX_HEADER_BYTES
    items_left: int = MAX_HEADER_ITEMS


def _past_budget(path: str, what: str) -> GgufError:
    return GgufError(
        path,
        f"header metadata past {MAX_HEADER_BYTES >> 20} MiB/"
        f"{MAX_HEADER_ITEMS // 1_000_000}M items (at {what})",
    )


def _read_one(
    path: str, opened: tuple[_NamedFile, os.stat_result], max_items: int, budget: _Budget
) -> tuple[int, dict[str, object], list[TensorInfo], int]:
    f, st = opened
    try:
        return _Parser(f.raw, path, st.st_size, max_items, budget).parse()
    except OSError as e:
        raise GgufError(path, f"cannot read: {e.strerror or e}") from None


class _Parser:
    """A cursor over a window of the file (read in 1 MiB chunks, seeking past skips)."""

    __slots__ = ("f", "path", "size", "buf", "base", "pos", "max_items", "budget")

    def __init__(self, f: BinaryIO, path: str, size: int, max_items: int, budget: _Budget) -> None:
        self.f = f
        self.path = path
        self.size = size
        self.max_items = max_items
        self.budget = budget
        self.buf = b""  # file bytes [base, base + len(buf))
        self.base = 0
        self.pos = 0  # index into buf; may point past it after a skip

    # primitives

    def left(self) -> int:
        return self.size - self.base - self.pos

    def need(self, n: int, what: str) -> None:
        if self.pos + n <= len(self.buf):
            return
        if n > self.left():
            raise GgufError(self.path, f"truncated at byte {self.size} while reading {what}")
        budget = self.budget
        if n > budget.bytes_left:
            raise _past_budget(self.path, what)
        start = self.base + self.pos
        self.f.seek(start)
        data = self.f.read(min(max(n, _CHUNK), budget.bytes_left))
        budget.bytes_left -= len(data)
        self.buf, self.base, self.pos = data, start, 0
        if len(data) < n:  # the file shrank under us
            end = start + len(data)
            raise GgufError(self.path, f"truncated at byte {end} while reading {what}")

    def claim(self, n: int, unit_bytes: int, what: str) -> None:
        """Refuse a count whose smallest encoding cannot fit in the rest of the file."""
        left = self.left()
        if n * unit_bytes > left:
            raise GgufError(
                self.path,
                f"{what} claims {n:,} items of at least {unit_bytes} bytes"
                f" but the file has only {left:,} bytes left",
            )

    def take(self, n: int, what: str) -> None:
        """Charge ``n`` items walked to the header's budget (before walking them)."""
        budget = self.budget
        if n > budget.items_left:
            raise _past_budget(self.path, what)
        budget.items_left -= n

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def string(self, what: str) -> str:
        n = self.u64(what)
        left = self.left()
        if n > left:
            raise GgufError(
                self.path,
                f"{what} claims a string of {n:,} bytes but the file has only {left:,} bytes left",
            )
        self.need(n, what)
        s = self.buf[self.pos : self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    # structure

    def parse(self) -> tuple[int, dict[str, object], list[TensorInfo], int]:
        """(version, metadata, tensor infos, the byte where the last tensor's data ends)."""
        self.need(4, "the magic")
        magic = self.buf[:4]
        if magic != _MAGIC:
            raise GgufError(self.path, f"not a GGUF file (magic {magic!r})")
        self.pos = 4
        version = self.u32("the version")
        if version not in _SUPPORTED_VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in (1, 2, 3):
                raise GgufError(
                    self.path, f"big-endian GGUF (version {swapped} byte-swapped) is not supported"
                )
            raise GgufError(self.path, f"unsupported GGUF version {version}")
        n_tensors = self.u64("the tensor count")
        n_kv = self.u64("the metadata count")
        self.claim(n_tensors, _MIN_TENSOR_INFO_BYTES, "the tensor count")
        self.claim(n_kv, _MIN_KV_BYTES, "the metadata count")
        self.take(n_tensors + n_kv, "the metadata and tensor counts")
        metadata: dict[str, object] = {}
        for i in range(n_kv):
            key = self.string(f"metadata key {i}")
            if key in metadata:
                raise GgufError(self.path, f"duplicate metadata key {_quote(key)}")
            vtype = self.u32(f"the type of metadata {_quote(key)}")
            metadata[key] = self.value(vtype, f"metadata {_quote(key)}", 0)
        tensors: list[TensorInfo] = []
        names: set[str] = set()
        data_end = 0  # relative to the data section
        for i in range(n_tensors):
            info, offset = self.tensor_info(i)
            if info.name in names:
                raise GgufError(self.path, f"duplicate tensor name {_quote(info.name)}")
            names.add(info.name)
            tensors.append(info)
            data_end = max(data_end, offset + info.n_bytes)
        if not tensors:
            return version, metadata, tensors, 0
        # the data section starts at the next multiple of general.alignment (default 32)
        align = _int_or_none(metadata.get(Keys.General.ALIGNMENT))
        align = align if align is not None and align > 0 else 32
        header_end = self.base + self.pos
        return version, metadata, tensors, -(-header_end // align) * align + data_end

    def value(self, vtype: int, what: str, depth: int) -> object:
        scalar = _SCALARS.get(vtype)
        if scalar is not None:
            self.need(scalar.size, what)
            (v,) = scalar.unpack_from(self.buf, self.pos)
            self.pos += scalar.size
            return v
        if vtype == GGUFValueType.STRING:
            return self.string(what)
        if vtype == GGUFValueType.ARRAY:
            if depth >= _MAX_NESTING:
                raise GgufError(self.path, f"{what}: arrays nested deeper than {_MAX_NESTING}")
            item_type = self.u32(f"the item type of {what}")
            n = self.u64(f"the length of {what}")
            return self.array(item_type, n, what, depth + 1)
        raise GgufError(self.path, f"{what} has unknown value type {vtype}")

    def array(self, item_type: int, n: int, what: str, depth: int) -> tuple | SkippedArray:
        scalar = _SCALARS.get(item_type)
        if scalar is not None:
            self.claim(n, scalar.size, what)
            nbytes = n * scalar.size
            if n > self.max_items:  # one seek: claim checked that it stays in the file
                self.take(1, what)
                self.pos += nbytes
                return SkippedArray(item_type, n)
            self.take(n, what)
            self.need(nbytes, what)
            fmt = f"<{n}{_SCALAR_FORMATS[item_type]}"
            values = struct.unpack_from(fmt, self.buf, self.pos)
            self.pos += nbytes
            return values
        if item_type == GGUFValueType.STRING:
            self.claim(n, 8, what)
            self.take(n, what)  # each string has its own length: walked, so bounded here
            if n > self.max_items:
                self.skip_strings(n, what)
                return SkippedArray(item_type, n)
            return tuple(self.string(what) for _ in range(n))
        if item_type == GGUFValueType.ARRAY:
            self.claim(n, _MIN_NESTED_ARRAY_BYTES, what)
            if depth >= _MAX_NESTING:
                raise GgufError(self.path, f"{what}: arrays nested deeper than {_MAX_NESTING}")
            self.take(n, what)
            items = []
            keep = n <= self.max_items
            for _ in range(n):
                inner_type = self.u32(f"the item type of {what}")
                inner_n = self.u64(f"the length of {what}")
                inner = self.array(inner_type, inner_n, what, depth + 1)
                if keep:
                    items.append(inner)
            return tuple(items) if keep else SkippedArray(item_type, n)
        raise GgufError(self.path, f"{what} has unknown array item type {item_type}")

    def skip_strings(self, n: int, what: str) -> None:
        """Walk ``n`` length-prefixed strings reading only the u64 lengths (the hot loop)."""
        unpack = _U64.unpack_from
        size = self.size
        buf, base, pos = self.buf, self.base, self.pos
        end = len(buf) - 8
        for _ in range(n):
            if pos > end:
                self.pos = pos
                self.need(8, what)
                buf, base, pos = self.buf, self.base, self.pos
                end = len(buf) - 8
            (length,) = unpack(buf, pos)
            pos += 8
            if length > size - base - pos:
                left = size - base - pos
                raise GgufError(
                    self.path,
                    f"{what} claims a string of {length:,} bytes"
                    f" but the file has only {left:,} bytes left",
                )
            pos += length
        self.pos = pos

    def tensor_info(self, i: int) -> tuple[TensorInfo, int]:
        """The tensor's info and its data offset (from the data section's start)."""
        name = self.string(f"the name of tensor {i}")
        what = f"tensor {_quote(name)}"
        n_dims = self.u32(f"the dimension count of {what}")
        if n_dims > _MAX_DIMS:
            raise GgufError(self.path, f"{what} has {n_dims} dimensions (at most {_MAX_DIMS})")
        self.need(8 * n_dims, f"the shape of {what}")
        shape = struct.unpack_from(f"<{n_dims}Q", self.buf, self.pos)
        self.pos += 8 * n_dims
        ggml_type = self.u32(f"the type of {what}")
        offset = self.u64(f"the offset of {what}")
        sizes = GGML_QUANT_SIZES.get(ggml_type)
        if sizes is None:
            raise GgufError(self.path, f"{what} has unknown ggml type {ggml_type}")
        block, type_bytes = sizes
        n_elements = 1
        for d in shape:
            n_elements *= d
        if n_elements > _INT64_MAX:
            raise GgufError(self.path, f"{what} has an impossible shape {list(shape)}")
        if shape and shape[0] % block:
            type_name = GGMLQuantizationType(ggml_type).name
            problem = f"{what}: ne0 {shape[0]} is not a multiple of {type_name}'s block {block}"
            raise GgufError(self.path, problem)
        return TensorInfo(name, shape, ggml_type, n_elements // block * type_bytes), offset


def _quote(name: str, limit: int = 80) -> str:
    """A key or tensor name for a message: repr'd (one line) and cut to ``limit``."""
    return repr(name) if len(name) <= limit else repr(name[:limit]) + "..."


def _one_line(s: str) -> str:
    return s.replace("\r", "\\r").replace("\n", "\\n")
