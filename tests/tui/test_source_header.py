"""The header says where the data comes from: live, which database and which daemon
writes it, or which remote daemon; ``--live`` samples here even while a daemon writes the
default database (a root TUI silently read another daemon's database and showed 0 GPUs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_source import discrete_three
from pilot_helpers import settle, sync

from collectors.base import Roots
from monitor.config import Config
from monitor.daemon.lock import acquire_lock
from monitor.daemon.sampler import Sampler
from monitor.http import HttpServer
from monitor.store.database import Store
from tui.app import VramscopeApp, main, open_source
from tui.source import LiveSource, RemoteSource, SampleSource, StoreSource


async def header_of(source: SampleSource) -> str:
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=(160, 30)) as pilot:
        await settle(pilot)
        return str(app.screen.query_one("HeaderTitle").render())


@pytest.fixture
def db(tmp_path: Path, models: dict[str, str]) -> Path:
    path = tmp_path / "vramscope.db"
    store = Store.open(path)
    for snap in discrete_three(models, ticks=2):
        store.write(snap)
    store.close()
    return path


@sync
async def test_header_names_live_sampling() -> None:
    assert (
        await header_of(LiveSource(Roots(), ["procfs"]))
        == "vramscope — live (sampled by this process)"
    )


@sync
async def test_header_names_the_database_and_the_daemon_writing_it(db: Path) -> None:
    lock = acquire_lock(db)  # what a daemon holds while it writes
    try:
        shown = await header_of(StoreSource(db))
    finally:
        lock.close()
    assert shown == f"vramscope — database {db} (daemon pid {os.getpid()})"
    assert await header_of(StoreSource(db)) == f"vramscope — database {db} (no daemon writing it)"


@sync
async def test_header_names_the_remote_daemon(tmp_path: Path) -> None:
    snap = Sampler(Roots(), enabled=["procfs"]).sample()
    server = HttpServer(
        "127.0.0.1:0", "tok", lambda: snap, tmp_path / "v.db", Config(db_path=tmp_path / "v.db")
    )
    server.start()
    try:
        url = f"http://127.0.0.1:{server.address[1]}"
        assert await header_of(RemoteSource(url, "tok")) == f"vramscope — remote {url}"
    finally:
        server.stop()


def test_live_wins_over_a_database_being_written(db: Path) -> None:
    source, _ = open_source(None, None, default_db=db)  # written just now: the daemon's
    assert isinstance(source, StoreSource)
    source, at_ms = open_source(None, None, default_db=db, live=True)
    assert isinstance(source, LiveSource) and at_ms is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"db": Path("x.db"), "live": True}, "--live samples here and now"),
        ({"at": "2026-01-01 10:00", "live": True}, "--live samples here and now"),
        ({"remote": "http://127.0.0.1:9", "live": True}, "--remote reads another daemon"),
    ],
)
def test_live_with_another_source_is_one_line(
    kwargs: dict, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(**kwargs) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vramscope: error: ") and message in err[0]


def test_tui_help_explains_the_choice_of_source() -> None:
    code = "import sys; from tui.entry import main; sys.argv[0] = 'vramscope'; main()"
    out = subprocess.run(
        [sys.executable, "-c", code, "tui", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    for words in (
        "--live",
        "--remote URL",
        "--db FILE",
        "the header says which",
        "if a daemon has written it in the",
        "else live",
    ):
        assert words in out, words
