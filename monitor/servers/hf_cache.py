"""The model file of ``-hf user/model[:quant]``, found in llama.cpp's cache as llama-server
finds it offline, or a message saying exactly where it looked.

The rules are llama.cpp's at commit 0c1e57098 (vendor/llama.cpp):

- the cache folder (``common/hf-cache.cpp`` ``get_cache_directory``, lines 33-62): the first
  set of ``LLAMA_CACHE``, ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME`` + ``/hub``,
  ``XDG_CACHE_HOME`` + ``/huggingface/hub``, ``HOME`` + ``/.cache/huggingface/hub`` (then the
  user's passwd home, which is not known here: said so). It is the Hugging Face hub layout;
  the older flat ``~/.cache/llama.cpp/user_model_file.gguf`` names are not read by this
  llama.cpp for ``-hf`` (``fs_get_cache_directory`` serves docker models and URLs);
- ``user/model:tag`` splits at ``:`` (``common/download.cpp``
  ``common_download_split_repo_tag``, lines 74-82); the repository's folder is
  ``models--user--model`` (``repo_to_folder_name``, hf-cache.cpp lines 78-83);
- the commit is ``refs/main``, else the first other ref holding a 40-hex commit
  (``get_cached_ref``, hf-cache.cpp lines 353-381; here the others in name order); its
  files are ``snapshots/COMMIT/**`` (``get_cached_files``, hf-cache.cpp lines 383-438);
- ``-hff FILE`` picks that path exactly (download.cpp ``common_download_resolve_path``,
  lines 964-982); else ``find_best_model`` (download.cpp lines 655-693): the first model
  GGUF (not mmproj/imatrix/mtp-/eagle3-/dflash-/dspark-) whose path contains ``TAG.`` or
  ``TAG-`` (case-insensitive; the tag is taken literally here, not as a regular
  expression), the first part of a split; without a tag ``Q4_K_M``, then ``Q8_0``, then
  the first model GGUF. llama.cpp walks the folder in directory order; here paths are
  sorted, so among several matches the pick is the first by name.

Bounded and link-safe: at most :data:`MAX_FILES` entries are walked, :data:`MAX_DEPTH`
folders deep; folder links are never followed; a file's link (the hub's
``snapshots/C/x.gguf -> ../../blobs/OID``) is accepted only when its target stays inside the
repository's folder; a ref file is opened ``O_NOFOLLOW|O_NONBLOCK`` and must be regular.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from monitor.errors import ModelFileError

MAX_FILES = 4096
MAX_DEPTH = 8
CACHE_ENV = (
    "LLAMA_CACHE",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_HOME",
    "XDG_CACHE_HOME",
    "HOME",
)
_UNDER = {
    "HF_HOME": ("hub",),
    "XDG_CACHE_HOME": ("huggingface", "hub"),
    "HOME": (".cache", "huggingface", "hub"),
}
_NOT_MODEL = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_COMMIT = re.compile(r"^[0-9a-fA-F]{40}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9_]+(?:[./-][A-Za-z0-9_]+)*$")
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class HfCacheError(ModelFileError):
    """The ``-hf`` model is not in the cache (or the cache cannot be read safely)."""


def cache_dir(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(the hub cache folder, the variable it came from) by hf-cache.cpp's order; None when
    none of the variables is set."""
    for key in CACHE_ENV:
        value = env.get(key, "")
        if value:
            return str(Path(value, *_UNDER.get(key, ()))), key
    return None


def own_cache_env() -> dict[str, str]:
    """Our own cache-locating variables: a typed command (``estimate -- llama-server -hf
    ...``) is priced as if this user ran it."""
    return {k: os.environ[k] for k in CACHE_ENV if os.environ.get(k)}


def split_repo_tag(repo_tag: str, flag: str = "-hf") -> tuple[str, str]:
    """``user/model:tag`` -> (repo, tag); HfCacheError for a repo that is not user/model."""
    parts = repo_tag.split(":")
    repo, tag = parts[0], (parts[-1] if len(parts) > 1 else "")
    if len(repo) > 256 or repo.count("/") != 1 or not _REPO_ID.match(repo):
        raise HfCacheError(f"{flag} {repo_tag!r}: expected <user>/<model>[:quant]")
    return repo, tag


def resolve(repo_tag: str, hf_file: str | None, env: Mapping[str, str], flag: str = "-hf") -> str:
    """The model file llama-server would load for ``-hf repo_tag`` (``-hff hf_file``; the
    draft's ``-hfd``: ``flag`` names it in messages), its cache located from ``env``;
    HfCacheError saying where it looked otherwise."""
    repo, tag = split_repo_tag(repo_tag, flag)
    found = cache_dir(env)
    if found is None:
        raise HfCacheError(
            f"{flag} {repo_tag}: cannot tell llama.cpp's cache folder: none of "
            f"{', '.join(CACHE_ENV)} is set (llama.cpp then uses the user's passwd home); "
            "give -m PATH"
        )
    cache, source = found
    repo_dir = Path(cache) / ("models--" + repo.replace("/", "--"))
    where = f"{repo_dir} (the cache from {source})"
    commit = _cached_ref(repo_dir / "refs")
    if commit is None:
        raise HfCacheError(f"{flag} {repo_tag}: not in llama.cpp's cache: no refs/main in {where}")
    snapshot = repo_dir / "snapshots" / commit
    files = _walk(snapshot)
    pick = _pick(files, tag, hf_file)
    if pick is None:
        wanted = f"file {hf_file}" if hf_file else f"model GGUF matching {tag or 'Q4_K_M/Q8_0'}"
        raise HfCacheError(
            f"{flag} {repo_tag}: not in llama.cpp's cache: no {wanted} in {snapshot} "
            f"({len(files)} file(s) there)"
        )
    path = snapshot / pick
    _inside(path, repo_dir)
    return str(path)


