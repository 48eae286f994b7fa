"""Post-mortems of real OOM kills: a memory cgroup with a small limit, a process that grows
until the kernel kills it, the daemon watching; then `vramscope postmortem`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
from memcg import make_cgroup
from stopping import STOP_GUARD_S

ROOT = Path(__file__).resolve().parents[3]
MIB = 1024**2

GROW = """
import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))   # join the memory cgroup first
print("ready", flush=True)
chunks = []
while True:   # 2 MiB every 0.1 s: the daemon (0.2 s ticks) sees it within ~4 MiB of death
    block = bytearray(2 * 1024 * 1024)
    block[::4096] = b"\\x01" * (len(block) // 4096)
    chunks.append(block)
    time.sleep(0.1)
"""


def vramscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def wait_for_exit_recorded(db: Path, pid: int, timeout_s: float = 60.0) -> None:
    """Until the daemon has recorded ``pid``'s exit (polled; a busy machine is slow)."""
    import sqlite3

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute(
                "SELECT count(*) FROM processes WHERE pid = ? AND exited_ms IS NOT NULL", (pid,)
            ).fetchone()
        finally:
            conn.close()
        if row[0]:
            return
        time.sleep(0.1)
    raise AssertionError(f"the daemon did not record the exit of pid {pid} in {timeout_s} s")


@pytest.mark.slow  # a real daemon for many seconds: the default suite stays under 5 min
def test_a_real_oom_kill_is_explained(tmp_path: Path, wait_for_ticks) -> None:
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    group, procs = make_cgroup(96 * MIB)
    db = tmp_path / "v.db"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)  # looks like an inference server: tracked at once
    try:
        wait_for_ticks(db, 3)
        victim = subprocess.Popen(
            [str(exe), "-c", GROW, str(procs), "-m", "/models/none.gguf"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert victim.stdout is not None and victim.stdout.readline().strip() == "ready"
        victim.wait(timeout=60)
        died = time.time()
        assert victim.returncode == -signal.SIGKILL
        wait_for_exit_recorded(db, victim.pid)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=STOP_GUARD_S)
        group.rmdir()
    # --pid, not --last: another OOM kill on this busy box may come after ours
    result = vramscope("postmortem", "--pid", str(victim.pid), "--json", "--db", str(db))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    v = doc["victim"]
    assert (v["pid"], v["comm"]) == (victim.pid, "llama-server")
    assert v["how"].startswith("killed by the kernel OOM killer")
    assert (v["exit_cause"], v["exit_signal"]) == ("cgroup_oom_killed", signal.SIGKILL)
    assert doc["title"] == "OOM post-mortem"
    kernel = v["kernel"]
    assert abs(kernel["ts_ms"] / 1000 - died) < 2.0  # the kill time, within 2 s
    assert kernel["constraint"] == "CONSTRAINT_MEMCG"
    killed_rss = kernel["anon_rss_bytes"] + kernel["file_rss_bytes"] + kernel["shmem_rss_bytes"]
    assert abs(v["peak"]["host"] - killed_rss) <= 0.10 * killed_rss  # within 10 %
    from collectors.base import Roots
    from collectors.cgroup import memory_hierarchy

    hierarchy = memory_hierarchy(Roots())
    assert hierarchy is not None
    setting = "memory.limit_in_bytes" if hierarchy.version == 1 else "MemoryMax= (memory.max)"
    assert "memory cgroup" in doc["cause"] and f"raise {setting} of /{group.name}" in doc["fix"]
    # the daemon sampled the victim's cgroup: it is the one member of the killed cgroup
    budget = doc["cgroup_budget"]
    assert budget["cgroup"] == f"/{group.name}" and budget["cgroup_version"] == hierarchy.version
    assert [(m["pid"], m["victim"]) for m in budget["members"]] == [(victim.pid, True)]
    series = [p for p in doc["timeline"]["processes"] if p["pid"] == victim.pid]
    assert series and len(series[0]["points"]) >= 5
    # the HTML report: one file, its chart well-formed with a series for the victim
    html = tmp_path / "crash.html"
    assert (
        vramscope(
            "postmortem", "--pid", str(victim.pid), "--db", str(db), "--html", str(html)
        ).returncode
        == 0
    )
    text = html.read_text()
    svg = text[text.index("<svg") : text.index("</svg>") + len("</svg>")]
    ElementTree.fromstring(svg)
    assert "llama-server" in svg
    # the events command lists it
    listed = json.loads(
        vramscope("events", "--since", "1h", "--kind", "oom_kill", "--json", "--db", str(db)).stdout
    )
    assert [e["data"]["pid"] for e in listed].count(victim.pid) == 1
    conn = sqlite3.connect(db)
    kinds = {r[0] for r in conn.execute("SELECT kind FROM events")}
    assert {"oom_kill", "crash", "process_exit"} <= kinds
    # the exit carries its signal and cause, and the OOM kill paged someone
    (exit_data,) = [
        json.loads(r[0])
        for r in conn.execute("SELECT data FROM events WHERE kind = 'process_exit'")
        if json.loads(r[0])["pid"] == victim.pid
    ]
    assert (exit_data["cause"], exit_data["exit_signal"]) == ("cgroup_oom_killed", 9)
    fired = [
        json.loads(r[0]) for r in conn.execute("SELECT data FROM events WHERE kind = 'alert_fired'")
    ]
    assert any(f"[{victim.pid}]" in (f.get("subject") or "") for f in fired)


def test_postmortem_without_a_crash_is_one_line(tmp_path: Path) -> None:
    from monitor.store.database import Store

    Store.open(tmp_path / "v.db").close()
    result = vramscope("postmortem", "--last", "--db", str(tmp_path / "v.db"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"vramscope: error: no crash or OOM kill recorded in {tmp_path / 'v.db'}"
    )
    missing = vramscope("postmortem", "--db", str(tmp_path / "none.db"))
    assert missing.returncode == 2 and "no database" in missing.stderr


# issue 29.4: two real servers in one real memory cgroup

HOLD = """
import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))   # join the memory cgroup first
open("/proc/self/oom_score_adj", "w").write("-900")  # the kernel picks the grower, not us
block = bytearray(40 * 1024 * 1024)
block[::4096] = b"\\x01" * (len(block) // 4096)
print("ready", flush=True)
time.sleep(600)
"""


def wait_for_cgroup_sampled(db: Path, pid: int, timeout_s: float = 60.0) -> None:
    """Until the daemon has stored ``pid``'s memory cgroup (migration m010)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute(
                "SELECT count(*) FROM process_cgroups c JOIN processes p ON p.id = c.process_id"
                " WHERE p.pid = ?",
                (pid,),
            ).fetchone()
        except sqlite3.OperationalError:  # the schema is not there yet
            row = (0,)
        finally:
            conn.close()
        if row[0] >= 3:
            return
        time.sleep(0.1)
    raise AssertionError(f"the daemon did not sample the cgroup of pid {pid} in {timeout_s} s")


@pytest.mark.slow
def test_a_real_cgroup_kill_names_both_servers_and_the_budget(
    tmp_path: Path, wait_for_ticks
) -> None:
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    group, procs = make_cgroup(128 * MIB)
    db = tmp_path / "v.db"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)  # looks like an inference server: tracked at once
    holder = None
    try:
        wait_for_ticks(db, 3)
        holder = subprocess.Popen(
            [str(exe), "-c", HOLD, str(procs), "-m", "/models/embd.gguf"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        wait_for_cgroup_sampled(db, holder.pid)
        victim = subprocess.Popen(
            [str(exe), "-c", GROW, str(procs), "-m", "/models/big.gguf"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert victim.stdout is not None and victim.stdout.readline().strip() == "ready"
        victim.wait(timeout=60)
        assert victim.returncode == -signal.SIGKILL
        wait_for_exit_recorded(db, victim.pid)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(timeout=30)
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=STOP_GUARD_S)
        group.rmdir()
    result = vramscope("postmortem", "--pid", str(victim.pid), "--json", "--db", str(db))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    budget = doc["cgroup_budget"]
    assert budget["cgroup"] == f"/{group.name}" and budget["limit_bytes"] == 128 * MIB
    members = {m["pid"]: m for m in budget["members"]}
    assert set(members) == {holder.pid, victim.pid}
    assert members[victim.pid]["victim"] and not members[holder.pid]["victim"]
    assert members[holder.pid]["name"] == "embd" and members[holder.pid]["anon_bytes"] >= 40 * MIB
    assert doc["cause"].startswith(f"In memory cgroup /{group.name}: ")
    assert "embd " in doc["cause"] and "big " in doc["cause"]
    # no model file here: the limit is the one fix, the sum of what both held
    minimum = budget["minimum_limit_bytes"]
    assert minimum >= members[holder.pid]["anon_bytes"] + members[victim.pid]["anon_bytes"]
    assert f"budget of /{group.name}" in doc["fix"]
