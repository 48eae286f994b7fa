"""SVG snapshots at a fixed size, time zone and data (the frames carry their own clock).

Regenerate with ``pytest tests/tui/test_snapshots.py --snapshot-update`` after a change
that is meant to alter the picture, and look at the SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_source import EVENTS, FakeSource, discrete_three, full_gpu, gb10, no_gpu, strix_halo

from tui.app import VramscopeApp

pytest.importorskip("pytest_textual_snapshot")

SIZE = (120, 40)


def _table_layout(app) -> tuple:  # noqa: ANN001
    """Every DataTable's column widths and virtual size: what DataTable sets on idle."""
    from textual.widgets import DataTable

    return tuple(
        (
            tuple((c.width, c.content_width) for c in table.columns.values()),
            tuple(table.virtual_size),
            table.row_count,
        )
        for table in app.screen.query(DataTable)
    )


async def settle(pilot) -> None:  # noqa: ANN001
    """Workers done, then idle until DataTable's column widths (set on idle) hold still
    for three pauses in a row: a busy box's slow idle cannot catch them half set."""
    for _ in range(2):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
    still, last = 0, None
    for _ in range(200):  # a hang guard: at most 200 pauses of 0.05 s
        await pilot.pause(0.05)
        now = _table_layout(pilot.app)
        still = still + 1 if now == last else 0
        last = now
        if still >= 3:
            break
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


@pytest.fixture(scope="module", autouse=True)
def _warm_up(models) -> None:  # noqa: ANN001
    """Run one app first: the first app of a process draws DataTable headers with other
    style runs (same look, different SVG), which would make the first snapshot depend on
    which test happens to run first."""
    import asyncio

    async def run() -> None:
        app = app_for(discrete_three(models))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)

    asyncio.run(run())


def app_for(snaps, events=EVENTS) -> VramscopeApp:  # noqa: ANN001
    return VramscopeApp(FakeSource(snaps, events), refresh_s=None, clock=lambda: 0)


def test_discrete_gpu_with_three_models(snap_compare, models) -> None:
    """A 24 GiB GPU shared by three llama-servers, with estimate markers and flags."""
    assert snap_compare(app_for(discrete_three(models)), terminal_size=SIZE, run_before=settle)


def test_strix_halo_apu(snap_compare, models) -> None:
    """A unified AMD APU: carve-out, GTT and host RAM shown apart."""
    assert snap_compare(app_for(strix_halo(models), ()), terminal_size=SIZE, run_before=settle)


def test_gb10(snap_compare, models) -> None:
    """NVIDIA GB10: one unified pool bounded by the host's MemAvailable."""
    assert snap_compare(app_for(gb10(models), ()), terminal_size=SIZE, run_before=settle)


def test_no_gpu_at_all(snap_compare) -> None:
    """Only host RAM: no models table rows, still a readable screen."""
    assert snap_compare(app_for(no_gpu(), ()), terminal_size=SIZE, run_before=settle)


def test_oom_predicted(snap_compare, models, monkeypatch: pytest.MonkeyPatch) -> None:
    """The what-if dialog: an 8B Q8_0 at -c 32768 -np 4 on a nearly full 16 GiB GPU."""
    monkeypatch.chdir(Path(models["qwen3-8b-q8_0.gguf"]).parent)  # a path free of tmp names

    async def run_before(pilot) -> None:  # noqa: ANN001
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        pilot.app.screen.query_one(
            "#command"
        ).value = "llama-server -m qwen3-8b-q8_0.gguf -c 32768 -np 4"
        await pilot.press("enter")
        await settle(pilot)

    assert snap_compare(app_for(full_gpu(models), ()), terminal_size=SIZE, run_before=run_before)


def test_main_screen_at_80x24(snap_compare, models) -> None:
    """The smallest supported terminal."""
    assert snap_compare(app_for(discrete_three(models)), terminal_size=(80, 24), run_before=settle)
