"""Metrics that carry the story (issue 21 point 3): device temperature, power and
utilisation; cgroup limit and usage; per-process estimate and growth ceiling; exits by
class and log records as counters; and labels that stay bounded while hundreds of
processes come and go.

Real parts: the daemon's HTTP server on a real loopback socket (in process, fed the
snapshots a sampling thread would hand it), a real ``vramscope daemon`` subprocess with
real processes (tests/fakes/fake_server.py) and a real engine log file, a real tiny GGUF.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import daemon_harness
import fake_server
import pytest
import tiny_models
from prometheus_client.parser import text_string_to_metric_families

from collectors.base import (
    CgroupMemory,
    CollectorRun,
    DeviceSample,
    ExitedProcess,
    ProcessCgroup,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
)
from monitor.analysis.assess import assess
from monitor.config import Config
from monitor.daemon.counters import EXIT_CAUSES, LOG_KINDS, MODEL_SLOTS, EventCounts
from monitor.http import HttpServer
from monitor.http.metrics import MAX_PID_SERIES, SnapshotCollector

GIB, MIB = 1024**3, 1024**2
GPU = "nvml:GPU-0123"
Series = dict[str, dict[tuple[tuple[str, str], ...], float]]
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def parse(body: str) -> Series:
    out: Series = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def scrape(srv: HttpServer) -> Series:
    with OPENER.open(f"http://127.0.0.1:{srv.address[1]}/metrics", timeout=30) as resp:
        return parse(resp.read().decode())


def L(**kw: str) -> tuple[tuple[str, str], ...]:  # noqa: N802 - reads like the label set
    return tuple(sorted(kw.items()))


def server_info(
    pid: int, start_ticks: int = 777, argv: tuple[str, ...] | None = None
) -> ProcessInfo:
    return ProcessInfo(
        pid,
        start_ticks,
        None,
        1,
        1000,
        "llama-server",
        argv or ("llama-server", "-m", f"/models/m{pid}.gguf"),
        "llama.cpp",
        ("inference",),
    )


def gpu(  # noqa: ANN201
    temp: float | None = 61.0,
    power: float | None = 287.5,
    util: float | None = 93.0,
    mem_clock: float | None = 10501.0,
):
    return DeviceSample(
        GPU,
        "nvml",
        "nvidia",
        "RTX 4090",
        "dedicated",
        24 * GIB,
        10 * GIB,
        free_bytes=14 * GIB,
        util_pct=util,
        temp_c=temp,
        power_w=power,
        mem_clock_mhz=mem_clock,
    )


HOST = DeviceSample(
    "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 20 * GIB, available_bytes=44 * GIB
)


class Box:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.assessments: dict = {}
        self.counts = EventCounts()


@pytest.fixture
def box() -> Box:
    return Box(Snapshot(int(time.time() * 1000), (gpu(), HOST), (), (), (), (), ()))


@pytest.fixture
def server(box: Box, tmp_path: Path) -> Iterator[HttpServer]:
    db = tmp_path / "v.db"
    srv = HttpServer(
        "127.0.0.1:0",
        None,
        lambda: box.snap,
        db,
        Config(db_path=db, interval_s=1.0),
        assessments=lambda: box.assessments,
        counts=box.counts.totals,
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_device_temperature_power_and_utilisation(server: HttpServer, box: Box) -> None:
    m = scrape(server)
    labels = L(
        device=GPU,
        name="RTX 4090",
        device_type="dedicated",
        gpu="0",
        UUID="GPU-0123",
        modelName="RTX 4090",
    )
    assert m["vramscope_device_temperature_celsius"] == {labels: 61.0}
    assert m["vramscope_device_power_watts"] == {labels: 287.5}
    assert m["vramscope_device_utilization_ratio"] == {labels: pytest.approx(0.93)}
    assert m["vramscope_device_memory_clock_hertz"] == {labels: 10501e6}  # MHz -> Hz
    # a device that does not report them (the host pool, an old driver): no series, never 0
    box.snap = Snapshot(box.snap.ts_ms, (gpu(None, None, None, None), HOST), (), (), (), (), ())
    m = scrape(server)
    for name in ("temperature_celsius", "power_watts", "utilization_ratio", "memory_clock_hertz"):
        assert f"vramscope_device_{name}" not in m


def test_cgroup_limit_and_usage_one_series_per_cgroup(server: HttpServer, box: Box) -> None:
    limited = CgroupMemory("/system.slice/llama.service", 8 * GIB, 6 * GIB, 3 * GIB)
    unlimited = CgroupMemory("/user.slice", None, None, 5 * GIB)
    procs = (server_info(10), server_info(11), server_info(12))
    box.snap = Snapshot(
        box.snap.ts_ms,
        (gpu(), HOST),
        procs,
        (),
        (),
        (),
        (),
        cgroups=(
            ProcessCgroup(10, limited),
            ProcessCgroup(11, limited),
            ProcessCgroup(12, unlimited),
            ProcessCgroup(99, limited),  # not a process of this tick: never a series
        ),
    )
    m = scrape(server)
    svc, user = "/system.slice/llama.service", "/user.slice"
    assert m["vramscope_cgroup_memory_max_bytes"] == {L(cgroup=svc): 8 * GIB}
    assert m["vramscope_cgroup_memory_high_bytes"] == {L(cgroup=svc): 6 * GIB}
    assert m["vramscope_cgroup_memory_current_bytes"] == {
        L(cgroup=svc): 3 * GIB,
        L(cgroup=user): 5 * GIB,
    }
    assert m["vramscope_process_cgroup_info"] == {
        L(pid="10", cgroup=svc): 1,
        L(pid="11", cgroup=svc): 1,
        L(pid="12", cgroup=user): 1,
    }


def test_estimate_and_growth_ceiling_per_process(
    server: HttpServer, box: Box, tmp_path: Path
) -> None:
    model = tiny_models.write_llama(tmp_path / "x.gguf").path
    info = server_info(os.getpid(), argv=("llama-server", "-m", str(model), "-c", "512"))
    a = assess(info, [], box.snap.ts_ms)
    assert a is not None and a.estimate is not None
    box.snap = Snapshot(box.snap.ts_ms, (gpu(), HOST), (info,), (), (), (), ())
    box.assessments = {(info.pid, info.start_ticks): a}
    m = scrape(server)
    key = L(pid=str(info.pid), model="x.gguf", device="host")
    load = m["vramscope_process_estimate_bytes"][key]
    ceiling = m["vramscope_process_estimate_ceiling_bytes"][key]
    assert load == a.estimate.by_device()["host"] > 0
    # llama-server's prompt cache (--cache-ram, 8192 MiB by default) fills at run time
    assert ceiling - load == 8192 * MIB
    box.assessments = {}  # not assessed: both unknown, never 0
    m = scrape(server)
    assert m.get("vramscope_process_estimate_bytes", {}) == {}
    assert m.get("vramscope_process_estimate_ceiling_bytes", {}) == {}


def test_exit_and_log_counters_have_every_label_from_the_start(
    server: HttpServer, box: Box
) -> None:
    m = scrape(server)
    assert m["vramscope_process_exits_total"] == {
        L(cause=c, model=model): 0 for c in EXIT_CAUSES for model in ("", "other")
    }
    assert m["vramscope_log_events_total"] == {L(kind=k): 0 for k in LOG_KINDS}
    gone = [
        ExitedProcess(1, 1, 0, cause="crashed"),
        ExitedProcess(2, 2, 0, cause="oom_killed"),
        ExitedProcess(3, 3, 0, cause="crashed"),
        ExitedProcess(4, 4, 0, cause=None),  # unclassified: unknown
        ExitedProcess(5, 5, 0, cause="x" * 300),  # never a new label value
    ]
    box.counts.observe(gone, [])  # never seen alive: no model known
    m = scrape(server)
    exits = m["vramscope_process_exits_total"]
    assert len(exits) == 2 * len(EXIT_CAUSES)
    assert exits[L(cause="crashed", model="")] == 2
    assert exits[L(cause="oom_killed", model="")] == 1
    assert exits[L(cause="unknown", model="")] == 2


def _labels_of(body: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(name, key) for name, rows in parse(body).items() for key in rows}


def test_series_stay_bounded_while_500_processes_come_and_go(server: HttpServer, box: Box) -> None:
    """Waves of 20 servers, 500 in all, each with its memory, cgroup, estimate and exit:
    every scrape holds the series of the live wave only (and the fixed families); the
    exit counters keep one series per class."""
    wave, total = 20, 500
    per_scrape: list[int] = []
    pids_seen: set[str] = set()
    cgroup = CgroupMemory("/system.slice/llama.service", 8 * GIB, None, 3 * GIB)
    previous: tuple[ProcessInfo, ...] = ()
    for first in range(100_000, 100_000 + total, wave):
        procs = tuple(server_info(pid, start_ticks=pid) for pid in range(first, first + wave))
        memory = tuple(
            row
            for p in procs
            for row in (
                ProcessMemory(p.pid, GPU, vram_bytes=GIB),
                ProcessMemory(p.pid, "host", rss_anon_bytes=MIB, rss_file_bytes=MIB),
            )
        )
        exited = tuple(ExitedProcess(p.pid, p.start_ticks, 0, cause="stopped") for p in previous)
        box.counts.observe(exited, [], procs, first)  # a clock of one ms a wave
        box.snap = Snapshot(
            int(time.time() * 1000),
            (gpu(), HOST),
            procs,
            memory,
            (),
            exited,
            (CollectorRun("procfs", 0, 0.01, 0.01, "ok"),),
            cgroups=tuple(ProcessCgroup(p.pid, cgroup) for p in procs),
        )
        box.assessments = {}
        previous = procs
        with OPENER.open(f"http://127.0.0.1:{server.address[1]}/metrics", timeout=30) as r:
            body = r.read().decode()
        series = _labels_of(body)
        per_scrape.append(len(series))
        pids_seen |= {dict(k).get("pid", "") for _, k in series} - {""}
    assert len(pids_seen) == total  # every process was exported while it lived
    # each scrape: the same count, the live wave's series and no more
    assert len(set(per_scrape)) == 1, per_scrape
    bound = per_scrape[0]
    print(f"series per scrape: {bound} (wave of {wave}, {total} processes in all)")
    per_process = 4 + 1 + 1  # memory kinds, measured, cgroup link
    models = len(EXIT_CAUSES) * (MODEL_SLOTS + 1)  # exit series of 17 more models at most
    assert bound <= wave * per_process + 60 + models, bound
    m = scrape(server)
    exits = m["vramscope_process_exits_total"]
    stopped = {k: v for k, v in exits.items() if dict(k)["cause"] == "stopped"}
    assert sum(stopped.values()) == total - wave
    # 500 models: the first 16 keep their series, the rest count as "other"
    assert len(exits) == len(EXIT_CAUSES) * (MODEL_SLOTS + 2)
    assert stopped[L(cause="stopped", model="other")] == total - wave - MODEL_SLOTS
    assert stopped[L(cause="stopped", model="m100000.gguf")] == 1
    collectors = server.registry._collector_to_names  # noqa: SLF001
    (snapshot_collector,) = [c for c in collectors if isinstance(c, SnapshotCollector)]
    kept = [v for v in vars(snapshot_collector).values() if isinstance(v, dict | set | list)]
    assert kept == []  # nothing per process kept between scrapes


# -- a real daemon -------------------------------------------------------------------------

OOM_LINE = (
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 10956.01 MiB on device 0: "
    "cudaMalloc failed: out of memory"
)


def _exit_cause(db: Path, pid: int) -> str | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute(
            "SELECT exit_cause FROM processes WHERE pid = ? AND exited_ms IS NOT NULL", (pid,)
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


def _by_cause(
    exits: dict[tuple[tuple[str, str], ...], float],
) -> dict[tuple[tuple[str, str], ...], float]:
    out = {L(cause=c): 0.0 for c in EXIT_CAUSES}
    for key, n in exits.items():
        out[L(cause=dict(key)["cause"])] += n
    return out


def _covers(counted: dict, db: Path) -> bool:
    return all(counted.get(cause, 0.0) >= n for cause, n in _db_exit_counts(db).items())


def _db_exit_counts(db: Path) -> dict[tuple[tuple[str, str], ...], float]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = dict(
            conn.execute(
                "SELECT exit_cause, count(*) FROM processes WHERE exited_ms IS NOT NULL"
                " GROUP BY exit_cause"
            ).fetchall()
        )
    finally:
        conn.close()
    return {L(cause=c): float(rows.get(c, 0)) for c in EXIT_CAUSES}


def test_a_real_daemon_counts_a_crash_and_an_engine_oom_line(tmp_path: Path) -> None:
    log = tmp_path / "llama-server.log"
    log.write_text("starting\n")
    argv = ["llama-server", "-m", "crash-me.gguf", "-c", "512"]
    with (
        fake_server.running(argv, cwd=tmp_path) as fake,
        daemon_harness.running(  # pid series at once, not after 30 s ([http])
            tmp_path, f'pid_series_after_s = 0\n[logs]\nfiles = ["{log}"]\n'
        ) as d,
    ):

        def counters() -> Series:
            return parse(d.metrics())

        first = counters()["vramscope_process_exits_total"]
        assert set(first) >= {L(cause=c, model=m) for c in EXIT_CAUSES for m in ("", "other")}
        d.poll(
            "the server tracked",
            lambda: any(
                dict(k).get("pid") == str(fake.pid)
                for k in counters().get("vramscope_process_memory_bytes", {})
            ),
        )
        os.kill(fake.pid, signal.SIGSEGV)  # not reaped here until the block ends
        d.poll("the crash recorded", lambda: _exit_cause(d.db, fake.pid) == "crashed")
        # every exit the database recorded (ours, and any tracked process of this busy box
        # that ended meanwhile) is counted under its class; the counter also counts a
        # process seen on one tick only, which the database keeps as a number
        # (meta.short_lived_processes), so on a busy box it may be the larger
        d.poll(
            "the counters to cover the database",
            lambda: _covers(_by_cause(counters()["vramscope_process_exits_total"]), d.db),
        )
        exits = counters()["vramscope_process_exits_total"]
        assert exits[L(cause="crashed", model="crash-me.gguf")] == 1  # the crash names its model
        with log.open("a") as f:
            f.write(OOM_LINE + "\n")
        events = d.poll(
            "the engine OOM line counted",
            lambda: (e := counters()["vramscope_log_events_total"])[L(kind="engine_oom")] and e,
        )
        assert events[L(kind="engine_oom")] == 1
    try:
        fake.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        fake.process.kill()


def _exits_at_least(d: daemon_harness.LiveDaemon, n: float) -> Series | None:
    m = parse(d.metrics())
    return m if sum(m["vramscope_process_exits_total"].values()) >= n else None


def _pids(m: Series) -> set[str]:
    return {dict(k)["pid"] for rows in m.values() for k in rows if "pid" in dict(k)}


def _with(d: daemon_harness.LiveDaemon, pids: set[str]) -> Series | None:
    m = parse(d.metrics())
    return m if pids <= _pids(m) else None


def _without(d: daemon_harness.LiveDaemon, pids: set[str]) -> Series | None:
    m = parse(d.metrics())
    return None if _pids(m) & pids else m


def _seen(d: daemon_harness.LiveDaemon, pids: set[str]) -> bool:
    """The daemon's latest tick holds every one of ``pids`` (its snapshot API)."""
    doc = json.loads(daemon_harness.get(f"{d.url}/api/v1/snapshot"))
    return pids <= {str(p["pid"]) for p in doc["processes"]}


