"""monitor/api.py, the facade the TUI imports monitor through: a name is looked up in its
defining module at every use (never a stale copy), and a module already imported is not
passed through the import machinery again (issue 32 item 3: ~38 lookups a live frame).
Counted, never timed."""

from __future__ import annotations

import importlib

import pytest

import monitor.api as api
from monitor.analysis import picture


def test_an_imported_module_is_not_imported_again(monkeypatch: pytest.MonkeyPatch) -> None:
    assert api.picture_from_snapshot is picture.picture_from_snapshot  # imported now
    calls: list[str] = []
    real = importlib.import_module

    def counted(name: str, package: str | None = None):
        calls.append(name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", counted)
    for _ in range(50):
        from monitor.api import picture_from_snapshot, servers_cgroup  # noqa: F401
    assert calls == []


def test_the_facade_follows_the_defining_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """Signal: a name replaced where it is defined is what the facade hands out next."""

    def stand_in(*_args: object) -> None:
        return None

    monkeypatch.setattr(picture, "picture_from_snapshot", stand_in)
    from monitor.api import picture_from_snapshot

    assert picture_from_snapshot is stand_in


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        api.nothing_here  # noqa: B018
