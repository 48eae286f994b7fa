"""Each server is assessed once (issue 15 point 3): the daemon estimates it when it first
sees it and when its launch changes, stores it in the ``estimates`` table, serves it on
``/api/v1/estimates`` and ``/metrics``; the TUI's database and remote sources show the
stored estimate and never estimate themselves.

Real parts: real processes whose command line reads ``llama-server -m x.gguf``
(tests/fakes/fake_server.py), real small GGUF files, a real daemon subprocess with its
HTTP API on 127.0.0.1, real SQLite files.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import fake_server
import pytest
import tiny_models

from collectors.base import DeviceSample, ProcessInfo, ProcessMemory, Roots, Snapshot
from monitor.analysis.assess import (
    assess,
    assessments_document,
    assessments_from_document,
    from_json,
    judged,
    to_json,
)
from monitor.daemon.assessor import Assessor
from monitor.daemon.sampler import Sampler
from monitor.estimate import ESTIMATOR_VERSION
from monitor.estimate.model import devices_from_samples
from monitor.gguf.reader import read_header
from monitor.store.database import Store
from tui.source import FrameBuilder, RemoteSource, SourceError, StoreSource

ROOT = Path(__file__).resolve().parents[3]
GIB = 1024**3
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> str:
    with OPENER.open(url, timeout=10) as resp:
        return resp.read().decode()


def estimate_metric(body: str, pid: int) -> dict[str, float]:
    """device -> value of vramscope_process_estimate_bytes for ``pid``."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.name == "vramscope_process_estimate_bytes" and s.labels["pid"] == str(pid):
                out[s.labels["device"]] = s.value
    return out


def poll(what: str, check, daemon: subprocess.Popen[str], timeout_s: float = 60.0):  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while True:
        assert daemon.poll() is None, f"the daemon exited: {daemon.communicate()[1][-2000:]}"
        try:
            got = check()
        except OSError:
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def estimate_rows(db: Path, pid: int) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(
            "SELECT count(*) FROM estimates e JOIN processes p ON"
            " p.id = e.process_id WHERE p.pid = ?",
            (pid,),
        ).fetchone()[0]
    finally:
        conn.close()


def test_a_remote_tui_and_metrics_show_the_daemons_estimate_after_the_model_file_is_gone(
    tmp_path: Path, stop_with_sigterm
) -> None:
    """The done-when of issue 15 point 3, on real parts end to end."""
    (tmp_path / "models").mkdir()
    model = tiny_models.write_llama(tmp_path / "models" / "x.gguf").path
    argv = ["llama-server", "-m", "x.gguf", "-c", "512", "-np", "1"]
    port = free_port()
    cfg = tmp_path / "vramscope.toml"
    # pid series at once, not after the 30 s a launch must live by default
    cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\npid_series_after_s = 0\n')
    db = tmp_path / "v.db"
    url = f"http://127.0.0.1:{port}"
    with fake_server.running(argv, cwd=model.parent) as server:
        # what the estimator makes of it here, with this box's devices, before it goes
        sampler = Sampler(Roots(), enabled=["procfs", "nvml", "drm"], timeout_s=None)
        try:
            snap = sampler.sample()
        finally:
            sampler.close()
        info = next(p for p in snap.processes if p.pid == server.pid)
        expected = assess(info, devices_from_samples(snap.devices, 300 * 1024**2), 0)
        assert expected is not None and expected.estimate is not None
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "monitor",
                "daemon",
                "--db",
                str(db),
                "--interval",
                "0.2",
                "--config",
                str(cfg),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            doc = poll(
                "the daemon's estimate",
                lambda: next(
                    (
                        e
                        for e in json.loads(get(f"{url}/api/v1/estimates"))["estimates"]
                        if e["pid"] == server.pid
                    ),
                    None,
                ),
                daemon,
            )
            assert doc["error"] is None and doc["estimator_version"] == ESTIMATOR_VERSION
            model.unlink()  # from now on nothing can read it: not here, not the daemon
            first_rows = estimate_rows(db, server.pid)
            ticks_then = _ticks(db)
            poll("five more ticks", lambda: _ticks(db) >= ticks_then + 5, daemon)

            by_device = poll(
                "the estimate metric",
                lambda: estimate_metric(get(f"{url}/metrics"), server.pid),
                daemon,
            )
            assert by_device == {d: float(b) for d, b in expected.by_device.items()}

            frame = RemoteSource(url).latest()
            (row,) = [r for r in frame.models if r.pid == server.pid]
            assert row.error is None and "unknown model" not in row.flags
            assert row.estimate_bytes == expected.estimate.total_bytes() > 0
            assert row.model == "x.gguf" and row.ctx_slots.startswith("512×")
            assert row.measured_bytes is not None  # judged from the remote tick
            # what the remote source did before: estimate here, from a file that is gone
            (local,) = [
                r for r in FrameBuilder().build(frame.snapshot).models if r.pid == server.pid
            ]
            assert local.estimate_bytes is None and "unknown model" in local.flags
            assert first_rows == 1 and estimate_rows(db, server.pid) == 1  # once, not per tick

            stored = StoreSource(db)
            try:
                (db_row,) = [r for r in stored.latest().models if r.pid == server.pid]
            finally:
                stored.close()
            assert db_row.estimate_bytes == expected.estimate.total_bytes()
        finally:
            err = stop_with_sigterm(daemon)
    assert "Traceback" not in err, err