@pytest.mark.slow
def test_a_real_daemon_keeps_series_bounded_while_500_real_servers_come_and_go(
    tmp_path: Path,
) -> None:
    """500 real processes named llama-server (``comm`` and argv from their exec: a
    symlink to Python), 20 at a time. The first wave lives past ``PID_LABEL_MIN_AGE_S``:
    its pids get series, never more than ``MAX_PID_SERIES``. The other 24 waves are
    tracked by the daemon (its snapshot lists them) but end within seconds: they make no
    pid series at all (issue 34: pid labels churned 4,281 series in 45 minutes), and the
    exit counters still count every one in one series per class."""
    import sys

    wave, total = 20, 500
    (tmp_path / "bin").mkdir()
    exe = tmp_path / "bin" / "llama-server"
    exe.symlink_to(sys.executable)
    seen: set[str] = set()
    largest = 0
    with daemon_harness.running(tmp_path) as d:
        before = sum(parse(d.metrics())["vramscope_process_exits_total"].values())
        for w in range(total // wave):
            procs = [
                subprocess.Popen(
                    [str(exe), "-c", "import sys; sys.stdin.read()", "-m", f"w{w}-{i}.gguf"],
                    stdin=subprocess.PIPE,
                )
                for i in range(wave)
            ]
            try:
                pids = {str(p.pid) for p in procs}
                if w == 0:  # a wave that lives: its series come once it is old enough
                    m = d.poll("wave 0 on /metrics", lambda pids=pids: _with(d, pids), 120)
                else:
                    d.poll(f"wave {w} tracked", lambda pids=pids: _seen(d, pids))
                    m = parse(d.metrics())
                    assert not _pids(m) & pids, w  # too young for series of their own
                    assert m["vramscope_unlabelled_processes"][()] >= wave
                seen |= pids
                assert len(_pids(m)) <= MAX_PID_SERIES
                largest = max(largest, sum(len(rows) for rows in m.values()))
            finally:
                for p in procs:
                    assert p.stdin is not None
                    p.stdin.close()
                for p in procs:
                    try:
                        p.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
        m = d.poll("the first wave gone", lambda: _without(d, seen))
        # the last wave's exits reach the counters on the ticks after it ended
        m = d.poll("every exit counted", lambda: _exits_at_least(d, before + total))
        exits = m["vramscope_process_exits_total"]
        assert len(exits) <= len(EXIT_CAUSES) * (MODEL_SLOTS + 2)
        assert sum(exits.values()) - before >= total
    assert len(seen) == total
    print(f"largest scrape: {largest} series; {total} servers seen")
    assert largest <= 60 + 8 * 64 + (MODEL_SLOTS + 4) * len(EXIT_CAUSES)  # 64: max_tracked
