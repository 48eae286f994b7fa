"""tui/memo.py: a router's links worked out once per process table, and again when the
table changes."""

from __future__ import annotations

import dataclasses

from fake_source import host, server, snap

from monitor.servers.router import snapshot_links
from tui.memo import LinksMemo

GIB = 1024**3
ROUTER = ["llama-server", "--models-dir", "/tmp/rt/m", "--models-max", "2", "--port", "18431"]


def child(pid: int, model: str) -> object:
    info = server(pid, ["llama-server", "-m", f"/tmp/rt/m/{model}.gguf", "--port", str(pid)])
    return dataclasses.replace(info, ppid=9100)


def table(*children: object, ts: int = 0):  # noqa: ANN202
    return snap(ts, [host(64 * GIB, 32 * GIB)], [server(9100, ROUTER), *children], [])


def test_an_equal_table_is_not_parsed_again() -> None:
    """Noise: the same processes at later ticks (equal, newly built objects): the links
    are computed once and are what snapshot_links gives."""
    memo = LinksMemo()
    first = memo(table(child(9101, "a"), ts=1000))
    for ts in (2000, 3000, 4000):
        again = memo(table(child(9101, "a"), ts=ts))
        assert again == first
    assert memo.computed == 1
    assert first == snapshot_links(table(child(9101, "a")))
    routers, children = first
    assert set(routers) == {9100} and children[9101].router_pid == 9100


def test_a_new_child_or_command_line_is_linked_at_once() -> None:
    """Signal: a child that comes, or a changed command line, gives new links at the
    next call."""
    memo = LinksMemo()
    memo(table(child(9101, "a")))
    routers, children = memo(table(child(9101, "a"), child(9102, "b")))
    assert memo.computed == 2
    assert routers[9100].children == (9101, 9102) and children[9102].router_pid == 9100
    other = dataclasses.replace(server(9100, ROUTER), argv=("llama-server", "-m", "x.gguf"))
    routers, children = memo(snap(0, [], [other, child(9101, "a")], []))
    assert memo.computed == 3
    assert routers == {} and children == {}  # no router now: its former child is alone


def test_the_frame_builder_groups_with_the_memo() -> None:
    """The live frames use it: equal tables across frames parse once, and the router's
    row with its child under it is in every frame."""
    from tui.source import FrameBuilder

    builder = FrameBuilder()
    frames = [builder.build(table(child(9101, "a"), ts=ts)) for ts in (1000, 2000, 3000)]
    assert builder.links.computed == 1
    for frame in frames:
        assert [r.pid for r in frame.models][:1] == [9100], frame.models
    grown = builder.build(table(child(9101, "a"), child(9102, "b"), ts=4000))
    assert builder.links.computed == 2
    assert {r.pid for r in grown.models} >= {9100}


def _moved(s, pid: int, extra: int, ts: int):  # noqa: ANN001, ANN202
    """``s`` at ``ts`` with ``pid``'s VRAM ``extra`` bytes larger (equal rows otherwise)."""
    from collectors.base import ProcessMemory

    memory = tuple(
        dataclasses.replace(m, vram_bytes=m.vram_bytes + extra)
        if m.pid == pid and m.vram_bytes is not None
        else ProcessMemory(**{f.name: getattr(m, f.name) for f in dataclasses.fields(m)})
        for m in s.memory
    )
    return dataclasses.replace(s, ts_ms=ts, memory=memory)


def test_an_idle_server_is_judged_once(models) -> None:  # noqa: ANN001
    """Noise: equal memory rows (new objects) at later ticks: each server judged once,
    and every frame shows the same rows as the first."""
    from fake_source import discrete_three

    from tui.source import FrameBuilder

    builder = FrameBuilder()
    s = discrete_three(models, ticks=1)[0]
    first = builder.build(s)
    assert builder.judge.computed == 3
    for i in range(1, 4):
        again = builder.build(_moved(s, 0, 0, s.ts_ms + 1000 * i))
        assert again.models == first.models
    assert builder.judge.computed == 3


def test_a_server_whose_memory_moves_is_judged_again_at_once(models) -> None:  # noqa: ANN001
    """Signal: one server's VRAM grows by 6 GiB: that server (only) is judged again in the
    next frame, with its new measured figure and a verdict that follows it; a server
    that goes is forgotten."""
    from fake_source import discrete_three

    from tui.source import FrameBuilder

    builder = FrameBuilder()
    s = discrete_three(models, ticks=1)[0]
    before = {r.pid: r for r in builder.build(s).models}
    grown = _moved(s, 4102, 6 * GIB, s.ts_ms + 1000)
    after = {r.pid: r for r in builder.build(grown).models}
    assert builder.judge.computed == 4
    assert after[4102].measured_bytes == before[4102].measured_bytes + 6 * GIB
    assert after[4101] == before[4101] and after[4103] == before[4103]
    fresh = {r.pid: r for r in FrameBuilder().build(grown).models}  # judged from scratch

    def verdicts(rows: dict) -> dict:
        return {
            pid: (r.measured_bytes, r.flags, r.assessment.measured, r.assessment.diagnosis)
            for pid, r in rows.items()
        }

    assert verdicts(after) == verdicts(fresh)
    assert after[4102].assessment.diagnosis != before[4102].assessment.diagnosis
    gone = dataclasses.replace(
        grown, processes=tuple(p for p in grown.processes if p.pid != 4103), ts_ms=grown.ts_ms + 1
    )
    builder.build(gone)
    assert set(builder.judge._last) == {4101, 4102}
