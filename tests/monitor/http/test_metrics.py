"""/metrics conventions (issue 34) and the daemon's self-metrics (issue 32 item 5).

prometheus-client's own encoders answer each scrape (text 0.0.4, OpenMetrics on
``Accept``, gzip on ``Accept-Encoding``) and both pass ``promtool check metrics``; a count
that only grows is a counter; ``device_type`` (a device's memory kind) and
``memory_kind`` (what a process holds) are two labels, never one ``kind``; dcgm-exporter's
``gpu`` / ``UUID`` / ``modelName`` sit beside ``device``; ``pid`` series are bounded (only
servers and GPU holders, past a minimum age, at most ``MAX_PID_SERIES``); a real daemon
exports its own ``process_*`` and ``vramscope_build_info``.
"""

from __future__ import annotations

import gzip
import http.client
import importlib.metadata
import os
import time
from collections.abc import Iterator
from pathlib import Path

import daemon_harness
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from collectors.base import (
    CgroupMemory,
    CollectorRun,
    DeviceSample,
    ProcessCgroup,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
)
from monitor.config import Config
from monitor.http import HttpServer
from monitor.http.metrics import (
    GZIP_MIN_BYTES,
    MAX_PID_SERIES,
    PID_LABEL_MIN_AGE_S,
    build_registry,
    encode,
)
from monitor.store.database import WriterHealth

GIB, MIB = 1024**3, 1024**2
NVML0, NVML1 = "nvml:GPU-aaaa-0000", "nvml:GPU-bbbb-1111"
APU = "drm:0000:c3:00.0"
LAST = 1000 + MAX_PID_SERIES + 16  # one past the last filler server's pid
OPENMETRICS = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4"
needs_promtool = pytest.mark.skipif(
    daemon_harness.promtool() is None, reason=daemon_harness.PROMTOOL_MISSING
)


def server(pid: int, *, age_s: float, now_ms: int, reasons: tuple[str, ...]) -> ProcessInfo:
    return ProcessInfo(
        pid,
        1000 + pid,
        now_ms - int(age_s * 1000),
        1,
        1000,
        "llama-server" if "inference" in reasons else "cc1plus",
        ("/usr/bin/llama-server", "-m", f"/models/m{pid}.gguf")
        if "inference" in reasons
        else ("cc1plus",),
        "llama.cpp" if "inference" in reasons else None,
        reasons,
    )


def box_snapshot(now_ms: int) -> Snapshot:
    """Two NVIDIA GPUs, an APU and the host; one old server, one that started a second
    ago, 100 compilers of the top-N host list, and old servers 16 past the cap."""
    devices = (
        DeviceSample(NVML0, "nvml", "nvidia", "NVIDIA RTX 4090", "dedicated", 24 * GIB, GIB),
        DeviceSample(NVML1, "nvml", "nvidia", "NVIDIA RTX 4060", "dedicated", 8 * GIB, GIB),
        DeviceSample(APU, "drm", "amd", "Radeon 8060S", "unified", 96 * GIB, GIB),
        DeviceSample("host", "procfs", "host", "Host RAM", "host", 128 * GIB, 40 * GIB),
    )
    procs = [server(10, age_s=3600, now_ms=now_ms, reasons=("inference", "gpu"))]
    memory = [ProcessMemory(10, NVML0, vram_bytes=20 * GIB)]
    procs.append(server(11, age_s=1, now_ms=now_ms, reasons=("inference",)))
    memory.append(ProcessMemory(11, "host", rss_anon_bytes=3 * MIB))
    for pid in range(100, 200):  # the top-N host list: any busy process
        procs.append(server(pid, age_s=600, now_ms=now_ms, reasons=("top",)))
        memory.append(ProcessMemory(pid, "host", rss_anon_bytes=MIB, rss_file_bytes=MIB))
    for pid in range(1000, LAST):  # old servers, smaller than pid 10
        procs.append(server(pid, age_s=600, now_ms=now_ms, reasons=("inference",)))
        memory.append(ProcessMemory(pid, "host", rss_anon_bytes=(pid - 999) * MIB))
    runs = (CollectorRun("procfs", now_ms, 0.01, 0.01, "ok"),)
    young = CgroupMemory("/young.slice", 8 * GIB, None, 7 * GIB)  # binds pid 11 alone
    cgroups = (ProcessCgroup(11, young),)
    return Snapshot(now_ms, devices, tuple(procs), tuple(memory), (), (), runs, cgroups=cgroups)


