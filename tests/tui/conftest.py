"""Fixtures for the TUI tests: GGUF headers on disk, UTC, no cursor blink."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # fake_source


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from fake_source import write_models

    return write_models(tmp_path_factory.mktemp("gguf"))


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    """Times on screen are local: pin the zone for stable snapshots, restore it after."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(autouse=True)
def _no_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import Input

    monkeypatch.setattr(Input, "_toggle_cursor", lambda _self: None, raising=False)
