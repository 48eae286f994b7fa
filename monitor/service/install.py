"""`vramscope service install/uninstall`: write the unit and an example config.

System install (root): ``/etc/systemd/system/vramscope.service`` from systemd/vramscope.service
with ``ExecStart`` pointing at the vramscope being run, and ``/etc/vramscope/config.toml``
(kept if present). ``--user``: ``~/.config/systemd/user/vramscope.service`` without the
system-only lines (a user manager cannot grant capabilities or groups) and
``~/.config/vramscope/config.toml``. Nothing is started: the next steps are printed.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "systemd"
SYSTEM_ONLY = ("DynamicUser=", "SupplementaryGroups=", "CapabilityBoundingSet=",
               "AmbientCapabilities=", "ProtectSystem=", "ProtectHome=", "ProtectKernel",
               "ProtectControlGroups=", "ProtectClock=", "ProtectHostname=", "StateDirectory",
               "RestrictNamespaces=", "PrivateTmp=", "RestrictAddressFamilies=",
               "SystemCallArchitectures=", "RestrictRealtime=", "RestrictSUIDSGID=",
               "LockPersonality=")


class InstallError(Exception):
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
        return Paths(cfg / "systemd" / "user" / "vramscope.service",
                     cfg / "vramscope" / "config.toml", "default.target")
    return Paths(root / "etc/systemd/system/vramscope.service",
                 root / "etc/vramscope/config.toml", "multi-user.target")


def executable() -> str:
    """The vramscope command this process runs from (the venv's console script)."""
    found = shutil.which("vramscope") or str(Path(sys.argv[0]).resolve())
    return str(Path(found).resolve()) if Path(found).exists() else found


def render_unit(user: bool, exe: str, config: Path) -> str:
    lines = []
    for line in (SHIPPED / "vramscope.service").read_text().splitlines():
        if line.startswith("ExecStart="):
            line = f"ExecStart={exe} daemon --config {config}"
        if user and line.startswith(SYSTEM_ONLY):
            continue
        if user and line.startswith("WantedBy="):
            line = "WantedBy=default.target"
        lines.append(line)
    return "\n".join(lines) + "\n"


def install(user: bool, root: Path = Path("/"), exe: str | None = None) -> list[str]:
    """Write the unit (and the config when absent); return the lines to print."""
    if not user and os.geteuid() != 0 and root == Path("/"):
        raise InstallError("a system install needs root; use sudo, or --user for your own "
                           "user's systemd")
    where = paths(user, root)
    try:
        where.unit.parent.mkdir(parents=True, exist_ok=True)
        where.unit.write_text(render_unit(user, exe or executable(), where.config))
        wrote_config = not where.config.exists()
        if wrote_config:
            where.config.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(SHIPPED / "config.example.toml", where.config)
    except OSError as exc:
        raise InstallError(f"cannot write {exc.filename}: {exc.strerror}") from None
    ctl = "systemctl --user" if user else "systemctl"
    return [
        f"wrote {where.unit}",
        f"{'wrote' if wrote_config else 'kept'} {where.config}",
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
    return [f"removed {where.unit} (kept {where.config} and the data)",
            f"run: {ctl} disable --now vramscope; {ctl} daemon-reload"]
