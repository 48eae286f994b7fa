"""The post-mortem's typed model (monitor/analysis/postmortem_doc.py): assembled from a real
database file the store wrote, its ``to_json`` is the ``--json`` document, and
``from_json`` reads any document (hostile ones included) once, into typed fields."""

from __future__ import annotations

import json
import math
from pathlib import Path

from collectors.base import DeviceEvent, DeviceSample, ProcessInfo, ProcessMemory, Snapshot
from monitor.analysis.postmortem import build, build_model
from monitor.analysis.postmortem_doc import KernelRecord, PostMortem
from monitor.report.postmortem import render_html, render_svg, render_text
from monitor.store.database import Store

GIB = 1024**3
T0 = 1_800_000_000_000
HOST = DeviceSample(
    "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 20 * GIB, available_bytes=44 * GIB
)


def tick(ts: int, held: int, events: tuple[DeviceEvent, ...] = ()) -> Snapshot:
    proc = ProcessInfo(
        100, 1000, None, 1, 0, "llama-server", ("llama-server", "-m", "/m/x.gguf"), "llama.cpp", ()
    )
    memory = (ProcessMemory(100, "host", rss_anon_bytes=held),)
    return Snapshot(ts, (HOST,), (proc,), memory, (), (), (), events)


def kill(ts: int) -> DeviceEvent:
    data = {"pid": 100, "comm": "llama-server", "constraint": "CONSTRAINT_NONE"}
    data |= {"anon_rss_kb": 2 * GIB // 1024, "file_rss_kb": 4096}
    return DeviceEvent(ts, "host", "oom_kill", "critical", "Out of memory: Killed 100", data)


def oom_db(tmp_path: Path) -> Path:
    db = tmp_path / "v.db"
    store = Store.open(db)
    for i in range(5):
        store.write(tick(T0 + i * 1000, (i + 1) * GIB // 2))
    store.write(tick(T0 + 5000, 0, events=(kill(T0 + 5000),)))
    store.close()
    return db


def test_the_model_is_typed_and_its_json_is_the_document(tmp_path: Path) -> None:
    db = oom_db(tmp_path)
    pm = build_model(db, cgroup_version=2)
    doc = build(db, cgroup_version=2)
    assert isinstance(pm, PostMortem)
    assert isinstance(pm.victim.kernel, KernelRecord)
    assert pm.victim.kernel.anon_rss_bytes == 2 * GIB
    assert pm.victim.pid == 100 and pm.title == "OOM post-mortem"
    assert pm.death_ms == T0 + 5000
    assert [v for _, v in pm.processes[0].points][-2:] == [5 * GIB // 2, 0]
    # the same document, key for key and in the same order (what --json prints)
    assert json.dumps(pm.to_json()) == json.dumps(doc)
    assert list(doc) == [
        "schema", "title", "event", "victim", "window", "timeline", "loading", "estimate",
        "ceiling", "cause", "fix", "cgroup_budget", "other_events", "other_events_omitted",
        "other_events_omitted_kinds",
    ]  # fmt: skip
    # read back from its JSON text: the same model, the same document
    again = PostMortem.from_json(json.loads(json.dumps(doc)))
    assert json.dumps(again.to_json()) == json.dumps(doc)
    assert render_text(again, 100) == render_text(doc, 100) == render_text(pm, 100)
    assert render_html(again) == render_html(pm)


def test_from_json_reads_a_hostile_document_into_typed_fields() -> None:
    raw = {
        "victim": {
            "pid": "7",
            "comm": 5,
            "argv": "llama-server -m x",
            "kernel": {"anon_rss_bytes": math.nan, "memcg": ["x"], "constraint": True},
            "peak": {"host": "lots", "gpu": 3},
        },
        "event": {"ts_ms": math.inf, "kind": "oom_kill", "data": ["not", "a", "dict"]},
        "timeline": {
            "processes": [{"pid": 7.0, "points": [[3, 30], [1, -5], "x", [2], [2, None]]}],
            "devices": "nope",
        },
        "cgroup_budget": {"cgroup": "/a", "members": "nope"},
        "other_events_omitted_kinds": {"crash": "2"},
    }
    pm = PostMortem.from_json(raw)
    assert pm.victim.pid is None and pm.victim.comm == "5"
    assert pm.victim.argv == ("llama-server -m x",)
    assert pm.victim.kernel is not None
    assert (pm.victim.kernel.anon_rss_bytes, pm.victim.kernel.memcg) == (None, None)
    assert pm.victim.kernel.constraint is None
    assert dict(pm.victim.peak) == {"host": None, "gpu": 3}
    assert pm.event is not None and pm.event.ts_ms is None and dict(pm.event.data) == {}
    assert pm.death_ms is None
    assert pm.processes[0].pid == 7 and pm.processes[0].points == ((1, 0), (3, 30))
    assert pm.devices == ()
    assert pm.cgroup_budget is not None and pm.cgroup_budget.members is None
    assert dict(pm.other_events_omitted_kinds) == {"crash": None}
    for bad in (None, [], "x", 3, raw):
        assert "post-mortem" in render_text(bad, 80)
        assert render_svg(bad).startswith("<svg")
        assert render_html(bad).startswith("<!DOCTYPE html>")
