"""The backlog side file: every field of a tick survives it; links are never followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from collectors.base import (
    CollectorRun,
    DeviceEvent,
    DeviceSample,
    ExitedProcess,
    HiddenProcess,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
)
from monitor.store import backlog

GIB = 1024**3


def tick(ts_ms: int) -> Snapshot:
    return Snapshot(
        ts_ms,
        (
            DeviceSample(
                "drm:0000:c3:00.0",
                "drm",
                "amd",
                "Strix",
                "unified",
                96 * GIB,
                GIB,
                gtt_used_bytes=GIB,
                mig_enabled=None,
                util_pct=12.5,
            ),
        ),
        (
            ProcessInfo(
                7,
                70,
                1_700_000_000_000,
                1,
                1000,
                "llama-server",
                ("llama-server", "-m", "m.gguf"),
                "llama.cpp",
                ("inference", "gpu"),
            ),
        ),
        (ProcessMemory(7, "drm:0000:c3:00.0", gtt_bytes=GIB),),
        (HiddenProcess(9, "permission denied", comm="x"),),
        (ExitedProcess(8, 80, ts_ms - 1000, "vanished"),),
        (CollectorRun("drm", ts_ms, 0.01, 0.002, "ok"),),
        (DeviceEvent(ts_ms, "daemon", "daemon_stopped", "info", "stopped", {"ticks": 3}),),
    )


def test_round_trip_is_exact_and_private(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    snaps = [tick(2000), tick(1000)]
    path = backlog.save(db, snaps)
    assert path == tmp_path / "v.db.backlog.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    got = backlog.load(db)
    assert list(got.snaps) == sorted(snaps, key=lambda s: s.ts_ms)
    assert got.bad == 0 and got.files == (path,) and got.refused == ()


def test_a_link_in_place_of_the_backlog_is_not_followed(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    target = tmp_path / "precious"
    target.write_text("keep me")
    os.symlink(target, backlog.backlog_path(db))
    got = backlog.load(db)
    assert got.files == () and "symbolic link" in got.refused[0]
    path = backlog.save(db, [tick(1000)])  # replaces the link itself, never writes through
    assert target.read_text() == "keep me" and not path.is_symlink()


def test_unreadable_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    path = backlog.save(db, [tick(1000)])
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"ts_ms": "soon"}\nnot json\n')
    got = backlog.load(db)
    assert [s.ts_ms for s in got.snaps] == [1000] and got.bad == 2
