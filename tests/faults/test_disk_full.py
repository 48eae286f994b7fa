"""Disk full: ticks wait in memory, the refusal is logged once and stored as an event, and
writing resumes (oldest first, nothing committed lost) when space returns."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.base import Roots
from monitor.config import Config
from monitor.daemon.loop import DaemonContext, tick
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store


class TinyDisk:
    """A 2 MiB tmpfs (root) that can be filled up and emptied again; else None."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with contextlib.suppress(OSError):  # ENOSPC: full now
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[TinyDisk | None]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        yield None
        return
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        yield None
        return
    try:
        yield TinyDisk(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def ticks(db: Path) -> set[int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return {r[0] for r in conn.execute("SELECT DISTINCT ts_ms FROM collector_runs")}
    finally:
        conn.close()


def _tick(ctx: DaemonContext) -> None:
    tick(ctx)
    time.sleep(0.003)  # distinct millisecond timestamps


def test_disk_full_keeps_ticks_in_memory_then_writes_them(
    tiny_disk: TinyDisk | None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = (tiny_disk.root if tiny_disk else tmp_path) / "v.db"
    store = Store.open(db)
    ctx = DaemonContext(Config(db_path=db), store, Sampler(Roots(), enabled=["procfs"]))
    try:
        for _ in range(5):
            _tick(ctx)
        committed = ticks(db)
        assert len(committed) == 5 and not ctx.pending

        if tiny_disk is not None:
            tiny_disk.fill()
        else:  # no tmpfs here: SQLite's page limit stands in for a full disk
            pages = store.db.execute("PRAGMA page_count").fetchone()[0]
            store.db.execute(f"PRAGMA max_page_count = {pages}")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="monitor.daemon.loop"):
            for _ in range(40):  # the first few may still fit in pages already allocated
                _tick(ctx)
        assert ctx.db_error is not None and "full" in ctx.db_error, ctx.db_error
        assert len(ctx.pending) >= 10  # sampling went on, in memory
        refusals = [r for r in caplog.records if "cannot write to" in r.getMessage()]
        assert len(refusals) == 1  # said once, not every tick
        assert ticks(db) >= committed  # nothing committed was lost
        check = sqlite3.connect(db)
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        check.close()

        if tiny_disk is not None:
            tiny_disk.free()
        else:
            store.db.execute("PRAGMA max_page_count = 1073741823")
        queued = {s.ts_ms for s in ctx.pending}
        with caplog.at_level(logging.INFO, logger="monitor.daemon.loop"):
            _tick(ctx)
        assert not ctx.pending and ctx.db_error is None
        assert any("accepts writes again" in r.getMessage() for r in caplog.records)
        stored = ticks(db)
        assert committed | queued <= stored and len(stored) == 5 + 40 + 1
        events = dict(
            store.db.execute(
                "SELECT kind, severity FROM events WHERE subject = 'database'"
            ).fetchall()
        )
        assert events == {"database_unwritable": "critical", "database_writable": "info"}
    finally:
        ctx.sampler.close()
        store.close()
