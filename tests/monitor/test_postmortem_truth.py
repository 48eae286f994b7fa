"""Post-mortems that tell the truth (issue 19), from real database files the store wrote:
titled by the real cause, the untracked victim named by the kernel record, memory at
death from before the collapse, and only live processes "loading at the time"."""

from __future__ import annotations

from pathlib import Path

from collectors.base import (
    DeviceEvent,
    DeviceSample,
    ExitedProcess,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
)
from monitor.analysis.postmortem import at_death_bytes, build
from monitor.report.postmortem import render_html, render_text
from monitor.store.database import Store

GIB = 1024**3
MIB = 1024**2
T0 = 1_800_000_000_000
HOST = DeviceSample("host", "procfs", "host", "Host RAM", "host", 64 * GIB, 20 * GIB,
                    available_bytes=44 * GIB)


def server(pid: int, comm: str = "llama-server") -> ProcessInfo:
    return ProcessInfo(pid, pid * 10, None, 1, 0, comm, (comm, "-m", "/models/x.gguf"),
                       "llama.cpp", ("inference",))


def tick(ts: int, procs: dict[int, int], events: tuple = (), exited: tuple = ()) -> Snapshot:
    return Snapshot(ts, (HOST,), tuple(server(p) for p in procs),
                    tuple(ProcessMemory(p, "host", rss_anon_bytes=b) for p, b in procs.items()),
                    (), exited, (), events)


def test_at_death_is_the_last_figure_before_the_collapse() -> None:
    pts = [[0, GIB], [500, int(1.01 * GIB)], [1000, 0]]  # the last one taken while dying
    assert at_death_bytes(pts) == int(1.01 * GIB)
    assert at_death_bytes([[0, 5 * GIB], [10_000, GIB]]) == GIB  # 10 s ago is not "at death"
    assert at_death_bytes([[0, 3]]) == 3


def test_a_crash_is_titled_crash_and_memory_at_death_is_before_the_collapse(
        tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    store = Store.open(db)
    ts = T0
    for _ in range(20):
        store.write(tick(ts, {100: int(1.01 * GIB)}))
        ts += 200
    store.write(tick(ts, {100: 0}))  # sampled while dying: its memory already unmapped
    gone = ExitedProcess(100, 1000, ts, "crashed (SIGSEGV)", comm="llama-server",
                         exit_signal=11, exit_source="connector", cause="crashed")
    store.write(tick(ts + 200, {}, exited=(gone,)))
    store.close()
    doc = build(db)
    assert doc["title"] == "crash post-mortem"
    assert doc["victim"]["at_death"] == {"host": int(1.01 * GIB)}
    assert doc["victim"]["last_measured"] == {"host": 0}  # the dying sample, shown as such
    text = render_text(doc, 100)
    assert text.startswith("crash post-mortem: llama-server (pid 100) died")
    assert "OOM" not in text.splitlines()[0]
    memory = next(line for line in text.splitlines() if line.strip().startswith("host"))
    assert "1.01 GiB" in memory or "1.0 GiB" in memory, memory
    assert "<h1>crash post-mortem: llama-server (pid 100) died</h1>" in render_html(doc)


def test_an_untracked_oom_victim_is_named_and_only_live_loads_are_listed(
        tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    store = Store.open(db)
    store.write(tick(T0, {200: GIB, 300: GIB}, events=(
        DeviceEvent(T0, "host", "load_started", "info", "llama-server[200] started loading",
                    {"pid": 200, "model": "big.gguf"}),
        DeviceEvent(T0, "host", "load_started", "info", "llama-server[300] started loading",
                    {"pid": 300}))))
    # 300 died mid-load a minute before the kill: its load is over
    gone = ExitedProcess(300, 3000, T0, comm="llama-server", exit_code=1,
                         exit_source="connector", cause="exited_error")
    store.write(tick(T0 + 1000, {200: 2 * GIB}, exited=(gone,)))
    kill = DeviceEvent(T0 + 60_000, "host", "oom_kill", "critical",
                       "Out of memory: Killed process 4242 (python3)",
                       {"pid": 4242, "comm": "python3", "constraint": "CONSTRAINT_NONE",
                        "anon_rss_kb": 30 * GIB // 1024})
    store.write(tick(T0 + 60_000, {200: 3 * GIB}, events=(kill,)))
    store.close()
    doc = build(db)
    assert doc["title"] == "OOM post-mortem"
    assert (doc["victim"]["pid"], doc["victim"]["comm"]) == (4242, "python3")
    assert [(x["pid"], x["comm"], x["model"]) for x in doc["loading"]] == [
        (200, "llama-server", "big.gguf")]
    text = render_text(doc, 100)
    assert text.startswith("OOM post-mortem: python3 (pid 4242) died")
    assert "host (pid" not in text and "None" not in text
    section = text.split("Loading at the time")[1].split("\n\n")[0]
    assert "pid 200 llama-server loading big.gguf" in section
    assert "pid 300" not in section
