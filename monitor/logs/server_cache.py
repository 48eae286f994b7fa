"""What a llama-server's log says its host caches hold now: the prompt cache and the
context checkpoints of its slots (issue 18 point 5: growth named from the server's own word).

The lines, as llama.cpp's ``tools/server`` prints them (server-task.cpp
``server_prompt_cache::update``, server-context.cpp ``create_checkpoint``):

- ``srv  update:  - cache state: 3 prompts, 300.000 MiB (limits: 8192.000 MiB, 4096 tokens,
  8589934592 est)``: the whole prompt cache after each update, the checkpoints of the cached
  prompts included (``server_prompt::size``). The latest line is what it holds.
- ``slot create_check: id  1 | task 0 | created context checkpoint 2 of 32 (pos_min = 0,
  pos_max = 525, n_tokens = 526, size = 1.252 MiB)``: a checkpoint kept in the slot; "2" is
  how many the slot holds after it, "32" is ``-ctxcp``.
- ``erasing old context checkpoint (...)`` drops the slot's oldest, ``erased invalidated
  context checkpoint (...)`` its newest; ``saving idle slot to prompt cache`` and ``updating
  prompt cache`` (after ``selected slot by ...``) move the slot's prompt, checkpoints and all,
  into the prompt cache, where the cache-state line counts them.
- ``prompt cache is enabled, size limit: 8192 MiB`` / ``prompt cache is disabled`` and
  ``context checkpoints enabled, max = 32`` at start; ``system_info:`` starts a new run.

Recent builds print the cache-state and checkpoint lines at TRACE level (``-lv 4``); without
them the report says nothing is known (None), never 0. A checkpoint restored with a prompt
loaded from the cache is not logged, so the slots' figure is a lower bound.
Bounded: at most MAX_SLOTS slots and MAX_CHECKPOINTS sizes each; lines are cut at
MAX_LINE_CHARS; the file is read from its last MAX_READ_BYTES, never through a symlink.
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.units import MIB

MAX_LINE_CHARS = 4096
MAX_QUOTE_CHARS = 200
MAX_SLOTS = 256
MAX_CHECKPOINTS = 1024
MAX_READ_BYTES = 16 * 1024 * 1024

_PREFIX = re.compile(r"^\s*(?:\d+\.\d{2}\.\d{3}\.\d{3}\s+)?(?:[IWEDT]\s+)?")
_CACHE_STATE = re.compile(
    r"cache state:\s*(\d{1,9})\s*prompts?,\s*([\d.]{1,20})\s*MiB"
    r"(?:\s*\(limits:\s*([\d.]{1,20})\s*MiB)?"
)
_SLOT_ID = re.compile(r"\bid\s+(\d{1,6})\s*\|")
_CREATED = re.compile(
    r"created context checkpoint\s+(\d{1,6})\s+of\s+(-?\d{1,6})\b.*?size\s*=\s*([\d.]{1,20})\s*MiB"
)
_LIMIT = re.compile(r"prompt cache is enabled, size limit:\s*(-?\d{1,9})\s*MiB")
_CKPT_MAX = re.compile(r"context checkpoints enabled, max\s*=\s*(-?\d{1,6})")
_WORDS = (
    "cache state",
    "context checkpoint",
    "prompt cache",
    "selected slot",
    "system_info",
)


@dataclass(frozen=True, slots=True)
class SlotCheckpoints:
    slot_id: int
    sizes_bytes: tuple[int, ...]  # oldest first
    line: str  # the latest "created context checkpoint" line, prefix stripped

    @property
    def bytes(self) -> int:
        return sum(self.sizes_bytes)


@dataclass(frozen=True, slots=True)
class ServerCacheReport:
    cache_bytes: int | None  # the latest cache-state line; None: no such line
    cache_prompts: int | None
    cache_limit_bytes: int | None  # from the cache-state line or the start-up line
    cache_line: str | None  # that line, prefix stripped, cut to MAX_QUOTE_CHARS
    cache_disabled: bool  # "prompt cache is disabled" (--cache-ram 0)
    checkpoints: tuple[SlotCheckpoints, ...]  # slots that hold checkpoints now
    checkpoints_max: int | None  # -ctxcp per slot, as logged
    checkpoint_lines: int  # "created context checkpoint" lines seen in this run

    @property
    def checkpoint_bytes(self) -> int:
        return sum(s.bytes for s in self.checkpoints)


def _quote(line: str) -> str:
    return line if len(line) <= MAX_QUOTE_CHARS else line[: MAX_QUOTE_CHARS - 3] + "..."


def _mib_bytes(text: str) -> int | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value * MIB) if 0 <= value < 1e12 else None


class ServerCacheParser:
    """Fed one line at a time (a file or a stream); keeps only the current state."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cache: tuple[int, int, int | None, str] | None = None
        self._limit: int | None = None
        self._disabled = False
        self._slots: dict[int, deque[int]] = {}
        self._slot_line: dict[int, str] = {}
        self._ckpt_max: int | None = None
        self._created = 0
        self._selected: int | None = None

    def feed(self, raw: object) -> None:
        if isinstance(raw, bytes | bytearray):
            raw = bytes(raw[:MAX_LINE_CHARS]).decode("utf-8", "replace")
        if not isinstance(raw, str):
            return
        line = raw[:MAX_LINE_CHARS]
        if not any(w in line for w in _WORDS):
            return
        line = _PREFIX.sub("", line.rstrip("\r\n"), count=1).strip()
        if "system_info" in line:
            self._reset()  # a new run of the server writing to the same file
        elif m := _CACHE_STATE.search(line):
            size = _mib_bytes(m.group(2))
            limit = _mib_bytes(m.group(3)) if m.group(3) else None
            if size is not None:
                self._cache = (int(m.group(1)), size, limit, _quote(line))
        elif "context checkpoint" in line:
            self._on_checkpoint(line)
        elif "selected slot" in line:
            sid = _SLOT_ID.search(line)
            self._selected = int(sid.group(1)) if sid else None
        elif "updating prompt cache" in line and self._selected is not None:
            self._drop_slot(self._selected)  # its prompt and checkpoints moved to the cache
            self._selected = None
        elif "saving idle slot to prompt cache" in line:
            if sid := _SLOT_ID.search(line):
                self._drop_slot(int(sid.group(1)))
        elif m := _LIMIT.search(line):
            mib = int(m.group(1))
            self._limit = mib * MIB if mib >= 0 else None  # -1: no limit
            self._disabled = False
        elif "prompt cache is disabled" in line:
            self._disabled = True

    def _drop_slot(self, slot: int) -> None:
        self._slots.pop(slot, None)
        self._slot_line.pop(slot, None)

    def _on_checkpoint(self, line: str) -> None:
        if m := _CKPT_MAX.search(line):
            self._ckpt_max = int(m.group(1))
            return
        sid = _SLOT_ID.search(line)
        if sid is None:
            return
        slot = int(sid.group(1))
        sizes = self._slots.get(slot)
        if m := _CREATED.search(line):
            size = _mib_bytes(m.group(3))
            if size is None:
                return
            if sizes is None:
                if len(self._slots) >= MAX_SLOTS:
                    return
                sizes = self._slots[slot] = deque(maxlen=MAX_CHECKPOINTS)
            sizes.append(size)
            held = int(m.group(1))  # how many the slot holds now, this one included
            while len(sizes) > max(1, held):
                sizes.popleft()
            self._slot_line[slot] = _quote(line)
            self._created += 1
        elif sizes and "erasing old context checkpoint" in line:
            sizes.popleft()
        elif sizes and "erased invalidated context checkpoint" in line:
            sizes.pop()

    def feed_many(self, lines: Iterable[object]) -> None:
        for line in lines:
            self.feed(line)

    def report(self) -> ServerCacheReport:
        cache = self._cache
        limit = cache[2] if cache and cache[2] is not None else self._limit
        slots = tuple(
            SlotCheckpoints(s, tuple(sizes), self._slot_line.get(s, ""))
            for s, sizes in sorted(self._slots.items())
            if sizes
        )
        return ServerCacheReport(
            cache_bytes=cache[1] if cache else None,
            cache_prompts=cache[0] if cache else None,
            cache_limit_bytes=limit,
            cache_line=cache[3] if cache else None,
            cache_disabled=self._disabled,
            checkpoints=slots,
            checkpoints_max=self._ckpt_max,
            checkpoint_lines=self._created,
        )


