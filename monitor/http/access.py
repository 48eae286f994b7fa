"""Which model files an HTTP predict may read: only inside ``[http] model_dirs`` and only
what the caller could read itself.

The daemon runs as root; without this, any local user (or token holder) could have it
judge a GGUF that only root can read, or walk any file of the box. The rules:

- the path is resolved (``os.path.realpath``) and must lie inside one of the configured
  folders (themselves resolved); no folders configured: every HTTP predict naming a model
  is refused (403) and says to set ``[http] model_dirs``;
- the caller: a loopback client's uid comes from its socket (monitor/http/peer.py); a
  remote (token) client, or a loopback one whose socket is not found, is "others";
  uid 0 may read anything inside the folders;
- the file must be readable and every folder above it searchable by that caller, judged
  from the mode bits (owner, then group: the uid's groups from ``os.getgrouplist``, then
  others), as the kernel does without ACLs. A file or folder with a POSIX access ACL is
  refused for every caller but root (the ACL is not evaluated here);
- all of it is judged again on each opened descriptor (``/proc/self/fd/N`` names what was
  really opened), so a link swapped in between the check and the open does not escape.
"""

from __future__ import annotations

import os
import pwd
import stat
import time
from dataclasses import dataclass
from typing import Any

from monitor.gguf.reader import GgufError, read_header

_ACL_XATTR = "system.posix_acl_access"
MODEL_DIRS_UNSET = (
    "HTTP predicts are off for model files: the daemon reads them as root, so set "
    '[http] model_dirs to the folders clients may name (e.g. model_dirs = ["/models"])'
)


class ModelAccessError(GgufError):
    """A model file this caller may not have judged (the API answers 403)."""


class DeadlinePassed(GgufError):
    """The request's deadline passed; an abandoned worker stops at its next file."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: ``uid`` None is unknown (a remote client): only "others" bits count."""

    uid: int | None
    gids: frozenset[int] = frozenset()

    @classmethod
    def of_uid(cls, uid: int | None) -> Caller:
        if uid is None or uid == 0:
            return cls(uid)
        try:
            entry = pwd.getpwuid(uid)
            gids = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
        except (KeyError, OSError):  # a uid without a passwd entry: no groups known
            gids = frozenset()
        return cls(uid, gids)

    def name(self) -> str:
        return "an unknown (remote) caller" if self.uid is None else f"uid {self.uid}"


def allowed(caller: Caller, st: os.stat_result, want: int) -> bool:
    """Whether ``caller`` gets ``want`` (4 read, 1 search) on a file with ``st``: the
    owner's bits if it owns it, else the group's if in its group, else others'."""
    if caller.uid == 0:
        return True
    if caller.uid is not None and st.st_uid == caller.uid:
        return bool((st.st_mode >> 6) & want)
    if caller.uid is not None and st.st_gid in caller.gids:
        return bool((st.st_mode >> 3) & want)
    return bool(st.st_mode & want)


def _has_acl(target: int | str) -> bool:
    try:
        if isinstance(target, int):
            os.getxattr(target, _ACL_XATTR)
        else:
            os.getxattr(target, _ACL_XATTR, follow_symlinks=False)
    except OSError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class ModelAccess:
    """The model files one HTTP predict may read; ``reader`` is the read_header it uses."""

    dirs: tuple[str, ...]  # [http] model_dirs as configured (resolved when checked)
    caller: Caller
    deadline: float | None = None  # time.monotonic() after which no file is opened

    def inside(self, real: str) -> bool:
        for folder in self.dirs:
            root = os.path.realpath(folder)
            if os.path.commonpath([real, root]) == root:
                return True
        return False

    def check_path(self, path: str) -> str:
        """The resolved path, or :class:`ModelAccessError` when it leaves model_dirs."""
        if not self.dirs:
            raise ModelAccessError(path, MODEL_DIRS_UNSET)
        real = os.path.realpath(path)
        if not self.inside(real):
            raise ModelAccessError(path, "outside the folders in [http] model_dirs")
        return real

    def guard(self, fd: int, path: str) -> None:
        """The reader's check of every opened split (monitor/gguf/reader.py Guard)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlinePassed(path, "the predict's deadline passed")
        real = os.readlink(f"/proc/self/fd/{fd}")
        self.check_path(real)
        if not self._readable(os.fstat(fd), fd, real):
            raise ModelAccessError(path, f"not readable by the caller ({self.caller.name()})")

    def _readable(self, st: os.stat_result, fd: int, real: str) -> bool:
        caller = self.caller
        if caller.uid == 0:
            return True
        if not allowed(caller, st, 4) or _has_acl(fd):
            return False
        folder = os.path.dirname(real)
        while True:
            try:
                fst = os.lstat(folder)
            except OSError:
                return False
            if not stat.S_ISDIR(fst.st_mode) or not allowed(caller, fst, 1) or _has_acl(folder):
                return False
            parent = os.path.dirname(folder)
            if parent == folder:
                return True
            folder = parent

    def reader(self, path: str) -> Any:
        """read_header for this caller: refused before any open when the path leaves
        model_dirs, then judged again on every opened descriptor."""
        self.check_path(os.path.abspath(path))
        return read_header(path, guard=self.guard)
