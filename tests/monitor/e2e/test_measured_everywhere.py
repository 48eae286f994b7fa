"""One definition of measured, the same number on every surface (issue 16, done-when).

A real daemon records a real process whose ``/proc`` reads ``llama-server -m x.gguf`` (a
real small GGUF in its working directory) into a real database and serves /metrics on
loopback. The process is then SIGKILLed and left unreaped, so the daemon records its death
(a crash). The tick the post-mortem says it was last measured at is read back through
``status`` (JSON and text, on that tick of the database), the TUI (the database source:
the models table, the host bar's legend and the history line), ``diagnose --json --at``,
the /metrics renderer on that tick and ``postmortem --json``: each shows the same measured
bytes. The running daemon's own /metrics is checked against the tick it names, too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import fake_server
import tiny_models
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from monitor.cli.main import cli
from monitor.http.metrics import build_registry, render
from monitor.report.postmortem import fmt_bytes
from monitor.report.status import human_bytes, render_text, to_json
from monitor.store.moment import snapshot_at
from tui.format import size
from tui.source import StoreSource
from tui.widgets.device_panel import DevicePanel, panels_from_frame
from tui.widgets.models_table import ModelsTable

ROOT = Path(__file__).resolve().parents[3]
DEADLINE_S = 60.0


def vramscope(*args: str) -> tuple[int, str, str]:
    """The real command line, run in this process (no interpreter start): (exit, out, err)."""
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:
        return []
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError:  # the daemon has not created its tables yet
        return []
    finally:
        conn.close()


def until(what: str, probe):  # noqa: ANN001, ANN201
    """Poll ``probe`` until it returns something truthy (generous deadline, no fixed sleep)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if got := probe():
            return got
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {DEADLINE_S} s")


def measured_metric(text: str, pid: int) -> tuple[float | None, int | None]:
    """(vramscope_process_measured_bytes of ``pid``, the tick's ts_ms) from /metrics text."""
    value, tick = None, None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vramscope_process_measured_bytes" and s.labels["pid"] == str(pid):
                value = s.value
                assert s.labels["comm"] == "llama-server" and s.labels["model"] == "x.gguf"
            if s.name == "vramscope_last_tick_timestamp_seconds":
                tick = round(s.value * 1000)
    return value, tick


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def status_measured(db: Path, ts_ms: int, pid: int) -> dict:
    snap = snapshot_at(db, ts_ms)
    assert snap.ts_ms == ts_ms
    (proc,) = [p for p in to_json(snap)["processes"] if p["pid"] == pid]
    return proc["measured"]


def test_the_same_measured_bytes_on_every_surface(tmp_path: Path, stop_with_sigterm) -> None:
    models = tmp_path / "models"
    models.mkdir()
    tiny_models.write_llama(models / "x.gguf")
    db, port = tmp_path / "v.db", free_port()
    config = tmp_path / "config.toml"
    # pid series at once, not after the 30 s a launch must live by default
    config.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\npid_series_after_s = 0\n')
    argv = ["llama-server", "-m", "x.gguf", "-c", "2048", "-np", "1"]
    with fake_server.running(argv, cwd=models) as server:
        pid = server.pid
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
                str(config),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # the running daemon's /metrics, against the database tick it names
            def scraped() -> tuple[float, int] | None:
                try:
                    value, tick = measured_metric(scrape(port), pid)
                except OSError:  # not listening yet
                    return None
                return (value, tick) if value is not None and tick is not None else None

            live_value, live_tick = until("the daemon's /metrics lists the server", scraped)
            until(
                "the scraped tick is in the database",
                lambda: query(db, "SELECT 1 FROM process_samples WHERE ts_ms = ?", (live_tick,)),
            )
            live = status_measured(db, live_tick, pid)
            assert live_value == live["total_bytes"]
            # death: SIGKILL (killed by someone else: an exit, not a crash), never reaped
            # while the daemon looks (a zombie: its exit status)
            os.kill(pid, signal.SIGKILL)
            until(
                "the daemon records the exit",
                lambda: query(
                    db, "SELECT 1 FROM processes WHERE pid = ? AND exited_ms IS NOT NULL", (pid,)
                ),
            )
        finally:
            stop_with_sigterm(daemon)

    # the post-mortem names the tick it was last measured at: every surface reads that tick
    code, out, err = vramscope("postmortem", "--pid", str(pid), "--json", "--db", str(db))
    assert code == 0, err
    at_death = json.loads(out)["victim"]["measured"]
    tick, total = at_death["ts_ms"], at_death["total_bytes"]
    assert isinstance(total, int) and total > 0
    code, out, err = vramscope("postmortem", "--pid", str(pid), "--db", str(db))
    assert code == 0, err
    assert f"measured at its last tick: {fmt_bytes(total)} (GPU " in out, out
    # no GPU here: the host parts are all of it
    assert at_death["device_bytes"] == 0
    assert total == at_death["host_anon_bytes"] + at_death["host_file_bytes"]

    # status --json and status text, on that tick
    snap = snapshot_at(db, tick)
    assert snap.ts_ms == tick
    assert status_measured(db, tick, pid) == {k: at_death[k] for k in at_death if k != "ts_ms"}
    line = next(x for x in render_text(snap).splitlines() if x.startswith(f"{pid} "))
    assert line.split()[2:4] == human_bytes(total).split()  # the MEASURED column

    # the TUI on the database: the models table and the host bar's legend
    source = StoreSource(db)
    try:
        frame = source.at(tick)
        series = source.history(None, tick - 60_000, tick)  # the history screen's lines
    finally:
        source.close()
    assert (tick, total) in series[f"model:x.gguf (pid {pid})"]
    assert frame.ts_ms == tick
    (row,) = [r for r in frame.models if r.pid == pid]
    assert row.measured_bytes == total
    from tui.widgets.models_table import COLUMNS

    assert ModelsTable.cells(row)[COLUMNS.index("measured")] == size(total)
    (host,) = [d for d in panels_from_frame(frame) if d.picture.device_id == "host"]
    (seg,) = [
        s for s, use in zip(host.models, host.picture.processes, strict=False) if use.pid == pid
    ]
    mine = dataclasses.replace(host, models=(seg,))  # other x.gguf servers may run here
    legend = DevicePanel(mine)._lines(mine, 400)[3].plain
    assert f"x.gguf anon+shm {size(seg.bytes)} (measured {size(total)})" in legend, legend

    # diagnose --json at that tick
    code, out, err = vramscope(
        "diagnose", "--json", "--db", str(db), "--at", str(tick), "--pid", str(pid)
    )
    assert code == 0, err
    (diag,) = json.loads(out)
    assert diag["measured_bytes"] == total
    assert diag["measured"] == {k: at_death[k] for k in at_death if k != "ts_ms"}

    # /metrics rendered from that tick
    metrics = render(build_registry(lambda: snap, pid_min_age_s=0)).decode()  # as the daemon
    assert measured_metric(metrics, pid) == (total, tick)

    print(
        f"\nmeasured at tick {tick}: {total} bytes (anon {at_death['host_anon_bytes']}, "
        f"file {at_death['host_file_bytes']}, device {at_death['device_bytes']}); live "
        f"/metrics at tick {live_tick}: {live_value:.0f}; legend: {legend!r}"
    )