def parse_server_cache(lines: Iterable[object]) -> ServerCacheReport:
    parser = ServerCacheParser()
    parser.feed_many(lines)
    return parser.report()


def log_source(path: Path) -> str:
    """How evidence names the log it came from; a path from a command line is cut to
    MAX_QUOTE_CHARS (escaping is the printer's job)."""
    text = str(path)
    if len(text) > MAX_QUOTE_CHARS:
        text = "..." + text[-(MAX_QUOTE_CHARS - 3) :]
    return f"llama.cpp log {text}"


def log_file_of(argv: Sequence[str], cwd: str | None) -> Path | None:
    """The ``--log-file`` a llama-server was started with (the last one wins), made absolute
    against the process's working directory; None when none or not resolvable."""
    found: str | None = None
    for i, arg in enumerate(argv):
        if arg == "--log-file" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--log-file="):
            found = arg.split("=", 1)[1]
    if not found:
        return None
    path = Path(found)
    if not path.is_absolute():
        if not cwd:
            return None
        path = Path(cwd) / path
    return path


class ServerLogFollower:
    """One server's log, followed: the first :meth:`read` parses its last MAX_READ_BYTES,
    later ones what was appended since (at most MAX_READ_BYTES a call); a replaced or
    truncated file is read again from its start. Never through a symlink; with
    ``owner_uid``, only a file that user owns (a root daemon must not open another user's
    file because a process named it on its command line)."""

    def __init__(self, path: Path, owner_uid: int | None = None) -> None:
        self.path = path
        self.owner_uid = owner_uid
        self.error: str | None = None  # why the last read found nothing
        self._parser = ServerCacheParser()
        self._fd: int | None = None
        self._ino: int | None = None
        self._buf = b""
        self._skip_first = False

    def _open(self, from_start: bool) -> None:
        if self.owner_uid is not None:  # not even opened when it is someone else's
            before = os.stat(self.path, follow_symlinks=False)
            if before.st_uid != self.owner_uid:
                raise OSError(f"{self.path.name}: owned by uid {before.st_uid}, not the server's")
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(f"{self.path.name}: not a regular file")
        if self.owner_uid is not None and st.st_uid != self.owner_uid:
            os.close(fd)
            raise OSError(f"{self.path.name}: owned by uid {st.st_uid}, not the server's")
        skip = not from_start and st.st_size > MAX_READ_BYTES
        os.lseek(fd, 0 if from_start else max(0, st.st_size - MAX_READ_BYTES), os.SEEK_SET)
        self._fd, self._ino, self._buf = fd, st.st_ino, b""
        self._skip_first = skip  # the first line read is a cut one

    def read(self) -> ServerCacheReport | None:
        try:
            if self._fd is None:
                self._open(from_start=False)
            assert self._fd is not None
            st = os.stat(self.path, follow_symlinks=False)
            if st.st_ino != self._ino or st.st_size < os.lseek(self._fd, 0, os.SEEK_CUR):
                self.close()
                self._parser = ServerCacheParser()
                self._open(from_start=True)
            data = os.read(self._fd, MAX_READ_BYTES)
        except OSError as exc:
            self.close()
            self.error = exc.strerror or str(exc)
            return None
        self.error = None
        lines = (self._buf + data).split(b"\n")
        self._buf = lines.pop()[-MAX_LINE_CHARS:]  # an unfinished line waits
        if self._skip_first and lines:
            lines, self._skip_first = lines[1:], False
        self._parser.feed_many(lines)
        return self._parser.report()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
