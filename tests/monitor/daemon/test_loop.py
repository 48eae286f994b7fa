"""The daemon as a real subprocess on a real database file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stopping import STOP_GUARD_S

from collectors.base import Roots
from collectors.proc_events import KEEP_S, ProcEventListener
from monitor import config as config_mod
from monitor.config import Config
from monitor.daemon.lock import acquire_lock, lock_holder
from monitor.daemon.loop import DaemonContext, reload_config, tick
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store, StoreError

SAMPLE_TABLES = ("devices", "device_samples", "processes", "process_samples", "collector_runs")


def start_daemon(db: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ticks_in(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def wait_for_ticks(db: Path, n: int, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if db.exists() and (got := ticks_in(db)) >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"the daemon wrote fewer than {n} ticks in {timeout_s} s")


def test_daemon_samples_then_exits_0_on_sigterm(tmp_path: Path, stop_with_sigterm) -> None:
    db = tmp_path / "v.db"
    proc = start_daemon(db)
    wait_for_ticks(db, 10, timeout_s=60)  # ~2 s at 0.2 s; generous for a busy machine
    err = stop_with_sigterm(proc)
    assert proc.returncode == 0, err
    conn = sqlite3.connect(db)
    for table in SAMPLE_TABLES:
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
    ticks = conn.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0]
    assert ticks >= 10, ticks
    # The start line names the collectors that apply here (those whose first run found
    # their hardware or library), not every enabled one.
    first = conn.execute("SELECT min(ts_ms) FROM collector_runs").fetchone()[0]
    runs = dict(
        conn.execute("SELECT collector, status FROM collector_runs WHERE ts_ms = ?", (first,))
    )
    here = [name for name, st in runs.items() if st != "nodata"]
    absent = [name for name, st in runs.items() if st == "nodata"]
    line = next(x for x in err.splitlines() if "sampling every 0.2 s into" in x)
    listed = line.split("(collectors: ", 1)[1].rstrip(")").split(", ")
    assert sorted(listed) == sorted(here) and "procfs" in listed, (line, runs)
    assert not set(absent) & set(listed), (line, runs)
    kinds = [r[0] for r in conn.execute("SELECT kind FROM events ORDER BY id")]
    assert kinds[0] == "daemon_started" and kinds[-1] == "daemon_stopped"
    runs = dict(conn.execute("SELECT collector, count(*) FROM collector_runs GROUP BY 1"))
    assert runs["procfs"] == ticks and runs["drm"] == ticks  # every run recorded
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert "received SIGTERM" in err


def test_kill_9_keeps_every_committed_tick(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    proc = start_daemon(db)
    try:
        wait_for_ticks(db, 5)
        committed = ticks_in(db)  # a reader's view: these ticks are committed
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert (
        conn.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0] >= committed
    )
    conn.close()
    # And a new daemon takes over the same file (the lock died with the process).
    again = start_daemon(db)
    try:
        wait_for_ticks(db, committed + 2)
        again.send_signal(signal.SIGTERM)
        again.communicate(timeout=STOP_GUARD_S)
    finally:
        again.kill()
    assert again.returncode == 0


def test_second_daemon_on_the_same_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    first = start_daemon(db)
    try:
        wait_for_ticks(db, 1)
        second = start_daemon(db)
        _, err = second.communicate(timeout=20)
        assert second.returncode == 2
        assert err.strip().splitlines() == [
            f"vramscope: error: another vramscope daemon (pid {first.pid}) is already writing {db}"
        ]
        assert lock_holder(db) == first.pid
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=STOP_GUARD_S)
    assert lock_holder(db) is None


def test_lock_is_exclusive_in_process(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    held = acquire_lock(db)
    try:
        with pytest.raises(StoreError, match=f"pid {os.getpid()}"):
            acquire_lock(db)
    finally:
        held.close()
    acquire_lock(db).close()


def test_tick_keeps_samples_in_memory_while_the_database_refuses_writes(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "v.db")
    ctx = DaemonContext(Config(db_path=tmp_path / "v.db"), store, Sampler(Roots()))
    blocker = sqlite3.connect(tmp_path / "v.db", timeout=0)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database
    store.db.conn.execute("PRAGMA busy_timeout = 50")
    tick(ctx)
    time.sleep(0.002)  # distinct millisecond timestamps
    tick(ctx)
    assert len(ctx.pending) == 2
    blocker.rollback()
    blocker.close()
    time.sleep(0.002)
    tick(ctx)
    assert len(ctx.pending) == 0
    assert store.db.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0] == 3
    store.close()


SLOW_DAEMON = """
import sys, time
from pathlib import Path
from collectors.base import Reading
from collectors.registry import REGISTRY, CollectorSpec
import monitor.daemon.sampler
from monitor import config
from monitor.daemon import loop as daemon

