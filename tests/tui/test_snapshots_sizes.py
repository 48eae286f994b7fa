"""SVG snapshots of every main screen at the smallest and a large terminal (issue 34):
2 GPUs, 12 models with long names, wrapped events; main, history, help and what-if at
80x24 and 200x50 (fixed clock, zone and data). Regenerate with ``--snapshot-update`` and
look at the SVGs before committing them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_source import LONG_EVENTS, FakeSource, long_named, two_gpus_twelve
from test_snapshots import settle

from tui.app import VramscopeApp

pytest.importorskip("pytest_textual_snapshot")

SIZES = [(80, 24), (200, 50)]


@pytest.fixture(scope="module")
def long_files(models, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # noqa: ANN001
    return long_named(models, tmp_path_factory.mktemp("long"))


@pytest.fixture(scope="module", autouse=True)
def _warm_up(long_files) -> None:  # noqa: ANN001
    """One app first (see test_snapshots._warm_up: the first app of a process draws its
    DataTable headers with other style runs)."""
    import asyncio

    async def run() -> None:
        async with app_for(long_files).run_test(size=SIZES[0]) as pilot:
            await settle(pilot)

    asyncio.run(run())


def app_for(files: dict[str, str]) -> VramscopeApp:
    return VramscopeApp(
        FakeSource(two_gpus_twelve(files), LONG_EVENTS), refresh_s=None, clock=lambda: 0
    )


def keys_then_settle(*keys: str):  # noqa: ANN201
    async def run_before(pilot) -> None:  # noqa: ANN001
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x50"])
def test_main(snap_compare, long_files, size) -> None:  # noqa: ANN001
    assert snap_compare(app_for(long_files), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x50"])
def test_history(snap_compare, long_files, size) -> None:  # noqa: ANN001
    assert snap_compare(app_for(long_files), terminal_size=size, run_before=keys_then_settle("h"))


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x50"])
def test_help(snap_compare, long_files, size) -> None:  # noqa: ANN001
    run = keys_then_settle("question_mark")
    assert snap_compare(app_for(long_files), terminal_size=size, run_before=run)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x50"])
def test_whatif(snap_compare, long_files, size, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """A what-if with one more long-named model, -c 32768 -np 4, on the two GPUs."""
    name = sorted(long_files)[0]
    monkeypatch.chdir(Path(long_files[name]).parent)  # a path free of tmp names

    async def run_before(pilot) -> None:  # noqa: ANN001
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        pilot.app.screen.query_one("#command").value = f"llama-server -m {name} -c 32768 -np 4"
        await pilot.press("enter")
        await settle(pilot)

    assert snap_compare(app_for(long_files), terminal_size=size, run_before=run_before)
