"""A folder written only through its file descriptor: no write ever follows a link.

``vramscope capture`` may run as root into a path a user chose (``/tmp/box``), where
someone else can plant links between a check and a write. :meth:`OutDir.create` makes the
folder itself (or takes an existing one only when it is empty, ours, not a link and not
writable by others), holds it open with ``O_DIRECTORY | O_NOFOLLOW``, and every file and
subfolder is then made relative to that descriptor: files with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (a link or anything already there is refused, never
opened), folders with ``mkdirat`` and re-opened with ``O_NOFOLLOW``. A refusal is an
:class:`OutDirError` in one line. :func:`pack` writes a ``.tar.gz`` the same way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePath

from monitor.errors import SetupError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class OutDirError(SetupError):
    """A folder or file this process will not write (a link, someone else's, not empty)."""


def _why(exc: OSError, where: str) -> OutDirError:
    if exc.errno == errno.ELOOP:
        return OutDirError(f"{where} is a symbolic link; refusing to write through it")
    if exc.errno == errno.EEXIST:
        return OutDirError(f"{where} already exists; refusing to overwrite it")
    if exc.errno == errno.ENOTDIR:
        return OutDirError(f"{where} is not a folder")
    return OutDirError(f"cannot write {where}: {exc.strerror or exc}")


def _parts(rel: str | PurePath) -> tuple[str, ...]:
    parts = Path(rel).parts
    if not parts or any(p in ("", ".", "..") or "/" in p for p in parts):
        raise OutDirError(f"refusing the path {str(rel)!r} inside the folder")
    return parts


class OutDir:
    """An open folder; paths given to its methods are relative to it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def create(cls, path: Path) -> OutDir:
        """Make ``path`` (mode 0755), or take it when it is an empty folder of ours."""
        path = Path(path)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)  # the caller's own path
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise OutDirError(f"cannot create {path}: {exc.strerror or exc}") from None
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError as exc:
            raise _why(exc, str(path)) from None
        try:
            cls._check_ours(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    @staticmethod
    def _check_ours(fd: int, path: Path) -> None:
        """What we hold open (not what the name points at now) is ours and empty."""
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise OutDirError(
                f"{path} is owned by uid {st.st_uid}, not by this user "
                f"(uid {os.geteuid()}); give a new folder"
            )
        if st.st_mode & 0o022:
            raise OutDirError(
                f"{path} is writable by others (mode "
                f"{stat.S_IMODE(st.st_mode):o}); give a new folder"
            )
        if os.listdir(fd):
            raise OutDirError(f"{path} exists and is not empty; give a new folder")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OutDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _parent(self, parts: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the folder holding ``parts[-1]``, made as needed."""
        fd = self.fd
        opened: list[int] = []
        try:
            for depth, name in enumerate(parts[:-1], 1):
                fd = self._subdir(fd, name, parts[:depth])
                opened.append(fd)
            yield fd
        finally:
            for held in opened:
                os.close(held)

    def _subdir(self, parent: int, name: str, parts: tuple[str, ...]) -> int:
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            pass  # a real folder is fine; a link or a file is refused by the open below
        except OSError as exc:
            raise _why(exc, self._show(parts)) from None
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise _why(exc, self._show(parts)) from None

    def _show(self, parts: tuple[str, ...]) -> str:
        return str(self.path.joinpath(*parts))

    def mkdir(self, rel: str | PurePath, mode: int | None = None) -> None:
        """Make a folder (and its parents); an existing real folder is fine."""
        parts = _parts(rel)
        with self._parent(parts) as parent:
            fd = self._subdir(parent, parts[-1], parts)
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)

    def write_file(self, rel: str | PurePath, data: bytes, mode: int = 0o644) -> None:
        """Create a new file holding ``data``; refused if anything is already there."""
        parts = _parts(rel)
        with self._parent(parts) as parent:
            try:
                fd = os.open(parts[-1], _NEW_FILE, 0o600, dir_fd=parent)
            except OSError as exc:
                raise _why(exc, self._show(parts)) from None
            try:
                with open(fd, "wb", closefd=False) as out:
                    out.write(data)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)

    def symlink(self, rel: str | PurePath, target: str) -> None:
        """Create a link (its target is only text to us; nothing is written through it)."""
        parts = _parts(rel)
        with self._parent(parts) as parent:
            try:
                os.symlink(target, parts[-1], dir_fd=parent)
            except OSError as exc:
                raise _why(exc, self._show(parts)) from None


def pack(tree: OutDir, archive: Path) -> Path:
    """``tree`` as ``archive`` (.tar.gz), created new (never through a link), read through
    descriptors: links stay links, file modes are kept, unreadable empty files go in empty."""
    archive = Path(archive)
    try:
        parent = os.open(archive.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise OutDirError(f"cannot write {archive}: {exc.strerror or exc}") from None
    try:
        fd = os.open(archive.name, _NEW_FILE, 0o644, dir_fd=parent)
    except OSError as exc:
        raise _why(exc, str(archive)) from None
    finally:
        os.close(parent)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        _add_dir(tar, tree.fd, tree.path.name)
    return archive


def _info(name: str, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    info.uid, info.gid = st.st_uid, st.st_gid
    return info


def _add_dir(tar: tarfile.TarFile, fd: int, arcname: str) -> None:
    info = _info(arcname, os.fstat(fd))
    info.type = tarfile.DIRTYPE
    tar.addfile(info)
    try:
        names = sorted(os.listdir(fd))
    except PermissionError:  # a folder recorded as unreadable: empty, mode 000
        return
    for name in names:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        member = f"{arcname}/{name}"
        if stat.S_ISLNK(st.st_mode):
            info = _info(member, st)
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(name, dir_fd=fd)
            tar.addfile(info)
        elif stat.S_ISDIR(st.st_mode):
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            try:
                _add_dir(tar, sub, member)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            info = _info(member, st)
            if st.st_size == 0:
                tar.addfile(info)  # also the mode-000 files we could not open as a user
                continue
            file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            with os.fdopen(file_fd, "rb") as data:
                info.size = os.fstat(file_fd).st_size
                tar.addfile(info, data)
