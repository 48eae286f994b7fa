"""A llama-server router's model list: from its ``--models-dir``, or its ``GET /models``.

``list_models_dir`` follows ``common/preset.cpp`` ``load_from_models_dir`` (lines 387-459,
llama.cpp 0c1e57098): in the folder,

- a ``*.gguf`` file is a model whose id is its name with every ``.gguf`` removed
  (``string_replace_all``), unless the name contains ``mmproj`` or starts with ``mtp-``,
  ``dspark-`` or ``dflash-`` (companions, ``is_mmproj_file``/``is_draft_file``);
- a sub-folder is a model named after the folder: its ``*.gguf`` files give the model (a
  ``-00001-of-`` shard first, else the last plain one listed), the ``mmproj`` one
  (``--mmproj``) and the first draft-prefixed one (``--spec-draft-model``); a folder
  without a model file is no model. Only one level deep.

Unlike the router (``std::filesystem::is_regular_file`` follows links), nothing here
follows a symbolic link: a link named ``*.gguf`` in the folder is listed as the model the
router would see if its target is a file (``via_link``); a linked folder is not entered.
Bounded: at most :data:`MAX_ENTRIES` entries per folder are looked at (more: refused).

``models_answer`` reads a recorded or live ``GET /models`` answer (server-models.cpp
``get_router_models``): each model's id, status and the child argv the router renders
(``status.args``); bounded in size and JSON depth.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from monitor.errors import InputError

MAX_ENTRIES = 4096  # per folder; a models folder with more is refused, never half-read
MAX_ANSWER_BYTES = 4 << 20  # a GET /models answer larger than this is refused
MAX_JSON_DEPTH = 32
DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")  # common/preset.cpp draft_prefixes
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class RouterModelsError(InputError):
    """A models folder or answer that cannot be read: one line for the user."""


@dataclass(frozen=True, slots=True)
class DirModel:
    """One model the router lists from its ``--models-dir``."""

    model_id: str
    model_path: str  # what the router passes as --model
    mmproj_path: str | None = None  # --mmproj (a sub-folder's mmproj file)
    draft_path: str | None = None  # --spec-draft-model (a sub-folder's mtp-/dspark-/dflash-)
    via_link: bool = False  # the model entry is a symbolic link (not followed here)


@dataclass(frozen=True, slots=True)
class AnsweredModel:
    """One model of a router's ``GET /models`` answer."""

    model_id: str
    status: str  # "loaded", "loading", "unloaded", "downloading", ... as the router says
    args: tuple[str, ...]  # the child's argv as the router renders it (status.args)


def _is_mmproj(name: str) -> bool:
    return "mmproj" in name


def _is_draft(name: str) -> bool:
    return name.startswith(DRAFT_PREFIXES)


def _entries(fd: int, where: str) -> Iterator[os.DirEntry[str]]:
    with os.scandir(fd) as it:
        for n, entry in enumerate(it):
            if n >= MAX_ENTRIES:
                raise RouterModelsError(f"{where}: more than {MAX_ENTRIES} entries, not read")
            yield entry


def _open_dir(path: str, dir_fd: int | None = None) -> int:
    fd = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    if not stat.S_ISDIR(os.fstat(fd).st_mode):  # O_DIRECTORY already; belt and braces
        os.close(fd)
        raise NotADirectoryError(path)
    return fd


def _scan_subdir(parent_fd: int, name: str, path: str) -> DirModel | None:
    """A sub-folder's model (preset.cpp ``scan_subdir``), or None when it has none."""
    try:
        fd = _open_dir(name, parent_fd)
    except OSError:
        return None  # unreadable: the router skips what it cannot inspect, too
    try:
        model = shard = mmproj = draft = None
        for entry in _entries(fd, path):
            if not entry.name.endswith(".gguf") or not entry.is_file(follow_symlinks=False):
                continue
            if _is_mmproj(entry.name):
                mmproj = entry.name
            elif _is_draft(entry.name):
                draft = draft or entry.name
            elif "-00001-of-" in entry.name:
                shard = entry.name
            else:
                model = entry.name
    finally:
        os.close(fd)
    chosen = shard or model
    if chosen is None:
        return None

    def join(leaf: str | None) -> str | None:
        return os.path.join(path, leaf) if leaf else None

    return DirModel(name, os.path.join(path, chosen), join(mmproj), join(draft))


def list_models_dir(models_dir: str) -> tuple[DirModel, ...]:
    """The models a router started with ``--models-dir models_dir`` lists, by id.

    Raises :class:`RouterModelsError` (one line) when the folder is missing, not a folder,
    a symbolic link, unreadable or too large."""
    try:
        fd = _open_dir(models_dir)
    except OSError as exc:
        why = "a symbolic link (not followed)" if os.path.islink(models_dir) else exc.strerror
        raise RouterModelsError(f"{models_dir}: cannot read the models folder: {why}") from None
    found: dict[str, DirModel] = {}
    try:
        for entry in _entries(fd, models_dir):
            path = os.path.join(models_dir, entry.name)
            if entry.is_dir(follow_symlinks=False):
                model = _scan_subdir(fd, entry.name, path)
            elif entry.name.endswith(".gguf") and not (
                _is_mmproj(entry.name) or _is_draft(entry.name)
            ):
                link = entry.is_symlink()
                if not link and not entry.is_file(follow_symlinks=False):
                    continue
                model = DirModel(entry.name.replace(".gguf", ""), path, via_link=link)
            else:
                continue
            if model is not None:
                found[model.model_id] = model
    finally:
        os.close(fd)
    return tuple(found[k] for k in sorted(found))


def _depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def models_answer(raw: bytes) -> tuple[AnsweredModel, ...]:
    """A router's ``GET /models`` answer (``{"data": [{"id", "status": {"value", "args"}}]}``)
    -> its models. Raises :class:`RouterModelsError` (one line) on an answer that is too
    large, too deep, not JSON or not of that shape; a model entry without an id is skipped."""
    if len(raw) > MAX_ANSWER_BYTES:
        raise RouterModelsError(f"GET /models answer over {MAX_ANSWER_BYTES} bytes, not read")
    text = raw.decode("utf-8", "replace")
    if _depth(text) > MAX_JSON_DEPTH:
        raise RouterModelsError(f"GET /models answer nested deeper than {MAX_JSON_DEPTH}")
    try:
        doc = json.loads(text)
    except ValueError:
        raise RouterModelsError("GET /models answer is not JSON") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise RouterModelsError('GET /models answer has no "data" list')
    out = []
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        status = item.get("status")
        if not isinstance(status, dict):
            status = {}
        value, args = status.get("value"), status.get("args")
        out.append(
            AnsweredModel(
                item["id"],
                value if isinstance(value, str) else "unknown",
                tuple(a for a in args if isinstance(a, str)) if isinstance(args, list) else (),
            )
        )
    return tuple(out)
