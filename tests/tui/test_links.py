"""tui/links.py: a router's links worked out once per process table, and again when the
table changes."""

from __future__ import annotations

import dataclasses

from fake_source import host, server, snap

from monitor.servers.router import snapshot_links
from tui.links import LinksMemo

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
