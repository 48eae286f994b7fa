"""The TUI events pane groups a crash as ``vramscope events`` does (issue 34): the crash
one row, the process_exit, the kernel's oom_kill naming its pid and the oom_invoked line
of that kill beneath it; another process's kill stays a row of its own (noise case)."""

from __future__ import annotations

import dataclasses

import pytest
from fake_source import T0, FakeSource, long_named, two_gpus_twelve
from pilot_helpers import settle, sync

from tui.app import VramscopeApp
from tui.source import EventRow
from tui.widgets.events_pane import EventsPane


@pytest.fixture(scope="module")
def long_files(models, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # noqa: ANN001
    return long_named(models, tmp_path_factory.mktemp("long"))


def crash_events() -> list[EventRow]:
    killed = {"pid": 6101, "start_ticks": 77, "cause": "oom_killed", "comm": "llama-server"}
    t = T0 - 120_000
    return [
        EventRow(t, "crash", "critical", "llama-server[6101]",
                 "llama-server (pid 6101) killed by the kernel OOM killer", killed),
        EventRow(t + 400, "oom_invoked", "warning", "host", "python invoked oom-killer",
                 {"pid": None}),
        EventRow(t + 500, "oom_kill", "critical", "host",
                 "Out of memory: Killed process 6101 (llama-server)", {"pid": 6101}),
        EventRow(t + 900, "process_exit", "critical", "llama-server[6101]",
                 "llama-server (pid 6101) killed by the kernel OOM killer", killed),
        EventRow(t + 60_000, "oom_kill", "critical", "host",
                 "Out of memory: Killed process 4321 (python3)", {"pid": 4321}),
    ]  # fmt: skip


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
@sync
async def test_one_crash_is_one_row_with_its_evidence(long_files, size) -> None:  # noqa: ANN001
    source = FakeSource(two_gpus_twelve(long_files), crash_events())
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        pane = app.screen.query_one(EventsPane)
        assert pane.row_count == 2  # the crash (4 events) and the other process's kill
        other, crash = (pane.get_row_at(i) for i in range(2))  # newest first
        assert str(other[1]).endswith("oom_kill") and "4321" in other[-1].plain
        assert str(crash[1]).endswith("crash")
        lines = crash[-1].plain.split("\n")
        assert lines[0] == "llama-server (pid 6101) killed by the kernel OOM killer"
        assert [x.split()[2] for x in lines[1:]] == ["oom_invoked", "oom_kill", "process_exit"]
        assert all(x.startswith("└ ") for x in lines[1:])
        assert "4321" not in crash[-1].plain  # not folded in: another pid
        row = pane.rows[next(k for i, k in enumerate(pane.rows) if i == 1)]
        assert row.height >= 4  # the evidence is drawn, not cut to one line


def test_a_remote_events_data_that_is_not_an_object_groups_nothing() -> None:
    """A remote daemon's events are untrusted: ``data`` a list or a string is no join."""
    from tui.widgets.events_pane import crashes_whole

    bad = ([1], "x", 3, [], None)
    rows = [dataclasses.replace(e, data=b) for e, b in zip(crash_events(), bad, strict=True)]
    assert [len(ev) for _, ev in crashes_whole(rows)] == [0] * 5
    assert [len(ev) for _, ev in crashes_whole(crash_events())] == [0, 3]  # the real join