marker = Path(sys.argv[2])

class Slow:
    name = "slow"
    def __init__(self, roots, options):
        self.n = 0
    def collect(self, tick):
        self.n += 1
        if self.n == 3:
            marker.write_text(str(tick.now_ms))  # the test sends SIGTERM now
            time.sleep(1.5)
        return Reading()
    def close(self):
        pass

monitor.daemon.sampler.REGISTRY = (*REGISTRY, CollectorSpec("slow", Slow, True, "test"))
sys.exit(daemon.run(config.load(db=Path(sys.argv[1]), interval_s=0.2)))
"""


def test_sigterm_during_a_slow_tick_commits_that_tick(tmp_path: Path) -> None:
    db, marker = tmp_path / "v.db", tmp_path / "in-flight"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_DAEMON, str(db), str(marker)], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=STOP_GUARD_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    in_flight = int(marker.read_text())
    conn = sqlite3.connect(db)
    last = conn.execute("SELECT max(ts_ms) FROM collector_runs WHERE collector='slow'")
    assert last.fetchone()[0] == in_flight  # the tick that was running when SIGTERM came
    assert (
        conn.execute(
            "SELECT count(*) FROM device_samples WHERE ts_ms = ?", (in_flight,)
        ).fetchone()[0]
        >= 1
    )


def test_a_tick_that_cannot_be_written_is_set_aside_after_three_tries(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "v.db")
    ctx = DaemonContext(Config(db_path=tmp_path / "v.db"), store, Sampler(Roots()))
    real_write = store.write
    poisoned: list[int] = []

    def write(snap):  # the first tick is unwritable (e.g. a constraint it violates)
        if not poisoned or snap.ts_ms == poisoned[0]:
            poisoned[:1] = [snap.ts_ms]
            raise sqlite3.IntegrityError("bad row")
        return real_write(snap)

    store.write = write  # type: ignore[method-assign]
    for _ in range(4):
        tick(ctx)
        time.sleep(0.002)  # distinct millisecond timestamps, as ticks >= 50 ms apart have
    assert ctx.dropped == 1 and not ctx.pending
    written = store.db.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0]
    assert written == 3  # every tick behind the bad one got through
    store.close()


def test_load_watch_alerts_at_the_first_tick_of_a_too_big_server(
    tmp_path: Path, stop_with_sigterm
) -> None:
    """A real process that looks like llama-server, with a model (a sparse GGUF) far bigger
    than this machine's RAM: the daemon records oom_predicted in the very tick that first
    sees it (judged by the daemon's own timestamps, not the wall clock: a busy machine may
    be slow to run the tick, never to judge it)."""
    import shutil

    import gguf_models as g

    md, tensors = g.qwen3_8b(n_layer=36)
    huge = [
        (n, (s[0], s[1] * 8) if len(s) == 2 and n.startswith("blk.") else s, t)
        for n, s, t in tensors
    ]  # ~70 GB of weights
    model = g.write_model(tmp_path / "huge.gguf", "qwen3", md, huge, vocab_size=151936)[0]
    db = tmp_path / "v.db"
    daemon = start_daemon(db)
    try:
        wait_for_ticks(db, 2)
        exe = tmp_path / "llama-server"
        shutil.copy(sys.executable, exe)
        server = subprocess.Popen(
            [
                str(exe),
                "-c",
                "import time; time.sleep(30)",
                "-m",
                str(model),
                "-c",
                "4096",
                "-lm",
                "none",
            ]
        )
        appeared = time.time()
        try:
            found = started = None
            while time.time() - appeared < 60 and (found is None or started is None):
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
                found = conn.execute(
                    "SELECT ts_ms, message FROM events WHERE kind='oom_predicted'"
                    " AND instr(message, ?)",
                    (f"[{server.pid}]",),
                ).fetchone()
                # load_started is written on its second tick (issue 32 item 2)
                started = conn.execute(  # this server's: the box may start others
                    "SELECT ts_ms FROM events WHERE kind='load_started' AND instr(message, ?)",
                    (f"[{server.pid}]",),
                ).fetchone()
                conn.close()
                time.sleep(0.05)
        finally:
            server.kill()
            server.wait()
    finally:
        stop_with_sigterm(daemon)
    assert found is not None, "no oom_predicted event"
    assert "will not fit on host" in found[1] and str(server.pid) in found[1]
    conn = sqlite3.connect(db)
    (first_seen,) = conn.execute(
        "SELECT min(first_seen_ms) FROM processes WHERE pid = ?", (server.pid,)
    ).fetchone()
    assert found[0] == first_seen, (found[0], first_seen)  # the first tick that saw it
    assert started is not None and started[0] == first_seen  # stamped with its first tick


def test_a_stop_signal_only_sets_the_event_the_main_thread_waits_on() -> None:
    """The handler must not shut the scheduler down itself: run inside the scheduler's
    ``_process_jobs`` (the main thread's loop in a BlockingScheduler), emptying the job
    store there made ``update_job`` raise JobLookupError (CI, 2026-11-27). Two signals
    send one STOPPING=1. The handlers are installed before the context exists: a SIGHUP
    then (systemd's reload right after a start) is kept for the first tick, not the
    default action that ends the process (CI, 2026-11-27: test_reload_http)."""
    from monitor.daemon import loop

    class Ctx:
        def __init__(self) -> None:
            self.stopping_sent = 0
            self.notify = self
            self.reload_requested = False

        def stopping(self) -> bool:
            self.stopping_sent += 1
            return True

    ctx = Ctx()
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        holder: list = []  # the daemon's context is not made yet
        stop, reload_early = loop._handle_signals(holder)
        signal.raise_signal(signal.SIGHUP)  # while starting: kept for the first tick
        assert reload_early.is_set() and not stop.is_set()
        holder.append(ctx)
        signal.raise_signal(signal.SIGHUP)
        assert ctx.reload_requested
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        assert stop.wait(STOP_GUARD_S)
        assert ctx.stopping_sent == 1
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_reloaded_interval_widens_the_exit_event_window(tmp_path: Path) -> None:
    """The daemon keeps the exit-event window as long as four of its ticks (issue 32)."""
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text("[daemon]\ninterval_s = 1\n")
    cfg = config_mod.load(cfg_path, db=tmp_path / "v.db")
    ctx = DaemonContext(cfg, Store.open(cfg.db_path), Sampler(Roots(), cfg.options))
    ctx.proc_events = ProcEventListener()  # not opened: only its window is read here
    try:
        assert ctx.proc_events.keep_s == KEEP_S
        cfg_path.write_text("[daemon]\ninterval_s = 300\n")
        assert reload_config(ctx)
        assert ctx.proc_events.keep_s == 1200  # four ticks: an exit is asked for a tick late
        cfg_path.write_text("[daemon]\ninterval_s = 0.25\n")
        assert reload_config(ctx)
        assert ctx.proc_events.keep_s == KEEP_S
    finally:
        ctx.sampler.close()
        ctx.store.close()
