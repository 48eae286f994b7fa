"""The live TUI on a box that churns llama-servers (issue 32 item 3, tui/churn.py): a
server seen in one tick only costs no row, no estimate and no event line (so the models
table and the events pane are not rebuilt); a server that lives on shows from its second
tick, one already running at the first tick at once, and their exits stay events. Real
processes (tests/fakes/fake_server.py) on the real /proc; only our own pids are looked
at, so other servers on the box change nothing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fake_server import running

from collectors.base import Roots
from tui.churn import ChurnGate
from tui.source import LiveSource


def _server(model: str, port: int) -> Any:
    return running(["llama-server", "-m", model, "-c", "512", "--port", str(port)])


def _counting(source: LiveSource) -> list[int]:
    """The pids the builder assesses (its real ``assess``, counted)."""
    calls: list[int] = []
    real = source.builder.assess

    def assess(info: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(info.pid)
        return real(info, *args, **kwargs)

    source.builder.assess = assess  # type: ignore[method-assign]
    return calls


def _pids(frame: Any) -> set[int]:
    return {r.pid for r in frame.models}


def _exits(frame: Any, pid: int) -> list[Any]:
    return [e for e in frame.events if e.kind == "exit" and e.subject == f"pid {pid}"]


def test_one_tick_servers_cost_no_row_estimate_or_event(models: dict[str, str]) -> None:
    model = models["qwen3-8b-q8_0.gguf"]
    source = LiveSource(Roots(), ["procfs"])
    calls = _counting(source)
    try:
        with _server(model, 29101) as steady:
            frame = source.latest()
            assert steady.pid in _pids(frame)  # running at the first tick: shown
            for port in (29102, 29103, 29104):
                with _server(model, port) as brief:
                    frame = source.latest()  # its only tick
                    assert brief.pid not in _pids(frame)
                frame = source.latest()  # it is gone: its exit is counted, not listed
                assert brief.pid not in calls
                assert _exits(frame, brief.pid) == []
            assert _pids(frame) >= {steady.pid}
            # ours are counted; another server on this box that lived one tick may be too
            # (the exact count is test_a_one_tick_gpu_holder_or_a_crash_is_never_hidden's)
            assert source._gate.short_lived >= 3
            assert calls.count(steady.pid) == 7  # one row each frame (its estimate is cached)
    finally:
        source.close()


def test_a_server_that_lives_on_shows_from_its_second_tick(models: dict[str, str]) -> None:
    model = models["qwen3-8b-q8_0.gguf"]
    source = LiveSource(Roots(), ["procfs"])
    try:
        source.latest()
        with _server(model, 29111) as server:
            assert server.pid not in _pids(source.latest())
            frame = source.latest()
            assert server.pid in _pids(frame)
            row = next(r for r in frame.models if r.pid == server.pid)
            assert row.estimate is not None  # assessed as before
        frame = source.latest()
        assert len(_exits(frame, server.pid)) == 1  # a server seen twice: its exit is news
    finally:
        source.close()


def test_a_one_tick_gpu_holder_or_a_crash_is_never_hidden() -> None:
    steady = SimpleNamespace(pid=1, start_ticks=10, engine="llama.cpp")
    on_gpu = SimpleNamespace(pid=2, start_ticks=20, engine="llama.cpp")
    quiet = SimpleNamespace(pid=3, start_ticks=30, engine="llama.cpp")
    other = SimpleNamespace(pid=4, start_ticks=40, engine=None)
    gate = ChurnGate(previous=frozenset({(1, 10)}), before=frozenset())
    assert not gate.first_tick(on_gpu, frozenset({2}))  # on a GPU: shown at once
    assert not gate.first_tick(other, frozenset())  # not a server: no row to hold back
    assert not gate.first_tick(steady, frozenset())
    assert gate.first_tick(quiet, frozenset({2}))
    gate = ChurnGate(
        previous=frozenset({(1, 10), (2, 20), (3, 30)}),
        before=frozenset({(1, 10)}),
        previous_holders=frozenset({2}),
    )
    assert not gate.hides_exit(on_gpu, "info")
    assert not gate.hides_exit(quiet, "critical")  # a crash or OOM kill alerts
    assert not gate.hides_exit(quiet, "warning")
    assert gate.hides_exit(quiet, "info")
    assert not gate.hides_exit(steady, "info")  # seen in two ticks
    assert gate.short_lived == 1


def test_the_first_ticks_hide_nothing() -> None:
    gone = SimpleNamespace(pid=5, start_ticks=50, engine="llama.cpp")
    gate = ChurnGate()
    assert not gate.first_tick(gone, frozenset())
    assert not gate.hides_exit(gone, "info")
    gate = ChurnGate(previous=frozenset({(5, 50)}))  # one tick so far
    assert not gate.hides_exit(gone, "info")  # no tick before the first: not known as brief
