"""monitor/daemon/loop.py hands the process-event connector's execs to the procfs
collector (issue 32 item 3, churn): only for the real /proc with a listener running,
else None (every young process re-read, as before); a real exec under the daemon's
tick is seen at the next tick. Real processes, real SQLite, the real connector
(skipped where it is refused)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors import procfs as procfs_mod
from collectors.base import Roots
from collectors.proc_events import ProcEventListener
from collectors.procfs import ProcfsCollector
from monitor.config import Config
from monitor.daemon.loop import DaemonContext, _execs, tick
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[DaemonContext]:
    cfg = Config(db_path=tmp_path / "v.db")
    context = DaemonContext(cfg, Store.open(cfg.db_path), Sampler(Roots(), cfg.options, ["procfs"]))
    try:
        yield context
    finally:
        if context.proc_events is not None:
            context.proc_events.close()
        context.sampler.close()
        context.store.close()


def listen(ctx: DaemonContext) -> ProcEventListener:
    listener = ProcEventListener()
    if not listener.open() or not listener.verify():
        listener.close()
        pytest.skip(f"no process-event connector here: {listener.error}")
    ctx.proc_events = listener
    return listener


def test_no_listener_or_another_proc_tree_knows_no_execs(
    ctx: DaemonContext, tmp_path: Path
) -> None:
    assert _execs(ctx) is None
    listen(ctx)
    assert _execs(ctx) is not None  # the real /proc and a running listener
    ctx.config = Config(db_path=ctx.config.db_path, roots=Roots(proc=tmp_path))
    assert _execs(ctx) is None  # an injected tree: the kernel's pids are not its pids


def test_a_real_exec_is_seen_at_the_next_daemon_tick(
    ctx: DaemonContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen through the connector: with no age window at all, the old re-read of young
    processes would miss it."""
    monkeypatch.setattr(procfs_mod, "EXEC_CHECK_WINDOW_S", 0.0)
    listener = listen(ctx)
    sh, sleep = shutil.which("sh"), shutil.which("sleep")
    assert sh is not None and sleep is not None
    proc = subprocess.Popen(
        [sh, "-c", f"read x; exec {sleep} 3210.5"], stdin=subprocess.PIPE, text=True
    )
    try:
        (procfs,) = [c for c in ctx.sampler.collectors if isinstance(c, ProcfsCollector)]
        tick(ctx)
        assert procfs._known[proc.pid].comm == "sh"
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30  # hang guard: until the listener has read it
        while time.monotonic() < deadline:
            with listener._lock:
                kept = listener._events.get(proc.pid, (0.0, ()))[1]
            if any(e.kind == "exec" for e in kept):
                break
            time.sleep(0.05)
        tick(ctx)
        assert procfs._known[proc.pid].comm == "sleep"
    finally:
        proc.kill()
        proc.wait()
