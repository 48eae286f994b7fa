"""monitor/logs/reader.py LogReader under the daemon's tick: with no log followed (the
default config) a tick wakes no reader thread (issue 32 item 3: two thread hand-offs a
tick for a round that could find nothing); with a log followed every tick still reads it.
Real ticks of a real DaemonContext over an injected /proc tree, a real file tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import Roots
from monitor.config import Config
from monitor.daemon.loop import DaemonContext, tick
from monitor.daemon.sampler import Sampler
from monitor.logs.follow import FileTail
from monitor.logs.reader import LogReader
from monitor.store.database import Store

OOM = (
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 10956.01 MiB on device 0: "
    "cudaMalloc failed: out of memory"
)


def quiet_context(tmp: Path) -> DaemonContext:
    """A daemon context over a /proc tree holding only meminfo: no process of the box."""
    proc, sys_root = tmp / "proc", tmp / "sys"
    proc.mkdir()
    sys_root.mkdir()
    (proc / "meminfo").write_bytes(Path("/proc/meminfo").read_bytes())
    roots = Roots(proc=proc, sys=sys_root)
    store = Store.open(tmp / "v.db")
    return DaemonContext(
        Config(db_path=tmp / "v.db", roots=roots), store, Sampler(roots, enabled=["procfs"])
    )


def counted(reader: LogReader, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rounds the reader's thread runs, counted as they start."""
    rounds: list[int] = []
    real = reader.round

    def round_counted() -> None:
        rounds.append(1)
        real()

    monkeypatch.setattr(reader, "round", round_counted)
    return rounds


def test_no_log_followed_no_round_a_tick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Noise case: 10 ticks with no tail run no round (before: 10, one a tick)."""
    ctx = quiet_context(tmp_path)
    ctx.log_reader = LogReader([])
    rounds = counted(ctx.log_reader, monkeypatch)
    ctx.log_reader.start()
    try:
        assert ctx.log_reader.idle()
        for _ in range(10):
            tick(ctx)
    finally:
        ctx.log_reader.close()
        ctx.store.close()
    assert rounds == []


def test_a_followed_log_is_read_every_tick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Signal case: with a tail, each tick runs a round, and a line written between two
    ticks is an event of the second."""
    log = tmp_path / "server.log"
    log.write_text("")
    ctx = quiet_context(tmp_path)
    ctx.log_reader = LogReader([FileTail(log)])
    rounds = counted(ctx.log_reader, monkeypatch)
    ctx.log_reader.start()
    try:
        assert not ctx.log_reader.idle()
        tick(ctx)
        with log.open("a") as f:
            f.write(f"{OOM}\n")
        snap = tick(ctx)
    finally:
        ctx.log_reader.close()
        ctx.store.close()
    assert len(rounds) == 2
    assert [e.kind for e in snap.events if e.kind == "engine_oom"] == ["engine_oom"]


def test_a_tail_added_by_a_reload_is_read_at_the_next_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader idles with no tail; a reload that gives it one (``replace``) is read."""
    log = tmp_path / "server.log"
    log.write_text("")
    ctx = quiet_context(tmp_path)
    ctx.log_reader = LogReader([])
    rounds = counted(ctx.log_reader, monkeypatch)
    ctx.log_reader.start()
    try:
        tick(ctx)
        ctx.log_reader.replace([FileTail(log)])
        with log.open("a") as f:
            f.write(f"{OOM}\n")
        tick(ctx)  # the tail opens at the file's end: this round starts following it
        with log.open("a") as f:
            f.write(f"{OOM}\n")
        snap = tick(ctx)
    finally:
        ctx.log_reader.close()
        ctx.store.close()
    assert len(rounds) == 2
    assert "engine_oom" in [e.kind for e in snap.events]
