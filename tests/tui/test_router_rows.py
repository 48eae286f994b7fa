"""The TUI's models table groups a llama-server router's children under a row of its own.

The process tree is the recorded real run of tests/fixtures/llamacpp_router/README.md (the
router's argv, each child's argv from the router's ``GET /models``), at the moment both
children run (``b`` spawned, ``a`` not yet gone).
"""

from __future__ import annotations

import json
from pathlib import Path

from collectors.base import ProcessInfo, ProcessMemory, Snapshot
from tui.source import FrameBuilder
from tui.widgets.breakdown import Breakdown

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp_router"
BIN = "/work/main/.cache/llama.cpp/0.3.36/bin/llama-server"
ROUTER_ARGV = (BIN, "--models-dir", "/tmp/rt/m", "--models-max", "1", "--port", "18431")
ROUTER, CHILD_A, CHILD_B, OTHER = 27596, 27615, 27692, 4242
MIB = 1 << 20


def _child_argv(recording: str, model: str) -> tuple[str, ...]:
    doc = json.loads((FIXTURES / recording).read_text())
    return tuple(next(m for m in doc["data"] if m["id"] == model)["status"]["args"])


def _snapshot() -> Snapshot:
    argvs = {
        ROUTER: (1, ROUTER_ARGV),
        CHILD_A: (ROUTER, _child_argv("models_loaded_a.json", "a")),
        CHILD_B: (ROUTER, _child_argv("models_loaded_b.json", "b")),
        OTHER: (1, (BIN, "-m", "/srv/x.gguf", "--port", "8081")),
    }
    sizes = {ROUTER: 2 * MIB, CHILD_A: 20 * MIB, CHILD_B: 30 * MIB, OTHER: 25 * MIB}
    procs = tuple(
        ProcessInfo(pid, pid, None, ppid, 0, "llama-server", argv, "llama.cpp")
        for pid, (ppid, argv) in argvs.items()
    )
    memory = tuple(
        ProcessMemory(pid, "host", rss_anon_bytes=b, rss_file_bytes=0) for pid, b in sizes.items()
    )
    return Snapshot(1_000, (), procs, memory, (), (), ())


def test_the_router_row_heads_its_children_where_the_biggest_child_sorts() -> None:
    rows = FrameBuilder().build(_snapshot()).models
    assert [r.pid for r in rows] == [ROUTER, CHILD_B, CHILD_A, OTHER]
    router = rows[0]
    assert (router.role, router.model, router.flags) == (
        "router",
        "router :18431",
        ("2 loaded, max 1",),
    )
    assert (router.measured_bytes, router.estimate_bytes, router.launch) == (2 * MIB, None, None)
    assert rows[1].model.startswith("└ b · b.gguf") and rows[1].role == "server"
    assert rows[2].model.startswith("└ a · a.gguf")
    assert not rows[3].model.startswith("└")


def test_the_router_rows_breakdown_draws() -> None:
    (router,) = [r for r in FrameBuilder().build(_snapshot()).models if r.role == "router"]
    text = Breakdown.describe(router, 100).plain
    assert "router :18431" in text and f"pid {ROUTER}" in text


def test_without_a_router_the_rows_are_as_before() -> None:
    snap = _snapshot()
    plain = Snapshot(
        snap.ts_ms,
        (),
        tuple(p for p in snap.processes if p.pid == OTHER),
        tuple(m for m in snap.memory if m.pid == OTHER),
        (),
        (),
        (),
    )
    (row,) = FrameBuilder().build(plain).models
    assert (row.pid, row.role, row.model) == (OTHER, "server", "x.gguf")
