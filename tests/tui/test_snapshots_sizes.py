"""SVG snapshots of every main screen at the smallest and a large terminal (issue 34):
2 GPUs, 12 models with long names, wrapped events; main, history, help and what-if at
80x24 and 200x50 (fixed clock, zone and data). Regenerate with ``--snapshot-update`` and
look at the SVGs before committing them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_source import LONG_EVENTS, FakeSource, long_named, two_gpus_twelve
from test_snapshots import settle
from textual.widgets import DataTable

from monitor.api import BoxRow
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


BOXES = [
    "http://gpu-box-rack3-node07.inference.example.internal:8765",
    "http://strix-halo-living-room.lan:8765",
    "http://127.0.0.1:1",  # nobody listens: an unreachable box
    "http://dgx-spark-01.research-cluster.example.org:8765",
]


class Box:
    """A box of the ``--remote`` fleet: the main screens' 2 GPUs and 12 long-named
    models, or a refused connection (the RemoteSource interface the fleet reads)."""

    def __init__(self, url: str, files: dict[str, str] | None) -> None:
        self.url = url
        self.source = FakeSource(two_gpus_twelve(files), LONG_EVENTS) if files else None

    def latest(self):  # noqa: ANN201
        if self.source is None:
            raise ConnectionRefusedError(111, "Connection refused")
        return self.source.latest()


class Prometheus:
    """What monitor.http.prometheus.PrometheusFleet answers (its rows), read from a real
    Prometheus in tests/tui/test_prometheus_fleet.py."""

    url = "http://prometheus.monitoring.example.internal:9090"

    def rows(self) -> list[BoxRow]:
        devices = "GPU0 RTX 4090 19.3G/24.0G, GPU1 RTX 4090 21.7G/24.0G, host RAM 38G/128G"
        alerts = ("GPU1 RTX 4090 memory above 85% for 60 s",)
        return [
            BoxRow(BOXES[0], devices, 12, int(2.3 * 2**30), "GPU1 RTX 4090", alerts, None, 5400.0),
            BoxRow(BOXES[1], "GPU0 Strix Halo 61.0G/96.0G", 3, 35 * 2**30, "GPU0 Strix Halo"),
            BoxRow(BOXES[2], error="Prometheus target down: connection refused"),
            BoxRow(BOXES[3], "GPU0 GB10 88.0G/119.7G", 5, 31 * 2**30, "GPU0 GB10", (), None, 9e4),
        ]  # fmt: skip


def fleet_app(files: dict[str, str]) -> VramscopeApp:
    boxes = [Box(url, None if i == 2 else files) for i, url in enumerate(BOXES)]
    return VramscopeApp(boxes[0], refresh_s=None, clock=lambda: 0, fleet=boxes)  # type: ignore[arg-type]


async def fleet_ready(pilot) -> None:  # noqa: ANN001
    screen = pilot.app.screen
    for _ in range(200):  # a hang guard: every box answered (each on its own thread)
        await pilot.pause(0.05)
        if screen.rows and all(r is not None for r in screen.rows):
            break
    await settle(pilot)


def alerts_and_state_on_screen(app: VramscopeApp, width: int) -> None:
    table = app.screen.query_one("#fleet", DataTable)
    header = table.render_line(0).text
    assert "state" in header and header.rstrip().endswith("alerts"), header
    assert header.index("alerts") <= width - 14  # the alerts column has room on screen
    down = next(i for i, u in enumerate(BOXES) if u.endswith(":1"))
    assert "refused" in str(table.get_row_at(down)[1]) or "down" in str(table.get_row_at(down)[1])


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x50"])
def test_fleet(snap_compare, long_files, size) -> None:  # noqa: ANN001
    """The ``--remote`` fleet: 4 boxes with long names, one refusing connections."""
    app = fleet_app(long_files)

    async def run_before(pilot) -> None:  # noqa: ANN001
        await fleet_ready(pilot)
        alerts_and_state_on_screen(pilot.app, size[0])

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "200x50"])
def test_prometheus_fleet(snap_compare, size) -> None:  # noqa: ANN001
    """The ``--prometheus`` fleet: the same 4 boxes as Prometheus sees them, one down."""
    app = VramscopeApp(
        FakeSource([]), refresh_s=None, clock=lambda: 0, prometheus=Prometheus(),
        token_of=lambda url: None,
    )  # fmt: skip

    async def run_before(pilot) -> None:  # noqa: ANN001
        await fleet_ready(pilot)
        alerts_and_state_on_screen(pilot.app, size[0])

    assert snap_compare(app, terminal_size=size, run_before=run_before)
