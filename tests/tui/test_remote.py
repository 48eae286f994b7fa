"""`vramscope tui --remote URL`: the TUI's source reads a daemon's HTTP API."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import Roots
from monitor.config import Config
from monitor.daemon.sampler import Sampler
from monitor.http import HttpServer
from monitor.store.database import Store
from tui.source import RemoteSource, SourceError


def test_remote_source_renders_the_daemons_latest_tick(tmp_path: Path) -> None:
    snap = Sampler(Roots()).sample()
    store = Store.open(tmp_path / "v.db")
    store.add_event(
        "oom_predicted",
        "critical",
        "host",
        "llama-server will not fit",
        {"pid": 1},
        ts_ms=snap.ts_ms,
    )
    store.close()
    server = HttpServer(
        "127.0.0.1:0", "tok-123", lambda: snap, tmp_path / "v.db", Config(db_path=tmp_path / "v.db")
    )
    server.start()
    url = f"http://127.0.0.1:{server.address[1]}"
    try:
        frame = RemoteSource(url, "tok-123").latest()
        assert "host" in frame.picture.devices
        assert frame.picture.devices["host"].capacity_bytes == snap.devices[-1].total_bytes
        assert any(e.kind == "oom_predicted" for e in frame.events)
        with pytest.raises(SourceError, match=r"HTTP 401 \(wrong token\)"):
            RemoteSource(url, "wrong").latest()
    finally:
        server.stop()
    with pytest.raises(SourceError, match="cannot reach the vramscope daemon"):
        RemoteSource(url, "tok-123", timeout_s=1).latest()