def _ticks(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute("SELECT count(DISTINCT ts_ms) FROM device_samples").fetchone()[0]
    finally:
        conn.close()


# -- the daemon's assessor on a real database -------------------------------------------------

T0 = 1_767_225_600_000


def _snap(ts: int, procs: list[ProcessInfo], rss: int = GIB) -> Snapshot:
    host = DeviceSample(
        "host",
        "procfs",
        "linux",
        "host RAM",
        "host",
        64 * GIB,
        20 * GIB,
        available_bytes=44 * GIB,
        free_bytes=44 * GIB,
    )
    memory = tuple(
        ProcessMemory(p.pid, "host", rss_anon_bytes=rss, rss_file_bytes=0) for p in procs
    )
    return Snapshot(ts, (host,), tuple(procs), memory, (), (), ())


def _server(argv: list[str], pid: int = 4242) -> ProcessInfo:
    return ProcessInfo(
        pid, 9999, T0 - 60_000, 1, 1000, "llama-server", tuple(argv), "llama.cpp", ("inference",)
    )


@pytest.fixture
def model(tmp_path: Path) -> Path:
    (tmp_path / "m").mkdir()
    return tiny_models.write_llama(tmp_path / "m" / "x.gguf").path


def test_the_daemon_assesses_a_server_once_per_launch_not_every_tick(
    tmp_path: Path, model: Path
) -> None:
    reads: list[str] = []

    def counting(path: str):  # noqa: ANN202 - the real reader, counted
        reads.append(path)
        return read_header(path)

    db = tmp_path / "v.db"
    store = Store.open(db)
    assessor = Assessor(tmp_path / "no-proc", threaded=False, read_header=counting)
    first = _server(["llama-server", "-m", str(model), "-c", "512"])
    snap = _snap(T0, [first])
    store.write(snap)
    assessor.on_tick(snap, store)
    once = len(reads)  # the estimate, and the re-estimates that price the fixes
    assert once >= 1 and set(reads) == {str(model)}
    for i in range(1, 20):
        snap = _snap(T0 + i * 1000, [first])
        store.write(snap)
        assessor.on_tick(snap, store)
    assert len(reads) == once and estimate_rows(db, first.pid) == 1
    assert assessor.assessed == 1
    (a,) = assessor.current().values()
    assert a.estimate is not None and a.launch.ctx_size == 512 and a.ts_ms == T0

    relaunched = _server(["llama-server", "-m", str(model), "-c", "1024"])  # same pid/start
    for i in range(20, 25):
        snap = _snap(T0 + i * 1000, [relaunched])
        store.write(snap)
        assessor.on_tick(snap, store)
    twice = len(reads)
    assert twice > once and assessor.assessed == 2 and estimate_rows(db, first.pid) == 2
    (b,) = assessor.current().values()
    assert b.launch.ctx_size == 1024 and b.estimate is not None
    assert b.estimate.total_bytes("kv") == 2 * a.estimate.total_bytes("kv")

    # a restarted daemon takes the stored assessment up: no model read, even with it gone
    model.unlink()
    again = Assessor(tmp_path / "no-proc", threaded=False, read_header=counting)
    snap = _snap(T0 + 30_000, [relaunched])
    store.write(snap)
    again.on_tick(snap, store)
    assert len(reads) == twice and again.assessed == 0
    (c,) = again.current().values()
    assert c.estimate == b.estimate and c.launch == b.launch and c.error is None

    store.write(_snap(T0 + 31_000, []))
    again.on_tick(_snap(T0 + 31_000, []), store)  # it exited: nothing is current
    assert dict(again.current()) == {}
    store.close()


def test_the_threaded_assessor_never_holds_up_a_tick(tmp_path: Path, model: Path) -> None:
    """The model read happens on the assessor's thread: a tick returns while the read is
    stuck, and the estimate arrives on a later tick."""
    import threading

    gate = threading.Event()

    def slow(path: str):  # noqa: ANN202 - a model file on a stalled network mount
        gate.wait(30)
        return read_header(path)

    store = Store.open(tmp_path / "v.db")
    assessor = Assessor(tmp_path / "no-proc", read_header=slow)
    server = _server(["llama-server", "-m", str(model), "-c", "512"])
    try:
        for i in range(3):
            snap = _snap(T0 + i * 1000, [server])
            store.write(snap)
            assessor.on_tick(snap, store)  # returns although the read waits
        assert dict(assessor.current()) == {}
        gate.set()
        deadline = time.monotonic() + 30
        i = 3
        while not assessor.current() and time.monotonic() < deadline:
            snap = _snap(T0 + i * 1000, [server])
            store.write(snap)
            assessor.on_tick(snap, store)
            i += 1
            time.sleep(0.02)
        (a,) = assessor.current().values()
        assert a.estimate is not None and assessor.assessed == 1
    finally:
        gate.set()
        assessor.close()
        store.close()


def test_the_database_source_shows_stored_estimates_and_reads_no_model(
    tmp_path: Path, model: Path
) -> None:
    db = tmp_path / "v.db"
    store = Store.open(db)
    assessor = Assessor(tmp_path / "no-proc", threaded=False)
    server = _server(["llama-server", "-m", str(model), "-c", "512", "-np", "1"])
    unknown = _server(["llama-server", "-m", str(tmp_path / "absent.gguf")], pid=4343)
    before = _snap(T0 - 1000, [server])  # a tick written before the daemon assessed it
    store.write(before)
    for i in range(3):
        snap = _snap(T0 + i * 1000, [server, unknown], rss=3 * GIB)
        store.write(snap)
        assessor.on_tick(snap, store)
    store.close()
    expected = assessor.current()[(server.pid, server.start_ticks)]
    assert expected.estimate is not None
    model.unlink()  # the database source must not need it

    source = StoreSource(db)
    try:
        frame = source.latest()
        rows = {r.pid: r for r in frame.models}
        assert rows[server.pid].estimate_bytes == expected.estimate.total_bytes()
        # what the estimate could not derive is kept with it and flagged on its row
        got = rows[server.pid]
        assert got.estimate is not None
        assert got.estimate.approximate == expected.estimate.approximate
        assert ("≈ estimate approximate" in got.flags) is bool(expected.estimate.approximate)
        assert rows[server.pid].estimate == expected.estimate
        assert rows[server.pid].measured_bytes == 3 * GIB
        diag = rows[server.pid].diagnosis
        assert diag is not None and diag.measured_bytes == 3 * GIB  # judged for this tick
        assert diag.verdict == (
            "over" if expected.estimate.total_bytes() * 1.2 < 3 * GIB else "as_expected"
        )
        # a model the daemon could not read: unknown, with the daemon's reason
        assert rows[unknown.pid].estimate_bytes is None
        assert "absent.gguf" in (rows[unknown.pid].error or "")
        assert "unknown model" in rows[unknown.pid].flags
        # a moment before the assessment: not assessed yet, never estimated here
        (old,) = source.at(T0 - 1000).models
        assert old.estimate_bytes is None and old.error == "not assessed by the daemon yet"
    finally:
        source.close()


def test_the_store_keeps_documents_and_a_row_that_no_longer_parses_is_skipped(
    tmp_path: Path, model: Path
) -> None:
    """The store stores (monitor/store/estimates.py reads back the document it was given);
    monitor/analysis/stored.py parses it, skipping a row a hand edit broke, never guessing."""
    from monitor.analysis.stored import assessments_at
    from monitor.store import estimates

    db = tmp_path / "v.db"
    store = Store.open(db)
    assessor = Assessor(tmp_path / "no-proc", threaded=False)
    argv = ["llama-server", "-m", str(model), "-c", "512", "-np", "1"]
    good, broken = _server(argv), _server(argv, pid=4343)
    for i in range(3):
        snap = _snap(T0 + i * 1000, [good, broken])
        store.write(snap)
        assessor.on_tick(snap, store)
    store.close()
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE estimates SET launch = '{\"engine\": 5}' WHERE process_id ="
        " (SELECT id FROM processes WHERE pid = 4343)"
    )
    conn.commit()
    docs = estimates.at(conn, T0 + 5000)
    assert set(docs) == {(4242, 9999), (4343, 9999)}
    assert docs[(4343, 9999)]["launch"] == {"engine": 5}
    parsed = assessments_at(conn, T0 + 5000)
    assert set(parsed) == {(4242, 9999)}
    assert parsed[(4242, 9999)] == assessor.current()[(4242, 9999)]
    conn.close()


