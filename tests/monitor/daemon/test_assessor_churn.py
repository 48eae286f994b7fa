"""Cost independent of churn (issue 32 item 3), with real processes: hundreds of short-lived
``llama-server -m tiny.gguf`` processes (our own, their command lines rewritten by
tests/fakes/fake_server.py) cost no estimate and no ``processes`` row beyond a count, a
thousand launches of one command cost one estimate, and a long-lived server beside them is
still assessed and recorded (the noise case).

The real /proc is sampled by the real procfs collector; each snapshot is cut down to this
test's own processes (the box runs other people's servers), and goes through the real
Store (SQLite), Assessor and TUI FrameBuilder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import fake_server
import pytest
import tiny_models

from collectors.base import ProcessInfo, Roots, Snapshot
from monitor.analysis import assess_cache
from monitor.analysis.exits_judged import JUDGE
from monitor.daemon.assessor import Assessor
from monitor.daemon.sampler import Sampler
from monitor.daemon.watch import LoadWatch
from monitor.store.database import Store
from tui.source import FrameBuilder


@contextlib.contextmanager
def many(argvs: Sequence[Sequence[str]], cwd: Path) -> Iterator[list[int]]:
    """Start one fake server per argv at once (fake_server's script), yield their pids;
    they exit when the block ends (stdin closed) and are reaped before it returns."""
    procs = []
    padding = "x" * (max(sum(len(a) + 1 for a in argv) for argv in argvs) + 16)
    try:
        for argv in argvs:
            cfg = json.dumps({"argv": list(argv), "child": None})
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", fake_server._SCRIPT, cfg, padding],
                    cwd=cwd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        pids = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line, f"a fake server did not start (exit {p.wait()})"
            pids.append(json.loads(line)["pid"])
        yield pids
    finally:
        for p in procs:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.close()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


class Box:
    """The real sampler, the real Store and Assessor, on this test's processes only."""

    def __init__(self, tmp_path: Path) -> None:
        self.sampler = Sampler(Roots(), enabled=["procfs"], timeout_s=None)
        self.db = tmp_path / "v.db"
        self.store = Store.open(self.db, exit_judge=JUDGE)
        self.assessor = Assessor(Path("/proc"), threaded=False)
        self.watch = LoadWatch(Path("/proc"))  # judges each new server on its first tick
        self.builder = FrameBuilder()
        self.mine: set[int] = set()
        self.last_ts = 0

    def tick(self) -> Snapshot:
        snap = self.sampler.sample()
        ts = max(snap.ts_ms, self.last_ts + 1)
        self.last_ts = ts
        snap = dataclasses.replace(
            snap,
            ts_ms=ts,
            processes=tuple(p for p in snap.processes if p.pid in self.mine),
            memory=tuple(m for m in snap.memory if m.pid in self.mine),
            exited=tuple(e for e in snap.exited if e.pid in self.mine),
            hidden=(),
            cgroups=tuple(c for c in snap.cgroups if c.pid in self.mine),
        )
        found = self.watch.observe(snap)  # as the daemon's tick does (monitor/daemon/loop.py)
        snap = dataclasses.replace(snap, events=snap.events + tuple(found))
        self.store.write(snap)
        self.assessor.on_tick(snap, self.store)
        self.builder.build(snap)  # the live TUI's frame of the same tick
        return snap

    def close(self) -> None:
        self.sampler.close()
        self.assessor.close()
        self.store.close()

    def query(self, sql: str, *args: object) -> list[tuple]:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()


def test_a_churn_of_short_lived_servers_costs_no_estimate_and_no_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_models.write_llama(tmp_path / "tiny.gguf").path
    calls: list[tuple[str, ...]] = []
    real = assess_cache.assess

    def counted(info, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - the real one
        calls.append(info.argv)
        return real(info, *args, **kwargs)

    monkeypatch.setattr(assess_cache, "assess", counted)
    box = Box(tmp_path)
    long_argv = ["llama-server", "-m", "tiny.gguf", "-c", "512", "--port", "8999"]
    try:
        with many([long_argv], tmp_path) as (long_pid,):
            box.mine.add(long_pid)
            box.tick()  # the long-lived server, on the daemon's first tick
            port = 9000
            for _ in range(20):  # 200 processes, each gone before its second tick
                argvs = [
                    ["llama-server", "-m", "tiny.gguf", "-c", "256", "--port", str(port + i)]
                    for i in range(10)
                ]
                port += 10
                with many(argvs, tmp_path) as pids:
                    box.mine.update(pids)
                    snap = box.tick()
                    assert {p.pid for p in snap.processes} >= set(pids)  # they were seen
                box.tick()  # they are gone (reaped): then their pids are no longer ours
                box.mine.difference_update(pids)
            twice = []
            for _ in range(3):  # 15 that live two ticks: one launch, one estimate
                argvs = [
                    ["llama-server", "-m", "tiny.gguf", "-c", "256", "--port", str(port + i)]
                    for i in range(5)
                ]
                port += 5
                with many(argvs, tmp_path) as pids:
                    box.mine.update(pids)
                    twice += pids
                    box.tick()
                    box.tick()
                box.tick()
                box.mine.difference_update(pids)
            current = box.assessor.current()
            (a,) = [a for (pid, _), a in current.items() if pid == long_pid]
            assert a.estimate is not None and a.launch.ctx_size == 512  # the noise case
            assert a.launch.model_path == str(model)
    finally:
        box.close()

    # the daemon's assessor: one estimate for the long-lived server, one for the 15
    # two-tick launches of one command; none for the 200
    daemon_calls = [argv for argv in calls if "512" in argv]
    assert len(daemon_calls) == 2  # the daemon's and the TUI's, each once
    assert len([argv for argv in calls if "256" in argv]) == 2  # the same, for the 215
    assert box.assessor.deferred >= 200
    # the load watch judges every new server on its first tick: one estimate per launch
    assert box.watch.estimates.estimated == 1 and box.watch.estimates.hits == 214
    # the database: rows for the long-lived and the two-tick ones, a count for the rest
    rows = {pid for (pid,) in box.query("SELECT pid FROM processes")}
    assert rows == {long_pid, *twice}
    (count,) = box.query("SELECT value FROM meta WHERE key = 'short_lived_processes'")
    assert int(count[0]) == 200
    estimates = box.query(
        "SELECT p.pid, count(*) FROM estimates e JOIN processes p ON p.id = e.process_id"
        " GROUP BY p.pid"
    )
    assert dict(estimates) == {pid: 1 for pid in (long_pid, *twice)}
    # the long-lived server's samples are all there, from its first tick
    (n,) = box.query(
        "SELECT count(*) FROM process_samples s JOIN processes p ON p.id = s.process_id"
        " WHERE p.pid = ?",
        long_pid,
    )
    assert n[0] == 1 + 20 * 2 + 3 * 3


def test_a_model_replaced_in_place_is_estimated_again(tmp_path: Path) -> None:
    """The noise case of the cache: same command line, another file behind the name."""
    model = tiny_models.write_llama(tmp_path / "tiny.gguf").path
    cache = assess_cache.AssessCache()
    argv = ("llama-server", "-m", str(model), "-c", "512")

    def proc(pid: int, port: str) -> ProcessInfo:
        return ProcessInfo(
            pid, pid, None, 1, 0, "llama-server", (*argv, "--port", port), "llama.cpp"
        )

    first = cache.assess(proc(10, "1"), [], 1)
    again = cache.assess(proc(11, "2"), [], 2)
    assert cache.estimated == 1 and cache.hits == 1
    assert first is not None and again is not None
    assert (again.pid, again.start_ticks, again.ts_ms) == (11, 11, 2)
    assert again.estimate == first.estimate and again.launch_key != first.launch_key
    st = os.stat(model)
    tiny_models.write_llama(tmp_path / "other.gguf", n_layer=8)
    os.replace(tmp_path / "other.gguf", model)  # a new inode behind the same name
    assert os.stat(model).st_ino != st.st_ino
    third = cache.assess(proc(12, "3"), [], 3)
    assert cache.estimated == 2 and third is not None and third.estimate is not None
    assert first.estimate is not None
    assert third.estimate.total_bytes() != first.estimate.total_bytes()


def test_a_one_tick_process_that_an_alert_names_keeps_its_row(tmp_path: Path) -> None:
    """The noise case of the store's deferral: a process gone after one tick leaves a row
    when a warning or critical event of that tick names it (oom_predicted at its first
    tick), or when it crashed; an info event (load_started) or a clean exit does not."""
    from collectors.base import DeviceEvent, ExitedProcess, ProcessMemory

    def proc(pid: int) -> ProcessInfo:
        return ProcessInfo(pid, pid, 1000, 1, 0, "llama-server", ("llama-server",), "llama.cpp")

    def snap(ts: int, pids: list[int], events=(), exited=()) -> Snapshot:  # noqa: ANN001
        memory = tuple(ProcessMemory(p, "host", rss_anon_bytes=1) for p in pids)
        return Snapshot(ts, (), tuple(proc(p) for p in pids), memory, (), exited, (), events)

    def event(pid: int, severity: str) -> DeviceEvent:
        return DeviceEvent(1, "host", "x", severity, "m", {"pid": pid})  # type: ignore[arg-type]

    store = Store.open(tmp_path / "v.db", exit_judge=JUDGE)
    store.write(snap(1000, []))
    store.write(snap(2000, [11, 12, 13, 14], events=(event(11, "critical"), event(12, "info"))))
    crash = ExitedProcess(14, 14, 2000, exit_signal=11, cause="crashed")
    store.write(snap(3000, [], exited=(crash,)))
    store.close()
    conn = sqlite3.connect(tmp_path / "v.db")
    rows = dict(conn.execute("SELECT pid, first_seen_ms FROM processes").fetchall())
    assert rows == {11: 2000, 14: 2000}  # the alerted one and the crash; not 12, 13
    samples = conn.execute("SELECT count(*) FROM process_samples").fetchone()[0]
    assert samples == 2  # their first tick's samples were kept
    (count,) = conn.execute("SELECT value FROM meta WHERE key = 'short_lived_processes'")
    assert count == ("2",)
    conn.close()


def test_servers_sharing_a_cgroup_read_its_limit_once_a_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three of our servers in this test's own cgroup (and whatever servers the box runs):
    each tick reads the limit of each distinct cgroup once, and every server still gets it."""
    from collectors import cgroup

    if cgroup.memory_hierarchy(Roots()) is None:
        pytest.skip("no memory cgroup controller here")
    tiny_models.write_llama(tmp_path / "tiny.gguf")
    reads: list[str] = []
    real = cgroup.read_limit

    def counted(h, path):  # noqa: ANN001, ANN202 - the real one, counted
        reads.append(path)
        return real(h, path)

    monkeypatch.setattr(cgroup, "read_limit", counted)
    sampler = Sampler(Roots(), enabled=["procfs"], timeout_s=None)
    argvs = [["llama-server", "-m", "tiny.gguf", "--port", str(7000 + i)] for i in range(3)]
    try:
        with many(argvs, tmp_path) as pids:
            for _ in range(2):
                reads.clear()
                snap = sampler.sample()
                servers = [p.pid for p in snap.processes if p.engine is not None]
                assert set(pids) <= set(servers)
                assert len(reads) == len(set(reads))  # each cgroup once
                limited = {c.pid for c in snap.cgroups}
                mine = {c.cgroup for c in snap.cgroups if c.pid in pids}
                # ours share one cgroup: all limited alike, or none (no limit above us)
                assert len(mine) <= 1 and (set(pids) <= limited or not limited & set(pids))
    finally:
        sampler.close()


def test_one_tick_servers_write_no_load_started_and_a_long_lived_one_does(
    tmp_path: Path,
) -> None:
    """Issue 32 item 2: the load watch's ``load_started`` waits for a server's second tick.
    200 real servers gone before it write none (counted instead); a long-lived one started
    beside them writes one, stamped with the tick that first saw it (the post-mortem reads
    that time as the load's start)."""
    tiny_models.write_llama(tmp_path / "tiny.gguf")
    box = Box(tmp_path)
    try:
        box.tick()  # the watch's first tick: what runs then is not new
        long_argv = ["llama-server", "-m", "tiny.gguf", "-c", "512", "--port", "8999"]
        with many([long_argv], tmp_path) as (long_pid,):
            box.mine.add(long_pid)
            first_seen = box.tick().ts_ms
            box.tick()
            port = 9000
            for _ in range(20):
                argvs = [
                    ["llama-server", "-m", "tiny.gguf", "-c", "256", "--port", str(port + i)]
                    for i in range(10)
                ]
                port += 10
                with many(argvs, tmp_path) as pids:
                    box.mine.update(pids)
                    assert {p.pid for p in box.tick().processes} >= set(pids)
                box.tick()
                box.mine.difference_update(pids)
    finally:
        box.close()
    started = box.query("SELECT ts_ms, data FROM events WHERE kind = 'load_started'")
    assert [(ts, json.loads(data)["pid"]) for ts, data in started] == [(first_seen, long_pid)]
    assert box.watch.dropped_one_tick == 200
    assert box.watch.estimates.hits + box.watch.estimates.estimated == 201  # all judged
