"""Every reader of the database on every bad file: one line ``vramscope: error: ...``,
exit 2, no traceback, and the file (or its absence) exactly as it was.

Readers: ``events``, ``postmortem --last``, ``predict --at``, ``diagnose --at``, and the
TUI's database source (``tui --db F`` and ``tui --at``), which must fail before the app
opens. Bad files: a 0-byte file, another application's SQLite file, no file, a file that
is not SQLite. Then ``--at`` outside the range the database covers.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from collectors.base import DeviceSample, Snapshot
from monitor.store.database import Store
from tui.entry import cli  # `vramscope` with the tui command registered

GIB = 1024**3
AT = "2026-01-01 00:00"
READERS = {
    "events": ["events"],
    "postmortem": ["postmortem", "--last"],
    "predict-at": ["predict", "--at", AT, "--", "llama-server", "-m", "x.gguf"],
    "diagnose-at": ["diagnose", "--at", AT],
    "tui-db": ["tui"],
    "tui-at": ["tui", "--at", AT],
}


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _other_app(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('mine, not vramscope''s')")
    conn.commit()
    conn.close()


def _not_sqlite(path: Path) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20)


BAD_FILES = {
    "empty": (_empty, "is not a vramscope database (an empty file)"),
    "other-app": (_other_app, "is not a vramscope database (no vramscope tables"),
    "missing": (None, "no database at"),
    "not-sqlite": (_not_sqlite, "is not a vramscope database (not a SQLite file)"),
}


def _state(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file in the folder with its bytes and mtime: nothing may change."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}


def invoke(*args: str) -> tuple[int, str, str, BaseException | None]:
    result = CliRunner().invoke(cli, list(args), prog_name="vramscope")
    return result.exit_code, result.stdout, result.stderr, result.exception


@pytest.mark.parametrize("bad", sorted(BAD_FILES))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_on_every_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, reader: str, bad: str
) -> None:
    make, expected = BAD_FILES[bad]
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "v.db"
    if make is not None:
        make(db)
    before = _state(folder)
    args = READERS[reader]
    cut = args.index("--") if "--" in args else len(args)
    code, out, err, exc = invoke(*args[:cut], "--db", str(db), *args[cut:])
    assert code == 2, (code, out, err, exc)
    assert err.strip().splitlines() == [err.strip()], err  # exactly one line
    assert err.startswith("vramscope: error: ") and expected in err, err
    assert "Traceback" not in err + out
    assert _state(folder) == before  # never created, changed or renamed


def test_open_readonly_is_the_one_check_and_accepts_a_real_database(tmp_path: Path) -> None:
    from monitor.store.database import classify, open_readonly

    db = tmp_path / "v.db"
    Store.open(db).close()
    assert classify(db) == ("vramscope", "")
    open_readonly(db).close()
    other = tmp_path / "other.db"
    _other_app(other)
    assert classify(other)[0] == "foreign"


# ------------------------------------------------------------------ --at out of range

T_FIRST = int(datetime(2026, 1, 10, 10, 0).timestamp() * 1000)
T_LAST = int(datetime(2026, 1, 12, 14, 0).timestamp() * 1000)
COVERS = "the database covers 2026-01-10 10:00:00 .. 2026-01-12 14:00:00"


def _device(used: int) -> DeviceSample:
    return DeviceSample(
        "nvml:GPU-a",
        "nvml",
        "nvidia",
        "RTX",
        "dedicated",
        24 * GIB,
        used,
        free_bytes=24 * GIB - used,
    )


@pytest.fixture
def covered_db(tmp_path: Path) -> Path:
    db = tmp_path / "v.db"
    store = Store.open(db)
    for ts in (T_FIRST, (T_FIRST + T_LAST) // 2, T_LAST):
        store.write(Snapshot(ts, (_device(GIB),), (), (), (), (), ()))
    store.add_event(
        "crash", "critical", "x[1]", "x (pid 1) crashed", {"pid": 1}, ts_ms=T_FIRST + 1000
    )
    store.close()
    return db


AT_READERS = {
    "predict": ["predict", "--at", "{at}", "--", "llama-server", "-m", "x.gguf"],
    "diagnose": ["diagnose", "--at", "{at}"],
    "postmortem": ["postmortem", "--at", "{at}"],
    "tui": ["tui", "--at", "{at}"],
}


@pytest.mark.parametrize("when", ["future", "before-first", "after-last"])
@pytest.mark.parametrize("reader", sorted(AT_READERS))
def test_at_outside_the_database_names_the_range_it_covers(
    covered_db: Path, reader: str, when: str
) -> None:
    at = {
        "future": "2099-06-01 12:00",
        "before-first": "2026-01-09 09:00",
        "after-last": "2026-01-13 09:00",
    }[when]
    args = [a.replace("{at}", at) for a in AT_READERS[reader]]
    cut = args.index("--") if "--" in args else len(args)
    code, out, err, exc = invoke(*args[:cut], "--db", str(covered_db), *args[cut:])
    assert code == 2, (code, out, err, exc)
    assert err.startswith("vramscope: error: ") and len(err.strip().splitlines()) == 1, err
    assert COVERS in err, err
    if when == "future":
        assert "in the future" in err


def test_at_inside_the_range_still_reads_the_moment(covered_db: Path) -> None:
    code, out, err, exc = invoke("diagnose", "--db", str(covered_db), "--at", "2026-01-11 12:30")
    assert code == 0, (out, err, exc)
    code, out, err, exc = invoke(
        "postmortem", "--db", str(covered_db), "--at", "2026-01-10 10:05", "--json"
    )
    assert code == 0 and '"pid": 1' in out, (out, err, exc)
