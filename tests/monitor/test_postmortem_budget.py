"""Post-mortems that fit the budget (issue 29 point 4), from real database files the store
wrote and real kernel log lines: the members of the killed cgroup, the cause and the fixes
in terms of its limit, "last seen" that is a measurement, and a report of bounded size."""

from __future__ import annotations

from pathlib import Path

from collectors.base import DeviceEvent, DeviceSample, ProcessInfo, ProcessMemory, Snapshot
from monitor.analysis.postmortem import build
from monitor.report.postmortem import render_html, render_text
from monitor.store.database import Store

GIB = 1024**3
MIB = 1024**2
T0 = 1_800_000_000_000
HOST = DeviceSample(
    "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 20 * GIB, available_bytes=44 * GIB
)


def server(pid: int, comm: str = "llama-server") -> ProcessInfo:
    return ProcessInfo(
        pid, pid * 10, None, 1, 0, comm, (comm, "-m", "/models/x.gguf"), "llama.cpp", ("inference",)
    )


def tick(ts: int, procs: dict[int, int], events: tuple = ()) -> Snapshot:
    return Snapshot(
        ts,
        (HOST,),
        tuple(server(p) for p in procs),
        tuple(ProcessMemory(p, "host", rss_anon_bytes=b) for p, b in procs.items()),
        (),
        (),
        (),
        events,
    )


def kill_event(ts: int, pid: int, anon_kb: int = GIB // 1024) -> DeviceEvent:
    return DeviceEvent(
        ts,
        "host",
        "oom_kill",
        "critical",
        f"Out of memory: Killed process {pid} (llama-server)",
        {
            "pid": pid,
            "comm": "llama-server",
            "constraint": "CONSTRAINT_NONE",
            "anon_rss_kb": anon_kb,
        },
    )


def test_last_seen_is_the_last_nonzero_measurement(tmp_path: Path) -> None:
    """Issue 29.4 point 4: "last seen 0 B" beside "2.4 GiB measured just before it died";
    the samples taken while it died read 0, and "last seen" is the last nonzero one."""
    db = tmp_path / "v.db"
    store = Store.open(db)
    ts = T0
    for _ in range(5):
        store.write(tick(ts, {100: int(2.4 * GIB)}))
        ts += 1000
    store.write(tick(ts, {100: 0}))  # sampled while dying: already unmapped
    store.write(tick(ts + 1000, {100: 0}, events=(kill_event(ts + 1000, 100),)))
    store.close()
    doc = build(db)
    assert doc["victim"]["last_measured"] == {"host": int(2.4 * GIB)}
    row = next(line for line in render_text(doc, 100).splitlines() if line.startswith("  host"))
    assert "0 B" not in row and row.count("2.40 GiB") >= 2, row


def test_the_events_of_the_window_are_capped(tmp_path: Path) -> None:
    """Issue 29.4 point 5: a window with 10,000 events gave a 12,621-line report; at most
    50 are shown, the nearest the death, then "and N more" by kind."""
    db = tmp_path / "v.db"
    store = Store.open(db)
    for chunk in range(10):
        noise = tuple(
            DeviceEvent(
                T0 + chunk * 1000 + i // 100,
                "host",
                "log_line",
                "info",
                f"slot update_slots: id 0 | task {chunk * 1000 + i} | noise",
                {"pid": 100},
            )
            for i in range(1000)
        )
        store.write(tick(T0 + chunk * 1000, {100: GIB}, events=noise))
    store.write(tick(T0 + 20_000, {100: GIB}, events=(kill_event(T0 + 20_000, 100),)))
    store.close()
    doc = build(db)
    assert len(doc["other_events"]) == 50
    assert doc["other_events_omitted"] == 9950
    text = render_text(doc, 100)
    assert len(text.splitlines()) < 400, len(text.splitlines())
    assert "and 9950 more (9950 log_line)." in text
    html = render_html(doc)
    assert len(html) < 200_000, len(html)
    assert "and 9950 more" in html
    # an older document with every event in it is capped by the renderer too
    doc["other_events"] = [
        {"ts_ms": T0 + i, "kind": "log_line", "message": "x"} for i in range(10_000)
    ]
    doc.pop("other_events_omitted")
    assert len(render_text(doc, 100).splitlines()) < 400
