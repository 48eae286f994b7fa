"""``doctor`` reads /healthz only as its own database's daemon's (issue 34): two real
daemons, the second's HTTP port taken by the first; doctor for the second's database
says the port is answered by another daemon and does not take that answer as its own."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daemon(db: Path, cfg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--config", str(cfg)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )


def doctor(db: Path, cfg: Path) -> list[dict[str, Any]]:
    run = subprocess.run(
        [sys.executable, "-m", "monitor", "doctor", "--json", "--db", str(db), "--config",
         str(cfg)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return list(json.loads(run.stdout))


def test_doctor_tells_its_daemon_from_the_one_on_the_port(
    tmp_path: Path,
    wait_for_ticks: Callable[..., int],
    stop_with_sigterm: Callable[[subprocess.Popen[str]], str],
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[daemon]\ninterval_s = 0.2\n[http]\nlisten = "127.0.0.1:{free_port()}"\n')
    first_db, second_db = tmp_path / "a.db", tmp_path / "b.db"
    first = daemon(first_db, cfg)
    try:
        wait_for_ticks(first_db, 2)
        second = daemon(second_db, cfg)  # its HTTP port is taken: it samples without one
        try:
            wait_for_ticks(second_db, 2)
            mine = doctor(second_db, cfg)
            theirs = doctor(first_db, cfg)
        finally:
            stop_with_sigterm(second)
    finally:
        stop_with_sigterm(first)
    warned = [c for c in mine if c["name"] == "daemon"]
    assert len(warned) == 1 and warned[0]["level"] == "warn"
    assert (
        f"is answered by pid {first.pid}, not by the daemon writing {second_db}"
        in (warned[0]["detail"])
    )
    assert f"(pid {second.pid})" in warned[0]["detail"]
    db_check = next(c for c in mine if c["name"] == "database")
    assert db_check["detail"] == f"{second_db} is being written by the daemon (pid {second.pid})"
    # the daemon on the port is the first database's: no warning there (the noise case)
    assert not [c for c in theirs if c["name"] == "daemon"]
    assert next(c for c in theirs if c["name"] == "database")["level"] == "ok"
