"""``vramscope tui --prometheus URL`` (issue 34) against a real Prometheus (Debian's
package) scraping two real daemons on loopback (two recorded boxes) and a port where
nothing listens: the overview lists the three targets, the dead one as down, the firing
alert on each live box; Enter opens a live box's daemon directly, and never the dead one."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from daemon_harness import free_port, running
from pilot_helpers import settle, sync
from prom_harness import api, prometheus, prometheus_binary, wait_for
from textual.widgets import DataTable

from monitor.http.prometheus import PrometheusFleet
from tui.app import VramscopeApp
from tui.format import short_device_name
from tui.screens.fleet import BoxScreen, PrometheusFleetScreen
from tui.source import LiveSource

DRM = Path(__file__).resolve().parents[1] / "fixtures" / "drm"


def tree(name: str) -> tuple[str, ...]:
    return ("--proc-root", str(DRM / name / "proc"), "--sys-root", str(DRM / name / "sys"))


def scraped(url: str, live: int) -> bool:
    """Every target scraped once, and the always-firing rule firing for each live box."""
    targets = api(url, "/api/v1/targets?state=active")["data"]["activeTargets"]
    alerts = api(url, "/api/v1/alerts")["data"]["alerts"]
    firing = sum(a["state"] == "firing" for a in alerts)
    return all(t["health"] != "unknown" for t in targets) and firing == live


@pytest.mark.slow  # two daemons and a Prometheus for tens of seconds
@pytest.mark.skipif(prometheus_binary() is None, reason="Debian's prometheus not installed")
@sync
async def test_the_fleet_from_a_real_prometheus(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        boxes = []
        for name in ("strix-halo", "rx7900xtx"):
            (tmp_path / name).mkdir()
            boxes.append(stack.enter_context(running(tmp_path / name, daemon_args=tree(name))))
        dead = f"127.0.0.1:{free_port()}"
        targets = [b.url.removeprefix("http://") for b in boxes] + [dead]
        (tmp_path / "prom").mkdir()
        url = stack.enter_context(prometheus(tmp_path / "prom", targets))
        wait_for(boxes[0].process, lambda: scraped(url, 2), 120.0)  # type: ignore[arg-type]
        fleet = PrometheusFleet(url, namer=short_device_name)
        rows = {r.url: r for r in fleet.rows()}
        strix, xtx, down = rows[boxes[0].url], rows[boxes[1].url], rows[f"http://{dead}"]
        assert strix.error is None and strix.devices.startswith("GPU0 Strix Halo")
        assert xtx.devices == "GPU0 RX 7900 XTX 22.1G/24.0G"
        assert xtx.headroom_bytes is not None and xtx.headroom_bytes < 2 * 2**30
        assert strix.active_alerts == (f"test alert on {targets[0]}",)
        assert down.reason == "target down" and "connection refused" in (down.error or "")

        app = VramscopeApp(LiveSource(), refresh_s=None, prometheus=fleet)
        async with app.run_test(size=(160, 45)) as pilot:
            screen = app.screen
            assert isinstance(screen, PrometheusFleetScreen)
            table = screen.query_one("#fleet", DataTable)
            for _ in range(200):
                await pilot.pause(0.05)
                if table.row_count == 3:
                    break
            order = [r.url if r else None for r in screen.rows]
            states = [str(table.get_row_at(i)[1]) for i in range(3)]
            assert states[order.index(f"http://{dead}")] == "target down"
            # Enter on the dead box: not opened, said why
            table.move_cursor(row=order.index(f"http://{dead}"))
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, PrometheusFleetScreen)
            # Enter on the XTX box: its daemon's own main screen
            table.move_cursor(row=order.index(boxes[1].url))
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, BoxScreen)
            assert app.source.url == boxes[1].url  # type: ignore[attr-defined]
            frame = app.screen.frame
            assert frame is not None and "drm:0000:03:00.0" in frame.picture.devices
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, PrometheusFleetScreen)


@sync
async def test_prometheus_down_is_said_above_an_empty_table() -> None:
    from textual.widgets import Static

    url = f"http://127.0.0.1:{free_port()}"
    app = VramscopeApp(LiveSource(), refresh_s=None, prometheus=PrometheusFleet(url))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, PrometheusFleetScreen)
        title = screen.query_one("#fleet-title", Static)
        for _ in range(200):
            await pilot.pause(0.05)
            if "cannot reach" in str(title.render()):
                break
        assert str(title.render()).startswith(f"Prometheus {url}: cannot reach Prometheus at")
        assert screen.query_one("#fleet", DataTable).row_count == 0
        await pilot.press("enter")  # nothing to open: no error, still the overview
        await pilot.pause()
        assert app.screen is screen