# -- the served form --------------------------------------------------------------------------


def test_an_assessment_survives_its_json_and_hostile_documents_are_refused(model: Path) -> None:
    server = _server(["llama-server", "-m", str(model), "-c", "512", "-ctk", "q8_0"])
    a = assess(server, [], T0)
    assert a is not None and a.estimate is not None and a.error is None
    back = from_json(json.loads(json.dumps(to_json(a))))
    assert back == a
    doc = assessments_document([judged(a, _snap(T0, [server]).memory)], T0)
    got = assessments_from_document(json.loads(json.dumps(doc)))
    assert got[(server.pid, server.start_ticks)] == a
    assert doc["estimates"][0]["measured"]["total_bytes"] == GIB
    assert doc["estimates"][0]["verdict"] in ("as_expected", "over", "under")

    good = json.loads(json.dumps(doc))
    for path, value, message in (
        (("estimates", 0, "estimate", "components", 0, "bytes"), -1, "bytes"),
        (("estimates", 0, "estimate", "components", 0, "when"), "later", "when"),
        (("estimates", 0, "launch", "model"), "x" * 5000, "launch.model"),
        (("estimates", 0, "pid"), True, "pid"),
        (("estimates", 0, "estimate", "components"), [{}] * 600, "components"),
        (("schema",), "other/1", "schema"),
    ):
        bad = json.loads(json.dumps(good))
        target = bad
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        with pytest.raises(ValueError, match=message):
            assessments_from_document(bad)
    bad = json.loads(json.dumps(good))
    bad["estimates"][0]["estimate"], bad["estimates"][0]["error"] = None, None
    with pytest.raises(ValueError, match="neither an estimate nor an error"):
        assessments_from_document(bad)


