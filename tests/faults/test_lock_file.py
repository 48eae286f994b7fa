"""``<db>.lock`` planted as a symbolic link (issue 28, item 7): a root daemon whose
database folder another user could write must neither follow the link nor truncate the
file it points at. The real daemon command, real files, a real link."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cli_runner
import pytest

from monitor.daemon.lock import acquire_lock
from monitor.store.database import StoreError

ROOT = Path(__file__).resolve().parents[2]
SECRET = "root-only content\n"


def _daemon(db: Path) -> subprocess.CompletedProcess[str]:
    return cli_runner.vramscope("daemon", "--db", str(db), "--interval", "0.2")


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "shadow"
    target.write_text(SECRET)
    target.chmod(0o600)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "v.db.lock").symlink_to(target)
    return data / "v.db", target


def test_a_linked_lock_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    db, target = _planted(tmp_path)
    before = target.stat()
    out = _daemon(db)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "symbolic link" in lines[0], out.stderr
    assert target.read_text() == SECRET and target.stat().st_mtime_ns == before.st_mtime_ns
    with pytest.raises(StoreError, match="symbolic link"):
        acquire_lock(db)
    assert target.read_text() == SECRET


def test_a_folder_others_can_write_is_refused_unless_sticky_and_ours(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out = _daemon(shared / "v.db")
    assert out.returncode != 0 and "writable by other users" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (shared / "v.db.lock").exists()
    shared.chmod(0o1777)  # like /tmp: a sticky folder of ours; the link is still refused
    (shared / "v.db.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match="symbolic link"):
        acquire_lock(shared / "v.db")
    assert not (tmp_path / "elsewhere").exists()
    os.unlink(shared / "v.db.lock")
    acquire_lock(shared / "v.db").close()  # a sticky folder owned by us is fine