MAX_REPOS = 512
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_NOT_LISTED = ("mmproj", "mtp-", "eagle3-", "dflash-", "dspark-")


def list_cached_models(env: Mapping[str, str]) -> tuple[str, ...]:
    """The ``user/model:TAG`` ids a llama-server router lists from llama.cpp's cache
    (download.cpp ``common_list_cached_models``, lines 940-962, over hf-cache.cpp
    ``get_cached_files``, lines 383-438): each ``models--user--model`` folder's cached
    commit, each GGUF there that is a first split part with a quant tag (``get_gguf_split_
    info``, lines 482-510: ``[-.]TAG`` at the end of the name, upper-cased), not an
    mmproj/mtp-/eagle3-/dflash-/dspark- file. Sorted; () when the cache cannot be located
    or read. Bounded by :data:`MAX_REPOS` folders and :func:`_walk`'s limits; a repository
    folder that is a link is not followed (llama.cpp would follow it)."""
    found = cache_dir(env)
    if found is None:
        return ()
    cache = Path(found[0])
    try:
        names = sorted(n for n in os.listdir(cache) if n.startswith("models--"))[:MAX_REPOS]
    except OSError:
        return ()
    out: set[str] = set()
    for name in names:
        repo = name.removeprefix("models--").replace("--", "/")
        repo_dir = cache / name
        if repo.count("/") != 1 or not _REPO_ID.match(repo) or not _plain_dir(repo_dir):
            continue
        commit = _cached_ref(repo_dir / "refs")
        try:
            files = _walk(repo_dir / "snapshots" / commit) if commit else []
        except HfCacheError:
            continue
        out.update(f"{repo}:{tag}" for f in files if (tag := _listed_tag(f)))
    return tuple(sorted(out))


def _plain_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _listed_tag(path: str) -> str | None:
    """``get_gguf_split_info``'s tag of a first split part that the router lists."""
    if not path.endswith(".gguf"):
        return None
    prefix = path[: -len(".gguf")]
    m = _SPLIT.match(prefix)
    if m is not None:
        if int(m.group(2)) != 1:
            return None
        prefix = m.group(1)
    if any(word in prefix for word in _NOT_LISTED):
        return None
    tag = _TAG.search(prefix)
    return tag.group(1).upper() if tag else None


def _cached_ref(refs: Path) -> str | None:
    """hf-cache.cpp ``get_cached_ref``: refs/main's commit, else the first other valid."""
    try:
        names = sorted(os.listdir(refs))[:MAX_FILES]
    except OSError:
        return None
    names.sort(key=lambda n: n != "main")
    for name in names:
        text = _read_small(refs / name)
        if text is not None:
            line = text.split("\n", 1)[0].strip()
            if _COMMIT.match(line):
                return line
    return None


def _read_small(path: Path, limit: int = 4096) -> str | None:
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("ascii", errors="replace")
    finally:
        os.close(fd)


def _walk(top: Path) -> list[str]:
    """Relative paths of the regular files and file links under ``top``, folder links never
    followed, bounded by MAX_FILES and MAX_DEPTH."""
    out: list[str] = []
    stack: list[tuple[Path, int]] = [(top, 0)]
    seen = 0
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    seen += 1
                    if seen > MAX_FILES:
                        raise HfCacheError(f"{top}: more than {MAX_FILES} entries, not read")
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 < MAX_DEPTH:
                            stack.append((Path(entry.path), depth + 1))
                    elif entry.is_symlink() or entry.is_file(follow_symlinks=False):
                        out.append(Path(entry.path).relative_to(top).as_posix())
        except OSError:
            continue
    return sorted(out)


def _is_model(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".gguf") and not any(word in name for word in _NOT_MODEL)


def _first_split(path: str) -> bool:
    m = _SPLIT.match(path[: -len(".gguf")])
    return m is None or int(m.group(3)) <= 1 or int(m.group(2)) == 1


def _pick(files: list[str], tag: str, hf_file: str | None) -> str | None:
    """download.cpp ``common_download_resolve_path`` / ``find_best_model``."""
    if hf_file:
        return hf_file if hf_file in files else None
    for t in [tag] if tag else ["Q4_K_M", "Q8_0"]:
        pattern = re.compile(re.escape(t) + "[.-]", re.IGNORECASE)
        for f in files:
            if _is_model(f) and pattern.search(f) and _first_split(f):
                return f
    if not tag:
        return next((f for f in files if _is_model(f) and _first_split(f)), None)
    return None


def _inside(path: Path, repo_dir: Path) -> None:
    """A link out of the repository's folder is not followed (HfCacheError)."""
    real = os.path.realpath(path)
    top = os.path.realpath(repo_dir)
    if os.path.commonpath([real, top]) != top:
        raise HfCacheError(f"{path} links out of {repo_dir} (to {real}): not followed")
