"""`status` and `daemon` sampling a recorded Strix Halo tree end to end (--proc-root/--sys-root)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "drm" / "strix-halo"
ROOTS = ["--proc-root", str(FIXTURE / "proc"), "--sys-root", str(FIXTURE / "sys")]
KIB, GIB = 1024, 1024**3
DEVICE = "drm:0000:c5:00.0"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}  # a wide terminal: every column shows
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_status_json_on_the_strix_halo_tree() -> None:
    result = run("status", "--json", "--pss", *ROOTS)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    devices = {d["device_id"]: d for d in doc["devices"]}
    apu = devices[DEVICE]
    assert apu["memory_kind"] == "unified"
    assert apu["vram_total_bytes"] == 512 * 1024**2
    assert apu["gtt_total_bytes"] == 96 * GIB
    assert devices["host"]["total_bytes"] == 130_560_000 * KIB
    procs = {p["comm"]: p for p in doc["processes"]}
    llama = procs["llama-server"]
    assert llama["engine"] == "llama.cpp"
    assert set(llama["reasons"]) >= {"inference", "gpu"}
    assert llama["memory"][DEVICE]["gtt_bytes"] == 73_547_120 * KIB  # two fds, counted once
    assert llama["memory"]["host"]["rss_file_bytes"] == 7_340_032 * KIB
    assert llama["memory"]["host"]["pss_bytes"] == (1_312_000 + 3_670_016 + 2_048) * KIB
    assert "gpu" in procs["gnome-shell"]["reasons"]
    plain = json.loads(run("status", "--json", *ROOTS).stdout)  # PSS only when asked
    assert all("pss_bytes" not in m for p in plain["processes"] for m in p["memory"].values())


def test_status_table_on_the_strix_halo_tree() -> None:
    result = run("status", *ROOTS)
    assert result.returncode == 0, result.stderr
    # the device by its display name (monitor/device_names.py), the JSON keeps DEVICE
    # (its DETAIL on the lines under it when the terminal is narrow)
    block = result.stdout[result.stdout.index("GPU0 Strix Halo") : result.stdout.index("host RAM")]
    assert "unified" in block and "GTT 70." in block
    llama = next(x for x in result.stdout.splitlines() if "Llama-3.3-70B" in x)
    assert "GPU0 70.4 GiB" in llama and "inference,gpu" in llama  # GTT + its VRAM
    # a recognised server: its model file, not the raw command line cut at 80 columns
    assert "llama-server -m" not in llama


def test_daemon_records_the_tree(tmp_path: Path, stop_with_sigterm, wait_for_ticks) -> None:
    db = tmp_path / "v.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2", *ROOTS],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_ticks(db, 5)
    finally:
        err = stop_with_sigterm(proc)
    assert proc.returncode == 0, err
    conn = sqlite3.connect(db)
    gtt = conn.execute(
        "SELECT DISTINCT s.gtt_bytes FROM process_samples s JOIN processes p"
        " ON p.id = s.process_id WHERE p.comm = 'llama-server' AND s.device_id = ?",
        (DEVICE,),
    ).fetchall()
    assert gtt == [(73_547_120 * KIB,)]
    kinds = dict(conn.execute("SELECT id, memory_kind FROM devices"))
    assert kinds == {DEVICE: "unified", "host": "host"}
    statuses = set(conn.execute("SELECT collector, status FROM collector_runs"))
    assert statuses == {("nvml", "nodata"), ("drm", "ok"), ("amdsmi", "nodata"), ("procfs", "ok")}