def test_the_api_serves_what_the_daemon_assessed_and_nothing_else(
    tmp_path: Path, model: Path
) -> None:
    from monitor.config import Config
    from monitor.http import HttpServer

    server = _server(["llama-server", "-m", str(model), "-c", "512"], pid=os.getpid())
    snap = _snap(int(time.time() * 1000), [server])
    a = assess(server, [], snap.ts_ms)
    assert a is not None
    served = {"now": {(a.pid, a.start_ticks): a}}
    Store.open(tmp_path / "v.db").close()  # the events the remote source reads too
    http = HttpServer(
        "127.0.0.1:0",
        None,
        lambda: snap,
        tmp_path / "v.db",
        Config(db_path=tmp_path / "v.db"),
        assessments=lambda: served["now"],
    )
    http.start()
    url = f"http://127.0.0.1:{http.address[1]}"
    try:
        doc = json.loads(get(f"{url}/api/v1/estimates"))
        assert doc["schema"] == "vramscope.estimates/1"
        assert [e["pid"] for e in doc["estimates"]] == [server.pid]
        metric = estimate_metric(get(f"{url}/metrics"), server.pid)
        assert metric == {d: float(b) for d, b in a.by_device.items()}
        (row,) = RemoteSource(url).latest().models
        assert row.estimate_bytes == a.estimate.total_bytes()  # type: ignore[union-attr]

        served["now"] = {}  # not assessed yet over there: unknown here, never estimated
        model.unlink()
        (row,) = RemoteSource(url).latest().models
        assert row.estimate_bytes is None and row.error == "not assessed by the daemon yet"
        assert estimate_metric(get(f"{url}/metrics"), server.pid) == {}
    finally:
        http.stop()
    with pytest.raises(SourceError, match="cannot reach"):
        RemoteSource(url, timeout_s=1).latest()


def test_retention_drops_the_estimates_of_processes_it_forgets(tmp_path: Path, model: Path) -> None:
    from monitor.store.retention import Retention

    db = tmp_path / "v.db"
    store = Store.open(db)
    assessor = Assessor(tmp_path / "no-proc", threaded=False)
    server = _server(["llama-server", "-m", str(model), "-c", "512"])
    snap = _snap(T0, [server])
    store.write(snap)
    assessor.on_tick(snap, store)
    assert estimate_rows(db, server.pid) == 1
    store.prune(T0 + 3600_000, Retention())  # still within every window: kept
    assert estimate_rows(db, server.pid) == 1
    counts = store.prune(T0 + 400 * 86400_000, Retention())
    assert counts["deleted_processes"] == 1 and counts["deleted_estimates"] == 1
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM estimates").fetchone()[0] == 0
    conn.close()
    store.close()


def test_what_an_estimate_left_approximate_survives_the_store() -> None:
    """``approximate`` goes through the stored JSON (the TUI's database source shows it)."""
    import dataclasses

    from monitor.analysis.assess import estimate_from_json, estimate_to_json
    from monitor.estimate import Component, MemoryEstimate

    est = MemoryEstimate(
        "llama.cpp",
        "/m.gguf",
        (Component("compute", "host", 1, "x"),),
        approximate=("compute buffer: nemotron_h's graph is not derived here",),
    )
    back = estimate_from_json(json.loads(json.dumps(estimate_to_json(est))))
    assert back.approximate == est.approximate
    old = estimate_to_json(dataclasses.replace(est, approximate=()))
    del old["approximate"]  # a row an older daemon wrote
    assert estimate_from_json(json.loads(json.dumps(old))).approximate == ()
