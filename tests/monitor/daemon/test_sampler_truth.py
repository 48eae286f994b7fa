"""What vramscope says about real server processes is true (issue 16, items 5, 9, 10).

The processes are real: tests/fakes/fake_server.py starts Python processes whose
``/proc/PID/cmdline`` reads exactly ``llama-server -m x.gguf`` (and ``comm`` is
``llama-server``), in a directory of the test's choosing, with a forked helper or an
unreaped (zombie) child when asked. The models are real small GGUF files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cli_runner
import fake_server
import jsonschema
import pytest
import tiny_models

from collectors.base import Roots
from monitor.daemon.sampler import Sampler
from tui.source import FrameBuilder

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())


vramscope = cli_runner.vramscope


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    tiny_models.write_llama(folder / "x.gguf")
    return folder


def sample_procfs():
    sampler = Sampler(Roots(), enabled=["procfs"], timeout_s=None)
    try:
        return sampler.sample()
    finally:
        sampler.close()


# -- item 5: relative model paths resolve against the server's working directory ------------


def test_resolve_paths_joins_every_relative_model_file_to_the_cwd() -> None:
    from monitor.servers.spec import LaunchSpec, resolve_paths

    spec = LaunchSpec(
        engine="llama.cpp",
        model_path="x.gguf",
        draft_model="d/draft.gguf",
        mmproj="mm.gguf",
        lora=("a.gguf", "/abs/b.gguf"),
    )
    got = resolve_paths(spec, "/srv/models")
    assert (got.model_path, got.draft_model, got.mmproj, got.lora) == (
        "/srv/models/x.gguf",
        "/srv/models/d/draft.gguf",
        "/srv/models/mm.gguf",
        ("/srv/models/a.gguf", "/abs/b.gguf"),
    )
    assert resolve_paths(spec, None) is spec  # unknown cwd: left as given
    hub = LaunchSpec(engine="vllm", model_path="Qwen/Qwen3-8B")
    assert resolve_paths(hub, "/srv") is hub  # a hub id is not a file


def test_a_server_started_in_its_models_folder_is_resolved_in_status_estimate_and_tui(
    models: Path,
) -> None:
    argv = ["llama-server", "-m", "x.gguf", "-c", "512", "-np", "1"]
    with fake_server.running(argv, cwd=models) as server:
        status = vramscope("status", "--json")
        estimate = vramscope("estimate", "--json", "--cpu-only", "--pid", str(server.pid))
        snap = sample_procfs()
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    jsonschema.validate(doc, SCHEMA)
    (row,) = [p for p in doc["processes"] if p["pid"] == server.pid]
    assert row["cwd"] == str(models)
    assert row["model_path"] == str(models / "x.gguf")
    assert estimate.returncode == 0, estimate.stderr
    est = json.loads(estimate.stdout)
    assert est["model_path"] == str(models / "x.gguf") and est["context"]["cells"] == 512
    frame = FrameBuilder().build(snap)
    (model_row,) = [r for r in frame.models if r.pid == server.pid]
    assert model_row.estimate_bytes is not None and "unknown model" not in model_row.flags


def test_llama_arg_model_in_the_environment_resolves_against_the_cwd_too(models: Path) -> None:
    with fake_server.running(
        ["llama-server", "-c", "256"], cwd=models, env={"LLAMA_ARG_MODEL": "x.gguf"}
    ) as server:
        status = vramscope("status", "--json")
        estimate = vramscope("estimate", "--json", "--cpu-only", "--pid", str(server.pid))
    assert estimate.returncode == 0, estimate.stderr
    assert json.loads(estimate.stdout)["model_path"] == str(models / "x.gguf")
    (row,) = [p for p in json.loads(status.stdout)["processes"] if p["pid"] == server.pid]
    assert row["model_path"] == str(models / "x.gguf")


def test_capture_records_the_cwd_link_and_the_tree_replays_resolved(
    models: Path, tmp_path: Path
) -> None:
    from monitor.cli.capture import capture

    with fake_server.running(["llama-server", "-m", "x.gguf"], cwd=models) as server:
        capture(Roots(), tmp_path / "cap", enabled=["procfs"], nvml=False)
    link = tmp_path / "cap" / "proc" / str(server.pid) / "cwd"
    assert link.is_symlink() and os.readlink(link) == str(models)
    sampler = Sampler(
        Roots(proc=tmp_path / "cap" / "proc", sys=tmp_path / "cap" / "sys"),
        enabled=["procfs"],
        timeout_s=None,
    )
    try:
        replayed = sampler.sample()
    finally:
        sampler.close()
    (info,) = [p for p in replayed.processes if p.pid == server.pid]
    assert info.cwd == str(models)


# -- item 9: a server's forked child with the same command line is its helper -----------------


def test_a_forked_child_is_the_servers_helper_not_a_second_server(models: Path) -> None:
    argv = ["llama-server", "-m", "x.gguf", "-c", "512", "-np", "1"]
    with fake_server.running(argv, cwd=models, child="sleep") as server:
        snap = sample_procfs()
        status = vramscope("status", "--json")
        text = vramscope("status")
        diag = vramscope("diagnose", "--json")
    pids = {p.pid for p in snap.processes}
    assert {server.pid, server.child_pid} <= pids  # both really seen, same argv
    frame = FrameBuilder().build(snap)
    rows = [r for r in frame.models if r.pid in (server.pid, server.child_pid)]
    assert [r.pid for r in rows] == [server.pid]  # one server row, with one estimate
    doc = json.loads(status.stdout)
    jsonschema.validate(doc, SCHEMA)
    by_pid = {p["pid"]: p for p in doc["processes"]}
    assert by_pid[server.child_pid]["helper_of"] == server.pid
    assert by_pid[server.pid]["helper_of"] is None
    child_line = next(
        ln for ln in text.stdout.splitlines() if ln.startswith(f"{server.child_pid} ")
    )
    assert f"helper of {server.pid}" in child_line
    assert diag.returncode == 0, diag.stderr
    assert [
        d["pid"] for d in json.loads(diag.stdout) if d["pid"] in (server.pid, server.child_pid)
    ] == [server.pid]


def test_a_helpers_gpu_memory_is_added_to_its_server() -> None:
    from collectors.base import ProcessInfo, ProcessMemory, Snapshot
    from monitor.servers.recognise import helper_parents

    argv = ("llama-server", "-m", "/m/x.gguf")
    server = ProcessInfo(100, 1, None, 1, 0, "llama-server", argv, "llama.cpp")
    helper = ProcessInfo(101, 2, None, 100, 0, "llama-server", argv, "llama.cpp")
    other = ProcessInfo(102, 3, None, 100, 0, "llama-server", argv + ("-c", "8"), "llama.cpp")
    assert helper_parents({p.pid: p for p in (server, helper, other)}) == {101: 100}
    snap = Snapshot(
        0,
        (),
        (server, helper),
        (
            ProcessMemory(100, "nvml:GPU-0", vram_bytes=5 << 30),
            ProcessMemory(101, "nvml:GPU-0", vram_bytes=1 << 30),
        ),
        (),
        (),
        (),
    )
    frame = FrameBuilder(read_header=lambda _p: (_ for _ in ()).throw(OSError("no file"))).build(
        snap
    )
    (row,) = frame.models
    assert (row.pid, row.measured_bytes) == (100, 6 << 30)


# -- item 10: an exited but unreaped server (a zombie) is shown as exited ---------------------


def test_a_zombie_server_is_exited_with_its_state_and_exit_code(models: Path) -> None:
    argv = ["llama-server", "-m", "x.gguf"]
    with fake_server.running(argv, cwd=models, child=3) as server:
        stat = Path(f"/proc/{server.child_pid}/stat").read_bytes()
        assert stat[stat.rfind(b")") + 2 :].split()[0] == b"Z"  # really a zombie
        status = vramscope("status", "--json")
        text = vramscope("status")
    doc = json.loads(status.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert server.child_pid not in {p["pid"] for p in doc["processes"]}
    (gone,) = [x for x in doc["exited"] if x["pid"] == server.child_pid]
    assert (gone["state"], gone["exit_code"], gone["exit_signal"]) == ("Z", 3, None)
    assert server.pid in {p["pid"] for p in doc["processes"]}  # the parent is alive
    line = next(ln for ln in text.stdout.splitlines() if f"pid {server.child_pid}" in ln)
    assert "exited with code 3" in line and "state Z" in line


def test_a_crashed_zombie_is_called_a_crash_in_status_and_the_live_tui(models: Path) -> None:
    """Issue 19: live views showed the collector's 'killed by signal 11' (and the TUI made
    every zombie a warning, every other exit info); they now show the exit's class."""
    from tui.source import events_from_snapshot

    argv = ["llama-server", "-m", "x.gguf"]
    with fake_server.running(argv, cwd=models, child="segv") as server:
        status = vramscope("status", "--json")
        text = vramscope("status")
        sampler = Sampler(Roots(), enabled=["procfs"], timeout_s=None)
        try:
            snap = sampler.sample()
        finally:
            sampler.close()
    doc = json.loads(status.stdout)
    jsonschema.validate(doc, SCHEMA)
    (gone,) = [x for x in doc["exited"] if x["pid"] == server.child_pid]
    assert (gone["exit_signal"], gone["cause"]) == (11, "crashed")
    assert gone["how"].startswith("crashed (SIGSEGV)")
    line = next(ln for ln in text.stdout.splitlines() if f"pid {server.child_pid}" in ln)
    assert "crashed (SIGSEGV)" in line and "state Z" in line
    rows = [r for r in events_from_snapshot(snap) if r.subject == f"pid {server.child_pid}"]
    assert rows, "the first tick of a sampler reports the zombie as an exit"
    assert rows[0].severity == "critical" and "crashed (SIGSEGV)" in rows[0].message


