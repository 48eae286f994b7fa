"""`vramscope daemon --db` on files that are not a healthy vramscope database.

Another application's SQLite file and a file that is not SQLite are refused in one line
(exit 2) and left byte for byte as they were; a 0-byte file or a new path is created; only
vramscope's own corrupt database is moved aside, said in one log line and listed by
`vramscope doctor`. A database this user cannot write is one line, not a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stopping import STOP_GUARD_S

ROOT = Path(__file__).resolve().parents[2]


def daemon_args(db: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "monitor",
        "daemon",
        "--db",
        str(db),
        "--interval",
        "0.2",
        "--config",
        "/dev/null",
    ]


def run_daemon(db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(daemon_args(db), cwd=ROOT, capture_output=True, text=True, timeout=60)


def folder_state(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}


def other_app(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.commit()
    conn.close()


def not_sqlite(path: Path) -> None:
    path.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (other_app, "is not a vramscope database (no vramscope tables; it has invoices)"),
        (not_sqlite, "is not a vramscope database (not a SQLite file)"),
    ],
    ids=["other-app", "not-sqlite"],
)
def test_daemon_refuses_a_file_that_is_not_its_own_and_leaves_it_alone(
    tmp_path: Path, make, expected: str
) -> None:  # noqa: ANN001
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "v.db"
    make(db)
    before = folder_state(folder)
    done = run_daemon(db)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramscope: error: "), done.stderr
    assert expected in lines[0] and "refusing to touch it" in lines[0]
    after = {k: v for k, v in folder_state(folder).items() if k != "v.db.lock"}
    assert after == before  # not modified, not renamed, no -wal/-shm/.corrupt-*


def test_doctor_says_the_configured_file_is_not_a_vramscope_database(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    other_app(db)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "doctor",
            "--db",
            str(db),
            "--config",
            "/dev/null",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    checks = [c for c in json.loads(done.stdout) if c["name"] == "database"]
    assert checks[0]["level"] == "fail" and "not a vramscope database" in checks[0]["detail"]
    assert done.returncode == 1


def wait_for_ticks(db: Path, n: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                if (
                    conn.execute("SELECT count(DISTINCT ts_ms) FROM collector_runs").fetchone()[0]
                    >= n
                ):
                    return
            finally:
                conn.close()
        except sqlite3.Error:
            pass
        time.sleep(0.05)


def test_empty_file_is_taken_and_a_corrupt_vramscope_database_is_moved_aside(
    tmp_path: Path,
) -> None:
    db = tmp_path / "v.db"
    db.write_bytes(b"")
    proc = subprocess.Popen(daemon_args(db), cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_ticks(db, 3, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=STOP_GUARD_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    conn = sqlite3.connect(db)
    for i in range(300):  # enough pages to tear one in the middle
        conn.execute(
            "INSERT INTO events (ts_ms, kind, severity, message) VALUES (?,?,?,?)",
            (i, "filler", "info", "x" * 500),
        )
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 8192] = b"\xff" * 8192
    db.write_bytes(bytes(data))

    proc = subprocess.Popen(daemon_args(db), cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("v.db.corrupt-*")):  # then the ticks of the new one
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        wait_for_ticks(db, 1, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=STOP_GUARD_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    moved = [p for p in tmp_path.glob("v.db.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(moved) == 1 and moved[0].read_bytes() == bytes(data)
    said = [line for line in err.splitlines() if "is corrupt" in line]
    assert len(said) == 1 and str(moved[0]) in said[0], err
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "doctor",
            "--db",
            str(db),
            "--config",
            "/dev/null",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    details = [
        c["detail"]
        for c in json.loads(done.stdout)
        if c["name"] == "database" and c["level"] == "warn"
    ]
    assert any("moved aside" in d and str(moved[0]) in d for d in details), details


def _immutable(path: Path) -> bool:
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    return done.returncode == 0


def test_a_database_this_user_cannot_write_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    proc = subprocess.Popen(daemon_args(db), cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_ticks(db, 1, proc)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=STOP_GUARD_S)
    finally:
        proc.kill()
    if os.geteuid() != 0:
        db.chmod(0o444)
    elif not _immutable(db):  # root writes through modes: an immutable file refuses it
        pytest.skip("chattr +i is not supported here")
    try:
        before = db.read_bytes()
        done = run_daemon(db)
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"vramscope: error: the database {db} is not writable by this user (uid "
        f"{os.geteuid()}): make it writable, or pass --db a writable path"
    ], done.stderr
    assert db.read_bytes() == before