class Box:
    def __init__(self) -> None:
        self.snap = box_snapshot(int(time.time() * 1000))
        self.health = WriterHealth(True, None, None, backlog_ticks=0, dropped_ticks=7)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[HttpServer, Box]]:
    box = Box()
    srv = HttpServer(
        "127.0.0.1:0",
        None,
        lambda: box.snap,
        tmp_path / "v.db",
        Config(db_path=tmp_path / "v.db", interval_s=1.0),
        estimates=lambda: {10: {NVML0: 19 * GIB}, 11: {NVML0: GIB}},
        health=lambda: box.health,
    )
    srv.start()
    try:
        yield srv, box
    finally:
        srv.stop()


def get(srv: HttpServer, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.address[1], timeout=30)
    try:
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


# -- encodings ----------------------------------------------------------------------------


def test_plain_scrape_is_text_format_uncompressed(live: tuple[HttpServer, Box]) -> None:
    status, head, body = get(live[0], {})
    assert status == 200
    assert head["content-type"].startswith("text/plain; version=0.0.4")
    assert "content-encoding" not in head
    assert "Accept-Encoding" in head["vary"]
    assert b"# EOF" not in body
    assert samples(body.decode())["vramscope_db_dropped_ticks_total"] == {(): 7}


def test_openmetrics_on_accept_and_gzip_on_accept_encoding(live: tuple[HttpServer, Box]) -> None:
    status, head, body = get(live[0], {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"})
    assert status == 200
    assert head["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert head["content-encoding"] == "gzip"
    assert int(head["content-length"]) == len(body)
    text = gzip.decompress(body).decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in openmetrics_families(text)}
    assert families["vramscope_db_dropped_ticks"].type == "counter"
    assert families["vramscope_build_info"].type == "gauge"
    # gzip refused with q=0: plain bytes
    _, head, body = get(live[0], {"Accept-Encoding": "br, gzip;q=0"})
    assert "content-encoding" not in head and body.startswith(b"#")


def test_a_malformed_accept_falls_back_to_text(live: tuple[HttpServer, Box]) -> None:
    for accept in ("application/openmetrics-text; version=abc", "x" * 5000, ";;;,,,"):
        status, head, body = get(live[0], {"Accept": accept})
        assert status == 200, body
        assert head["content-type"].startswith("text/plain"), accept
        assert b"vramscope_last_tick_timestamp_seconds" in body


def test_a_tiny_answer_is_not_compressed() -> None:
    body, _, headers = encode(CollectorRegistry(), None, "gzip")
    assert len(body) < GZIP_MIN_BYTES and "Content-Encoding" not in headers
    body, _, headers = encode(build_registry(lambda: box_snapshot(0)), None, "x-gzip, br")
    assert headers["Content-Encoding"] == "gzip"
    assert b"vramscope_process_memory_bytes" in gzip.decompress(body)


@needs_promtool
def test_both_formats_pass_promtool_check_metrics(live: tuple[HttpServer, Box]) -> None:
    for headers in ({}, {"Accept": OPENMETRICS}):
        _, head, body = get(live[0], headers)
        assert daemon_harness.check_metrics_problems(body) == [], head["content-type"]
    # the filter lets nothing else through: a counter sample without _total is caught
    bad = b"# TYPE x_seconds counter\nx_seconds 1\n"
    assert daemon_harness.check_metrics_problems(bad)


# -- conventions -----------------------------------------------------------------------------


def test_kind_labels_mean_one_thing_and_gpus_carry_dcgm_labels(
    live: tuple[HttpServer, Box],
) -> None:
    m = samples(get(live[0], {})[2].decode())
    for name, series in m.items():
        for labels in series:
            keys = dict(labels)
            if "kind" in keys:
                assert name == "vramscope_log_events_total", name  # kind of a log record
    total = {dict(k)["device"]: dict(k) for k in m["vramscope_device_memory_total_bytes"]}
    assert total[NVML0] | {} == {
        "device": NVML0,
        "name": "NVIDIA RTX 4090",
        "device_type": "dedicated",
        "gpu": "0",
        "UUID": "GPU-aaaa-0000",
        "modelName": "NVIDIA RTX 4090",
    }
    assert (total[NVML1]["gpu"], total[NVML1]["UUID"]) == ("1", "GPU-bbbb-1111")
    assert (total[APU]["gpu"], total[APU]["UUID"], total[APU]["device_type"]) == (
        "",
        "",
        "unified",
    )
    assert total["host"]["modelName"] == "" and total["host"]["device_type"] == "host"
    kinds = {dict(k)["memory_kind"] for k in m["vramscope_process_memory_bytes"]}
    assert kinds == {"vram", "rss_anon"}
    assert "vramscope_db_dropped_ticks" not in m


def test_pid_series_are_bounded_and_the_rest_summed(live: tuple[HttpServer, Box]) -> None:
    srv, box = live
    m = samples(get(srv, {})[2].decode())
    pids = {dict(k)["pid"] for k in m["vramscope_process_memory_bytes"]}
    assert len(pids) == MAX_PID_SERIES
    assert "10" in pids  # the old server holding the most: its series and its estimate
    assert "11" not in pids  # started a second ago
    assert not pids & {str(p) for p in range(100, 200)}  # top-N host list only
    kept = {str(p) for p in range(LAST - (MAX_PID_SERIES - 1), LAST)}
    assert pids == kept | {"10"}  # the largest first
    assert set(m["vramscope_process_estimate_bytes"]) == {
        (("device", NVML0), ("model", "m10.gguf"), ("pid", "10"))
    }
    left_out = 1 + 100 + (LAST - 1000) - (MAX_PID_SERIES - 1)
    assert m["vramscope_unlabelled_processes"] == {(): left_out}
    unlabelled = m["vramscope_unlabelled_process_memory_bytes"]
    cut = range(1000, LAST - (MAX_PID_SERIES - 1))
    anon = 3 * MIB + 100 * MIB + sum((p - 999) * MIB for p in cut)
    assert unlabelled[(("device", "host"), ("memory_kind", "rss_anon"))] == anon
    assert unlabelled[(("device", "host"), ("memory_kind", "rss_file"))] == 100 * MIB
    # the young server's cgroup keeps its own series; only the pid link waits
    assert m["vramscope_cgroup_memory_max_bytes"] == {(("cgroup", "/young.slice"),): 8 * GIB}
    assert m.get("vramscope_process_cgroup_info", {}) == {}
    # the young server ages past the minimum: it gets its series (a later tick)
    later = box.snap.ts_ms + int(PID_LABEL_MIN_AGE_S * 1000)
    box.snap = _aged(box.snap, later)
    m = samples(get(srv, {})[2].decode())
    assert "11" in {dict(k)["pid"] for k in m["vramscope_process_measured_bytes"]}
    assert m["vramscope_process_cgroup_info"] == {(("cgroup", "/young.slice"), ("pid", "11")): 1}


def _aged(snap: Snapshot, ts_ms: int) -> Snapshot:
    """The same processes at a later tick, without the filler servers."""
    procs = tuple(p for p in snap.processes if p.pid < 1000)
    memory = tuple(m for m in snap.memory if m.pid < 1000)
    return Snapshot(ts_ms, snap.devices, procs, memory, (), (), snap.runs, cgroups=snap.cgroups)


def test_nothing_is_kept_between_scrapes(live: tuple[HttpServer, Box]) -> None:
    srv, box = live
    get(srv, {})
    collectors = list(srv.registry._collector_to_names)  # the registry's own collectors
    snapshot_collector = next(c for c in collectors if type(c).__name__ == "SnapshotCollector")
    before = dict(vars(snapshot_collector)) if hasattr(snapshot_collector, "__dict__") else {}
    box.snap = _aged(box.snap, box.snap.ts_ms + 1000)
    get(srv, {})
    assert dict(vars(snapshot_collector)) == before  # no cache that grows with scrapes


# -- self-metrics on a real daemon ------------------------------------------------------------


def test_a_real_daemon_exports_its_own_process_metrics_and_build_info(tmp_path: Path) -> None:
    with daemon_harness.running(tmp_path) as d:
        m = samples(d.metrics())
        pid = d.process.pid
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot_s = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        started_s = boot_s + int(stat[19]) / os.sysconf("SC_CLK_TCK")
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    version = importlib.metadata.version("vramscope")
    build = m["vramscope_build_info"]
    assert len(build) == 1 and dict(next(iter(build)))["version"] == version
    # the daemon's own process (its /proc/self), not the test's
    assert m["process_start_time_seconds"][()] == pytest.approx(started_s, abs=1.0)
    assert m["process_resident_memory_bytes"][()] > 10 * MIB
    assert m["process_cpu_seconds_total"][()] > 0
    assert abs(m["process_open_fds"][()] - fds) <= 8  # a scrape's socket comes and goes
    assert m["process_max_fds"][()] >= m["process_open_fds"][()]


def _pid_series_of(config_text: str, tmp_path: Path) -> set[str]:
    """The pids with a measured series when a daemon with ``config_text`` serves the box
    snapshot without its fillers (one old server, one a second old, the top-N list)."""
    from monitor import config as config_mod

    path = tmp_path / "c.toml"
    path.write_text(config_text)
    cfg = config_mod.load(path, db=tmp_path / "v.db")
    now_ms = int(time.time() * 1000)
    snap = _aged(box_snapshot(now_ms), now_ms)  # under the cap: only the age decides
    srv = HttpServer("127.0.0.1:0", None, lambda: snap, cfg.db_path, cfg)
    families = text_string_to_metric_families(render_of(srv))
    measured = next(f for f in families if f.name == "vramscope_process_measured_bytes")
    return {s.labels["pid"] for s in measured.samples}


def render_of(srv: HttpServer) -> str:
    from monitor.http.metrics import render

    return render(srv.registry).decode()


def test_pid_series_after_s_lets_a_young_server_in_and_the_default_keeps_it_out(
    tmp_path: Path,
) -> None:
    """``[http] pid_series_after_s``: the default (30 s) keeps the second-old server (pid
    11) out (noise: a launch that ends within seconds makes no series); 0 lets it in
    (signal); the top-N list never gets pid series either way."""
    default = _pid_series_of("[http]\nlisten = '127.0.0.1:0'\n", tmp_path)
    assert "10" in default and "11" not in default
    at_once = _pid_series_of("[http]\nlisten = '127.0.0.1:0'\npid_series_after_s = 0\n", tmp_path)
    assert "11" in at_once and "10" in at_once
    assert not {str(p) for p in range(100, 200)} & at_once


@pytest.mark.parametrize("value", ["-1", "86401", '"30"'])
def test_a_bad_pid_series_after_s_is_one_line(tmp_path: Path, value: str) -> None:
    import cli_runner

    path = tmp_path / "c.toml"
    path.write_text(f"[http]\npid_series_after_s = {value}\n")
    done = cli_runner.vramscope("status", "--config", str(path))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "[http] pid_series_after_s" in line and "Traceback" not in done.stderr