def test_the_daemon_marks_a_server_that_became_a_zombie_exited(
    models: Path, tmp_path: Path, wait_for_ticks, stop_with_sigterm
) -> None:
    """A llama-server the daemon tracks while it lives, then killed (SIGTERM) and left
    unreaped by its parent: its row in the processes table gets exited_ms, and the exit
    event says what /proc showed."""
    import signal
    import sqlite3
    import time

    db = tmp_path / "v.db"
    argv = ["llama-server", "-m", "x.gguf"]
    with fake_server.running(argv, cwd=models, child="sleep") as server:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for_ticks(db, 2)

            def row() -> tuple | None:
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
                try:
                    return conn.execute(
                        "SELECT exited_ms FROM processes WHERE pid = ?", (server.child_pid,)
                    ).fetchone()
                finally:
                    conn.close()

            deadline = time.monotonic() + 60
            while row() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert row() == (None,)  # tracked, alive
            os.kill(server.child_pid, signal.SIGTERM)  # dies; the parent never waits
            while row() == (None,) and time.monotonic() < deadline:
                time.sleep(0.05)
            stat = Path(f"/proc/{server.child_pid}/stat").read_bytes()
            assert stat[stat.rfind(b")") + 2 :].split()[0] == b"Z"  # still a zombie
        finally:
            stop_with_sigterm(daemon)
    (exited_ms,) = row()
    assert exited_ms is not None
    conn = sqlite3.connect(db)
    (message,) = conn.execute(
        "SELECT message FROM events WHERE kind = 'process_exit' AND subject LIKE ?",
        (f"%[{server.child_pid}]",),
    ).fetchone()
    conn.close()
    assert "stopped (SIGTERM)" in message and "state Z" in message
