"""``vramscope capture``: record what the collectors read on this machine, as a tree.

One sample runs with :func:`collectors._fs.recording` on, so the tree holds exactly the
``/proc`` and ``/sys`` files, listings and links the collectors read, in the layout
``--proc-root DIR/proc --sys-root DIR/sys`` reads back: a bug report a developer can sample
(``vramscope status``, the TUI) as if on the reporter's box, and the way real fixtures
enter ``tests/fixtures/`` (node_exporter's recorded-fixture habit). With an NVIDIA driver,
``nvml.json`` is the driver's answers in the fake driver's scenario format (``tests/fakes``).

What never leaves the machine (DESIGN's security stance): ``/proc/PID/environ`` (the
collectors do not read it; a path ending in ``environ`` is dropped regardless); secrets on
command lines (``collectors.redact``, the same rule as the database); the targets of file
descriptors that are not DRM nodes (only "is it /dev/dri/…" matters; others become
``capture:omitted``; a process's ``cwd`` link keeps its target, which relative model paths
need); ``/proc/PID/maps`` beyond its ``libtorch`` lines (all the torch check
reads). A file the collectors could not read is recorded as mode 000, so it replays as
permission denied for a non-root reader.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from collectors import _fs
from collectors.base import CollectorOptions, Roots
from collectors.procfs import parse_cmdline
from collectors.redact import redact_argv
from monitor.errors import SetupError
from monitor.report.outdir import OutDir, OutDirError, pack

OMITTED_LINK = "capture:omitted"
_DRM_LINK_PREFIXES = ("/dev/dri/renderD", "/dev/dri/card")


class CaptureError(SetupError):
    """A capture that cannot be written (the folder exists, no space), phrased for the user."""


@dataclass
class CaptureResult:
    out: Path
    files: int = 0
    bytes: int = 0
    links: int = 0
    denied: list[str] = field(default_factory=list)
    redacted_cmdlines: int = 0
    dropped: int = 0  # environ files, links to non-DRM targets
    collectors: dict[str, str] = field(default_factory=dict)  # name -> status
    nvml: str = "not recorded"
    archive: Path | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "out": str(self.out),
            "files": self.files,
            "bytes": self.bytes,
            "links": self.links,
            "denied": self.denied,
            "redacted_cmdlines": self.redacted_cmdlines,
            "dropped": self.dropped,
            "collectors": self.collectors,
            "nvml": self.nvml,
            "archive": None if self.archive is None else str(self.archive),
        }


@dataclass
class _Tree:
    """Maps a path the collectors read to its place in the capture (relative to it)."""

    roots: Roots

    def place(self, path: str) -> PurePosixPath | None:
        for root, name in ((self.roots.proc, "proc"), (self.roots.sys, "sys")):
            try:
                rel = PurePosixPath(path).relative_to(root)
            except ValueError:
                continue
            if any(part in (".", "..") for part in rel.parts):
                return None  # never a path that climbs out of the tree
            return PurePosixPath(name) / rel
        return None


def _redact_file(path: str, data: bytes, result: CaptureResult) -> bytes | None:
    """The bytes to store for ``path``; None to drop the file."""
    name = path.rsplit("/", 1)[-1]
    if name == "environ":
        result.dropped += 1
        return None
    if name == "cmdline":
        argv = parse_cmdline(data)
        clean = redact_argv(argv)
        if clean != argv:
            result.redacted_cmdlines += 1
        return b"".join(a.encode() + b"\0" for a in clean)
    if name == "maps":
        return b"".join(line + b"\n" for line in data.splitlines() if b"libtorch" in line)
    return data


@dataclass
class _Plan:
    """What the capture holds, each path once (the last read of a file wins)."""

    dirs: dict[PurePosixPath, bool] = field(default_factory=dict)  # path -> unreadable
    files: dict[PurePosixPath, bytes | None] = field(default_factory=dict)  # None: mode 000
    links: dict[PurePosixPath, str] = field(default_factory=dict)


def _plan(tree: _Tree, recorded: list[tuple[str, str, object]], result: CaptureResult) -> _Plan:
    plan = _Plan()
    for kind, path, value in recorded:
        target = tree.place(path)
        if target is None:
            continue
        if isinstance(value, PermissionError):
            result.denied.append(path)
            if kind == "dir":
                plan.dirs[target] = True
            elif kind == "file":
                plan.files[target] = None
            continue
        if isinstance(value, OSError):
            continue  # gone or absent: absent in the capture too
        if kind == "dir":
            plan.dirs.setdefault(target, False)
            # the process listing (os.listdir's names): one dir each
            if target == PurePosixPath("proc") and isinstance(value, list):
                for name in value:
                    if isinstance(name, str) and name not in (".", "..") and "/" not in name:
                        plan.dirs.setdefault(target / name, False)
        elif kind == "file" and isinstance(value, bytes):  # _fs.read_bytes gives bytes
            data = _redact_file(path, value, result)
            if data is not None:
                plan.files[target] = data
        elif kind == "link":
            link = str(value)
            cwd = path.endswith("/cwd")  # /proc/PID/cwd: relative -m paths resolve on it
            if not link.startswith(_DRM_LINK_PREFIXES) and not cwd:
                link = OMITTED_LINK
                result.dropped += 1
            plan.links[target] = link
        elif kind == "exists" and value and target not in plan.files:
            plan.files.setdefault(target, b"")
    return plan


def _write(out: OutDir, plan: _Plan, result: CaptureResult) -> None:
    """Every entry through the folder's descriptor; unreadable folders closed last."""
    for path in plan.dirs:
        out.mkdir(path)
    for path, data in plan.files.items():
        if data is None:
            out.write_file(path, b"", mode=0)
            continue
        out.write_file(path, data)
        result.files += 1
        result.bytes += len(data)
    for path, link in plan.links.items():
        out.symlink(path, link)
        result.links += 1
    for path in sorted(
        (p for p, denied in plan.dirs.items() if denied), key=lambda p: -len(p.parts)
    ):
        out.mkdir(path, mode=0)


