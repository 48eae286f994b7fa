"""collectors/proctable.py, the /proc listing read once a tick: the listing's names are
made for a recorder (``vramscope capture``) only; a tick without one builds none (issue 32
item 3). Counted, never timed; on an injected tree of our own."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors import _fs, proctable


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("1", "42", "4242", "self", "meminfo"):
        (tmp_path / name).mkdir()
    return tmp_path


def test_no_recorder_no_names(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Noise: ten listings, no recorder, not one list of names made (main: one a tick)."""
    made: list[list[str]] = []
    monkeypatch.setattr(proctable, "note_listing", lambda _path, names: made.append(names))
    for _ in range(10):
        assert set(proctable.list_pids(tree)) == {1, 42, 4242}
    assert made == []


def test_a_recorder_still_gets_the_listing(tree: Path) -> None:
    """Signal: with a recorder on, the listing is recorded as before, every pid named."""
    seen: list[tuple[str, str, object]] = []
    with _fs.recording(lambda kind, path, result: seen.append((kind, path, result))):
        pids = proctable.list_pids(tree)
    assert seen == [("dir", str(tree), [str(p) for p in pids])]
    assert sorted(seen[0][2]) == ["1", "42", "4242"]  # type: ignore[arg-type]
    assert not _fs.is_recording()
