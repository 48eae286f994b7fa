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
``capture:omitted``); ``/proc/PID/maps`` beyond its ``libtorch`` lines (all the torch check
reads). A file the collectors could not read is recorded as mode 000, so it replays as
permission denied for a non-root reader.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from collectors import _fs
from collectors.base import CollectorOptions, Roots
from collectors.procfs import parse_cmdline
from collectors.redact import redact_argv

OMITTED_LINK = "capture:omitted"
_DRM_LINK_PREFIXES = ("/dev/dri/renderD", "/dev/dri/card")


class CaptureError(Exception):
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
        return {"out": str(self.out), "files": self.files, "bytes": self.bytes,
                "links": self.links, "denied": self.denied,
                "redacted_cmdlines": self.redacted_cmdlines, "dropped": self.dropped,
                "collectors": self.collectors, "nvml": self.nvml,
                "archive": None if self.archive is None else str(self.archive)}


@dataclass
class _Tree:
    """Maps a path the collectors read to its place in the capture."""

    roots: Roots
    out: Path

    def place(self, path: str) -> Path | None:
        for root, name in ((self.roots.proc, "proc"), (self.roots.sys, "sys")):
            try:
                rel = Path(path).relative_to(root)
            except ValueError:
                continue
            return self.out / name / rel
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


def _write(tree: _Tree, recorded: list[tuple[str, str, object]], result: CaptureResult) -> None:
    for kind, path, value in recorded:
        target = tree.place(path)
        if target is None:
            continue
        if isinstance(value, PermissionError):
            result.denied.append(path)
            if kind == "dir":
                target.mkdir(parents=True, exist_ok=True)
                target.chmod(0)
            elif kind == "file":
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
                target.chmod(0)
            continue
        if isinstance(value, OSError):
            continue  # gone or absent: absent in the capture too
        if kind == "dir":
            target.mkdir(parents=True, exist_ok=True)
            if tree.place(path) == tree.out / "proc":  # the process listing: one dir each
                for name in value:  # type: ignore[attr-defined]
                    (target / name).mkdir(exist_ok=True)
        elif kind == "file":
            data = _redact_file(path, value, result)  # type: ignore[arg-type]
            if data is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            result.files += 1
            result.bytes += len(data)
        elif kind == "link":
            link = str(value)
            if not link.startswith(_DRM_LINK_PREFIXES):
                link = OMITTED_LINK
                result.dropped += 1
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink():
                target.unlink()
            os.symlink(link, target)
            result.links += 1
        elif kind == "exists" and value and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()


def capture(roots: Roots, out: Path, *, enabled: Iterable[str] | None = None,
            nvml: bool = True, archive: bool = False) -> CaptureResult:
    """Sample once with every read recorded, and write the tree (and ``nvml.json``)."""
    from monitor.sampler import Sampler

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CaptureError(f"{out} exists and is not empty; give a new folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"cannot create {out}: {exc.strerror or exc}") from None
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
        _write(_Tree(roots, out), recorded, result)
        for name in ("proc", "sys"):  # both roots, even with nothing read under one
            (out / name).mkdir(exist_ok=True)
        if nvml:  # also when the collector failed: that is when a recording helps most
            result.nvml = _record_nvml(out, roots.proc)
        _write_manifest(out, result)
        if archive:
            result.archive = _archive(out)
    except OSError as exc:
        raise CaptureError(f"cannot write the capture in {out}: {exc.strerror or exc}") from None
    return result


def replay_command(out: Path) -> str:
    """The command that samples the capture again, runnable from any folder."""
    folder = Path(os.path.abspath(out))
    return (f"vramscope status --proc-root {shlex.quote(str(folder / 'proc'))} "
            f"--sys-root {shlex.quote(str(folder / 'sys'))}")


def _record_nvml(out: Path, proc: Path) -> str:
    try:
        from collectors.nvml_recorder import NvmlUnavailable, record_nvml
    except ImportError:
        return "not recorded (no recorder)"
    try:
        scenario = record_nvml(proc)
    except NvmlUnavailable as exc:
        return f"not recorded: {exc}"
    (out / "nvml.json").write_text(json.dumps(scenario, indent=2) + "\n")
    return "nvml.json"


def _write_manifest(out: Path, result: CaptureResult) -> None:
    doc = {
        "schema": "vramscope.capture/1",
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "replay": f"vramscope status --proc-root {out}/proc --sys-root {out}/sys",
        "never_captured": "environ; secrets on command lines (redacted); targets of non-DRM "
                          "file descriptors; /proc/PID/maps beyond libtorch lines",
        **result.as_dict(),
    }
    doc.pop("out")
    doc.pop("archive")
    (out / "capture.json").write_text(json.dumps(doc, indent=2) + "\n")


def _archive(out: Path) -> Path:
    path = out.with_name(out.name + ".tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        tar.add(out, arcname=out.name)  # symlinks stay symlinks; mode-000 files keep modes
    return path