def capture(
    roots: Roots,
    out: Path,
    *,
    enabled: Iterable[str] | None = None,
    nvml: bool = True,
    archive: bool = False,
) -> CaptureResult:
    """Sample once with every read recorded, and write the tree (and ``nvml.json``).

    The folder is made here (or is an empty one of ours) and written only through its
    descriptor (monitor/report/outdir.py): a link planted in it, or at ``FOLDER.tar.gz``, is a
    :class:`CaptureError`, never written through."""
    from monitor.daemon.sampler import Sampler

    out = Path(out)
    archive_path = out.with_name(out.name + ".tar.gz") if archive else None
    if archive_path is not None and os.path.lexists(archive_path):
        raise CaptureError(f"{archive_path} already exists; move it away or give a new folder")
    try:
        tree = OutDir.create(out)
    except OutDirError as exc:
        raise CaptureError(str(exc)) from None
    with tree:
        result = CaptureResult(out)
        recorded: list[tuple[str, str, object]] = []
        with _fs.recording(lambda kind, path, value: recorded.append((kind, path, value))):
            sampler = Sampler(roots, CollectorOptions(), enabled)  # some read when they start
            try:
                snap = sampler.sample()
            finally:
                sampler.close()
        result.collectors = {run.collector: run.status for run in snap.runs}
        try:
            _write(tree, _plan(_Tree(roots), recorded, result), result)
            for name in ("proc", "sys"):  # both roots, even with nothing read under one
                tree.mkdir(name)
            if nvml:  # also when the collector failed: that is when a recording helps most
                result.nvml = _record_nvml(tree, roots.proc)
            _write_manifest(tree, result)
            if archive_path is not None:
                result.archive = pack(tree, archive_path)
        except OutDirError as exc:
            raise CaptureError(str(exc)) from None
        except OSError as exc:
            raise CaptureError(
                f"cannot write the capture in {out}: {exc.strerror or exc}"
            ) from None
    return result


def replay_command(out: Path) -> str:
    """The command that samples the capture again, runnable from any folder."""
    folder = Path(os.path.abspath(out))
    return (
        f"vramscope status --proc-root {shlex.quote(str(folder / 'proc'))} "
        f"--sys-root {shlex.quote(str(folder / 'sys'))}"
    )


def _record_nvml(out: OutDir, proc: Path) -> str:
    try:
        from collectors.nvml_recorder import NvmlUnavailable, record_nvml
    except ImportError:
        return "not recorded (no recorder)"
    try:
        scenario = record_nvml(proc)
    except NvmlUnavailable as exc:
        return f"not recorded: {exc}"
    out.write_file("nvml.json", (json.dumps(scenario, indent=2) + "\n").encode())
    return "nvml.json"


def _write_manifest(out: OutDir, result: CaptureResult) -> None:
    doc = {
        "schema": "vramscope.capture/1",
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "replay": f"vramscope status --proc-root {out.path}/proc --sys-root {out.path}/sys",
        "never_captured": "environ; secrets on command lines (redacted); targets of non-DRM "
        "file descriptors; /proc/PID/maps beyond libtorch lines",
        **result.as_dict(),
    }
    doc.pop("out")
    doc.pop("archive")
    out.write_file("capture.json", (json.dumps(doc, indent=2) + "\n").encode())
