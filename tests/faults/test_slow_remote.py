"""`tui --remote` against a slow server (issue 28 item 10): a real TCP server on loopback
that accepts, reads the request and answers one byte every 2 s, forever (an HTTP status
line, then a header that never ends). Socket timeouts are per operation, so a 3 s timeout
never fired: the read went on for as long as the server kept dribbling, the TUI showed
nothing and `q` did not end it; a fleet showed no box until the slow one was done.

Every wait below is a hang guard (far longer than any deadline), never a speed check."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import running

from monitor.http.client import DaemonClient, RemoteError
from tui.app import VramscopeApp, main
from tui.screens.fleet import FleetScreen
from tui.screens.main import MainScreen
from tui.source import RemoteSource

DRIBBLE_S = 2.0  # between two bytes: less than any socket timeout used here
HANG_GUARD_S = 40.0
ENDLESS = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 100_000


class Dribbler:
    """Accepts on 127.0.0.1, reads the request head, then sends ``ENDLESS`` one byte every
    ``DRIBBLE_S`` until stopped; ``busy`` counts the connections it is dribbling to."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()
        self.busy = 0
        self.served = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._dribble, args=(conn,), daemon=True).start()

    def _dribble(self, conn: socket.socket) -> None:
        with self._lock:
            self.busy += 1
            self.served += 1
        try:
            conn.settimeout(10)
            with contextlib.suppress(OSError):
                conn.recv(65536)
                for byte in ENDLESS:
                    conn.sendall(bytes([byte]))
                    if self.stop.wait(DRIBBLE_S):
                        break
        finally:
            conn.close()
            with self._lock:
                self.busy -= 1

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def slow() -> Iterator[Dribbler]:
    server = Dribbler()
    try:
        yield server
    finally:
        server.close()


def guarded(work: Callable[[], Any]) -> Any:
    """``work()`` on a daemon thread: its result, or a failure if it is still running
    after ``HANG_GUARD_S`` (the thread is left behind: the old code never returns)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), f"still running after {HANG_GUARD_S:.0f} s: it hangs"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_a_trickling_server_is_given_up_at_the_total_deadline(slow: Dribbler) -> None:
    client = DaemonClient(slow.url, timeout_s=3.0)

    def fetch() -> str:
        with pytest.raises(RemoteError) as caught:
            client.get("/api/v1/snapshot")
        return str(caught.value)

    message = guarded(fetch)
    assert "timed out" in message and "within 3 s" in message, message
    assert "\n" not in message


def test_tui_remote_on_a_trickling_server_is_one_line_not_a_hang(
    slow: Dribbler, capsys: pytest.CaptureFixture[str]
) -> None:
    """``vramscope tui --remote URL`` checks the first answer before drawing: it used to
    wait on it forever."""
    assert guarded(lambda: main(remote=slow.url)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vramscope: error: "), err
    assert "timed out" in err[0]


def test_the_app_draws_and_quits_while_a_slow_read_is_pending(slow: Dribbler) -> None:
    """The read's own deadline (60 s) is longer than the hang guard: the app must draw
    its first screen and quit on `q` while that read is still going."""
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        app = VramscopeApp(RemoteSource(slow.url, timeout_s=60.0), refresh_s=None)
        async with app.run_test(size=(160, 40)) as pilot:
            for _ in range(200):
                await pilot.pause(0.05)
                if slow.busy:
                    break
            screen = app.screen
            assert isinstance(screen, MainScreen)
            seen["status"] = str(screen.query_one("#status").render())
            await pilot.press("q")
            for _ in range(100):
                if not app.is_running:
                    break
                await pilot.pause(0.05)
            seen["running"] = app.is_running
        seen["reading"] = slow.busy

    guarded(lambda: asyncio.run(scenario()))
    assert f"connecting to {slow.url}" in seen["status"], seen
    assert seen["running"] is False
    assert seen["reading"] >= 1, "the read had ended: this did not test quitting during it"


def test_one_slow_box_does_not_hide_the_others(tmp_path: Path, slow: Dribbler) -> None:
    """A real daemon and the trickling server twice in one fleet: the daemon's row shows
    its devices while a read of the slow box (deadline 60 s) is still going, the other
    read of it (deadline 3 s) shows its own "timed out" row, and `q` quits with the long
    read still going."""
    seen: dict[str, Any] = {}
    with running(tmp_path) as good:

        async def scenario() -> None:
            sources = [
                RemoteSource(slow.url, timeout_s=60.0),
                RemoteSource(good.url),
                RemoteSource(slow.url, timeout_s=3.0),
            ]
            app = VramscopeApp(sources[0], refresh_s=None, fleet=sources)
            async with app.run_test(size=(200, 40)) as pilot:
                screen = app.screen
                assert isinstance(screen, FleetScreen)
                for _ in range(600):
                    await pilot.pause(0.05)
                    rows = [*screen.rows, None, None, None][:3]  # (the old code: [] at first)
                    if rows[1] is not None and rows[2] is not None:
                        break
                seen["rows"] = rows
                seen["busy"] = slow.busy
                table = screen.query_one("#fleet")
                seen["cells"] = [[str(c) for c in table.get_row_at(i)] for i in range(3)]
                await pilot.press("q")

        guarded(lambda: asyncio.run(scenario()))
    long_read, good_row, timed_out = seen["rows"]
    assert good_row is not None and good_row.error is None, good_row
    assert "host RAM" in good_row.devices
    assert long_read is None and seen["busy"] >= 1, seen
    assert "connecting" in seen["cells"][0][1]
    assert timed_out is not None and timed_out.error is not None
    assert "timed out" in timed_out.error, timed_out
    assert "timed out" in seen["cells"][2][1]
