"""`vramscope tui --remote A --remote B ...` (issue 21 point 4): the fleet overview over
real daemons on loopback, each sampling a different box (two recorded DRM trees and this
machine), and a URL where nothing listens."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

from daemon_harness import free_port, running
from pilot_helpers import settle, sync
from textual.widgets import DataTable, Static

from monitor.analysis.fleet import active_alerts
from tui.app import VramscopeApp
from tui.screens.fleet import BoxScreen, FleetScreen
from tui.source import RemoteSource

DRM = Path(__file__).resolve().parents[1] / "fixtures" / "drm"


def tree(name: str) -> tuple[str, ...]:
    return ("--proc-root", str(DRM / name / "proc"), "--sys-root", str(DRM / name / "sys"))


@sync
async def test_three_daemons_and_a_dead_url_in_one_overview(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    with contextlib.ExitStack() as stack:
        urls = []
        for name, args in (("strix", tree("strix-halo")), ("xtx", tree("rx7900xtx")), ("here", ())):
            d = tmp_path / name
            d.mkdir()
            urls.append(stack.enter_context(running(d, daemon_args=args)).url)
        sources = [RemoteSource(u) for u in [*urls, nobody]]
        app = VramscopeApp(sources[0], refresh_s=None, fleet=sources)
        async with app.run_test(size=(200, 50)) as pilot:
            screen = app.screen
            assert isinstance(screen, FleetScreen)
            for _ in range(200):
                await pilot.pause(0.05)
                if all(r is not None for r in screen.rows):
                    break
            rows = {r.url: r for r in screen.rows if r is not None}
            strix, xtx, here, dead = (rows[u] for u in [*urls, nobody])
            assert strix.error is None and "GPU0 Strix Halo" in strix.devices
            assert "/96.5G" in strix.devices and "host RAM" in strix.devices
            assert strix.headroom_bytes is not None and strix.headroom_bytes > 10 * 2**30
            assert xtx.error is None and xtx.devices.startswith("GPU0 RX 7900 XTX 22.1G/24.0G")
            assert xtx.headroom_bytes is not None and xtx.headroom_bytes < 2 * 2**30
            assert xtx.headroom_device == "GPU0 RX 7900 XTX"
            assert here.error is None and "host RAM" in here.devices
            assert dead.error is not None and "cannot reach" in dead.error
            table = screen.query_one("#fleet")
            assert table.row_count == 4
            assert str(table.get_row_at(3)[1]) == "connection refused"
            # Enter opens the first box; Esc comes back to the overview
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, BoxScreen)
            assert app.source is sources[0]
            frame = app.screen.frame
            assert frame is not None and "drm:0000:c5:00.0" in frame.picture.devices
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, FleetScreen)


def test_active_alerts_are_fired_and_not_resolved() -> None:
    def ev(kind: str, subject: str, message: str) -> SimpleNamespace:
        return SimpleNamespace(kind=kind, subject=subject, message=message)

    events = [
        ev("alert_fired", "host", "host memory pressure 91%"),
        ev("alert_fired", "gpu", "GPU0 memory pressure 95%"),
        ev("alert_resolved", "host", "resolved"),
        ev("alert_escalated", "gpu", "GPU0 memory pressure 99%\x1b[2J"),
        ev("process_exit", "x", "not an alert"),
    ]
    (only,) = active_alerts(events)
    assert only.startswith("GPU0 memory pressure 99%") and "\x1b" not in only


@sync
async def test_unreachable_boxes_say_why_in_their_own_column_at_160x45(tmp_path: Path) -> None:
    """One box's error never widens the devices column nor pushes the alerts off-screen
    (issue 34): each error is its meaning in the state column; the whole error is on the
    line above the table when that box is highlighted."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Garbage(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args: object) -> None:
            pass

    garbage = ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
    threading.Thread(target=garbage.serve_forever, daemon=True).start()
    silent = socket.socket()  # listens, never answers: the connect works, the read waits
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    nobody = f"http://127.0.0.1:{free_port()}"
    try:
        with running(tmp_path, daemon_args=tree("rx7900xtx"), token="right-token") as box:
            sources = [
                RemoteSource(box.url, "right-token"),
                RemoteSource(box.url + "/", "wrong-token"),
                RemoteSource(nobody),
                RemoteSource(f"http://127.0.0.1:{garbage.server_address[1]}"),
                RemoteSource(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=1.0),
            ]
            app = VramscopeApp(sources[0], refresh_s=None, fleet=sources)
            async with app.run_test(size=(160, 45)) as pilot:
                screen = app.screen
                assert isinstance(screen, FleetScreen)
                for _ in range(400):
                    await pilot.pause(0.05)
                    if all(r is not None for r in screen.rows):
                        break
                await pilot.pause()
                table = screen.query_one("#fleet", DataTable)
                states = [str(table.get_row_at(i)[1]) for i in range(5)]
                assert states == [
                    "ok",
                    "401: wrong token",
                    "connection refused",
                    "not a vramscope daemon",
                    "timed out",
                ]
                lines = [table.render_line(y).text for y in range(7)]
                assert "alerts" in lines[0] and lines[0].rstrip().endswith("alerts"), lines[0]
                assert all(len(line) <= 160 for line in lines)
                assert "GPU0 RX 7900 XTX 22.1G/24.0G" in lines[1]
                # the whole error of the highlighted box, above the table
                await pilot.press("down", "down")
                await pilot.pause()
                title = str(screen.query_one("#fleet-title", Static).render())
                assert title.startswith(f"{nobody}: cannot reach the vramscope daemon"), title
    finally:
        garbage.shutdown()
        garbage.server_close()
        silent.close()
