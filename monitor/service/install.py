"""`vramscope service install/uninstall`: write the unit and an example config.

System install (root): ``/etc/systemd/system/vramscope.service`` from systemd/vramscope.service
with ``ExecStart`` pointing at the vramscope being run, and ``/etc/vramscope/config.toml``
(kept if present). ``--user``: ``~/.config/systemd/user/vramscope.service`` without the
system-only lines (a user manager cannot grant capabilities or groups) and
``~/.config/vramscope/config.toml``. Nothing is started: the next steps are printed.

The config holds tokens and alert credentials: it is created 0600 (O_EXCL|O_NOFOLLOW, an
existing file or link is never replaced). The system service holds CAP_SYS_PTRACE, so a
system install refuses a vramscope whose interpreter, venv or code a non-root user can
change (:func:`user_writable`), unless told ``allow_user_venv``.
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from monitor.errors import SetupError

SOURCE_TREE = Path(__file__).resolve().parents[2] / "systemd"
SYSTEM_ONLY = (
    "DynamicUser=",
    "SupplementaryGroups=",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "ProtectSystem=",
    "ProtectHome=",
    "ProtectKernel",
    "ProtectControlGroups=",
    "ProtectClock=",
    "ProtectHostname=",
    "StateDirectory",
    "RestrictNamespaces=",
    "PrivateTmp=",
    "RestrictAddressFamilies=",
    "SystemCallArchitectures=",
    "RestrictRealtime=",
    "RestrictSUIDSGID=",
    "LockPersonality=",
)
ROOT_OWNED_FIX = (
    "install vramscope where only root can write (sudo python3 -m venv "
    "/opt/vramscope && sudo /opt/vramscope/bin/pip install vramscope, then "
    "sudo /opt/vramscope/bin/vramscope service install) or pass "
    "--allow-user-venv"
)


class InstallError(SetupError):
    """A one-line, user-facing reason the install cannot proceed."""


@dataclass(frozen=True, slots=True)
class Paths:
    unit: Path
    config: Path
    wanted_by: str


def paths(user: bool, root: Path = Path("/")) -> Paths:
    if user:
        home = Path(os.environ.get("HOME", "~")).expanduser()
        cfg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
        return Paths(
            cfg / "systemd" / "user" / "vramscope.service",
            cfg / "vramscope" / "config.toml",
            "default.target",
        )
    return Paths(
        root / "etc/systemd/system/vramscope.service",
        root / "etc/vramscope/config.toml",
        "multi-user.target",
    )


def shipped(name: str) -> bytes:
    """A file of systemd/: inside the package in a wheel (pyproject's force-include), at
    the top of the source tree in a checkout or an editable install."""
    packaged = resources.files(__package__) / "systemd" / name
    if packaged.is_file():
        return packaged.read_bytes()
    try:
        return (SOURCE_TREE / name).read_bytes()
    except OSError:
        raise InstallError(
            f"systemd/{name} is missing from this installation; reinstall vramscope"
        ) from None


def executable() -> str:
    """The vramscope command this process runs from: argv[0] when it is the console script,
    else the one beside this interpreter (``python -m monitor``), else ``python -m``."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "vramscope" and argv0.is_file():
        return str(argv0.absolute())
    beside = Path(sys.prefix) / "bin" / "vramscope"
    if beside.is_file():
        return str(beside)
    return f"{sys.executable} -m monitor"


def render_unit(user: bool, exe: str, config: Path) -> str:
    lines = []
    for line in shipped("vramscope.service").decode().splitlines():
        if line.startswith("ExecStart="):
            line = f"ExecStart={exe} daemon --config {config}"
        if user and line.startswith(SYSTEM_ONLY):
            continue
        if user and line.startswith("WantedBy="):
            line = "WantedBy=default.target"
        lines.append(line)
    return "\n".join(lines) + "\n"


# --- who can change the code the service runs --------------------------------------------


def _interpreter(exe: str) -> Path | None:
    """The ``#!`` interpreter of a console script (``None`` for a binary / unreadable)."""
    try:
        with open(exe.split(" ", 1)[0], "rb") as f:
            first = f.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return Path(words[0]) if words else None


def code_paths(exe: str) -> list[Path]:
    """What the service executes or imports: the script, its interpreter (link and file),
    the venv, the standard library and site-packages, and this package's own folders."""
    import collectors
    import monitor

    found = [Path(exe.split(" ", 1)[0]), Path(sys.executable), Path(sys.prefix)]
    interp = _interpreter(exe)
    if interp is not None:
        found += [interp, Path(os.path.realpath(interp))]
    found += [
        Path(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")
    ]
    found += [Path(m.__file__).parent for m in (collectors, monitor) if m.__file__ is not None]
    tui = Path(monitor.__file__ or ".").parent.parent / "tui"
    if tui.is_dir():
        found.append(tui)
    return found


def _ancestry(path: Path) -> Iterator[Path]:
    """``path`` and each folder above it, as written and as resolved."""
    for start in dict.fromkeys((Path(os.path.abspath(path)), Path(os.path.realpath(path)))):
        yield start
        yield from start.parents


def _changeable_by(path: Path) -> str | None:
    """Why a non-root user can replace or edit ``path``; ``None`` if only root can."""
    try:
        info = path.lstat()
    except OSError:
        return None  # absent: nothing of it runs
    if stat.S_ISLNK(info.st_mode):
        return None  # a link cannot be edited; its folder is checked
    if info.st_uid != 0:
        return f"is owned by uid {info.st_uid}"
    sticky_dir = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
    if info.st_mode & stat.S_IWOTH and not sticky_dir:
        return "is writable by every user"
    if info.st_mode & stat.S_IWGRP and info.st_gid != 0 and not sticky_dir:
        return f"is writable by group {info.st_gid}"
    return None


def user_writable(paths_: Iterable[Path]) -> tuple[Path, str] | None:
    """The first of ``paths_`` (or a folder above one) a non-root user can change."""
    seen: set[Path] = set()
    for path in paths_:
        for each in _ancestry(path):
            if each in seen:
                continue
            seen.add(each)
            why = _changeable_by(each)
            if why is not None:
                return each, why
    return None


# --- writing -------------------------------------------------------------------------------


def _make_dirs(path: Path, mode: int) -> None:
    """Create ``path`` and missing parents with exactly ``mode`` (existing ones untouched)."""
    missing = []
    while not path.exists() and not path.is_symlink():
        missing.append(path)
        path = path.parent
    for each in reversed(missing):
        each.mkdir(mode=mode)
        os.chmod(each, mode)  # umask must not loosen nor tighten it


def _write_unit(path: Path, text: str) -> None:
    """Write via a fresh file and a rename: a link at ``path`` is replaced, not followed."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".vramscope.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_config(path: Path, data: bytes, system: bool) -> bool:
    """Create the config 0600 (root:root for a system install); False if something is
    already there (a file or a link: never opened, never replaced)."""
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        if system and os.geteuid() == 0:
            os.fchown(f.fileno(), 0, 0)
        f.write(data)
    return True


def _kept_note(path: Path) -> str:
    try:
        info = path.lstat()
    except OSError:
        return ""
    if stat.S_ISREG(info.st_mode) and info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f" (not overwritten; other users can read it: chmod 600 {path})"
    return " (not overwritten)"


def install(
    user: bool, root: Path = Path("/"), exe: str | None = None, allow_user_venv: bool = False
) -> list[str]:
    """Write the unit (and the config when absent); return the lines to print."""
    if not user and os.geteuid() != 0 and root == Path("/"):
        raise InstallError(
            "a system install needs root; use sudo, or --user for your own user's systemd"
        )
    exe = exe or executable()
    if not user and not allow_user_venv:
        unsafe = user_writable(code_paths(exe))
        if unsafe is not None:
            path, why = unsafe
            raise InstallError(
                f"{path} {why}, and the service runs this vramscope with "
                f"CAP_SYS_PTRACE: {ROOT_OWNED_FIX}"
            )
    where = paths(user, root)
    dir_mode = 0o700 if user else 0o755
    # The unit names the config where it will be on the installed box: ``--root`` is a
    # staging folder (a package build, an image), not part of the final path (issue 28).
    unit_text = render_unit(user, exe, paths(user).config)
    example = shipped("config.example.toml")
    try:
        _make_dirs(where.unit.parent, dir_mode)
        _write_unit(where.unit, unit_text)
        _make_dirs(where.config.parent, dir_mode)
        wrote_config = _write_config(where.config, example, system=not user)
    except OSError as exc:
        raise InstallError(f"cannot write {exc.filename}: {exc.strerror}") from None
    ctl = "systemctl --user" if user else "systemctl"
    return [
        f"wrote {where.unit}",
        f"wrote {where.config} (mode 600)"
        if wrote_config
        else f"kept {where.config}{_kept_note(where.config)}",
        "next:",
        f"  {ctl} daemon-reload",
        f"  {ctl} enable --now vramscope",
        f"  {ctl} status vramscope      (journalctl {'--user ' if user else ''}-u vramscope)",
    ]


def uninstall(user: bool, root: Path = Path("/")) -> list[str]:
    where = paths(user, root)
    ctl = "systemctl --user" if user else "systemctl"
    if not where.unit.exists():
        return [f"no unit at {where.unit}: nothing to remove"]
    try:
        where.unit.unlink()
    except OSError as exc:
        raise InstallError(f"cannot remove {where.unit}: {exc.strerror}") from None
    return [
        f"removed {where.unit} (kept {where.config} and the data)",
        f"run: {ctl} disable --now vramscope; {ctl} daemon-reload",
    ]
