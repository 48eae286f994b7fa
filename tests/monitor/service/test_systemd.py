"""Running as a systemd service: the unit verifies, the daemon speaks sd_notify, SIGHUP
reloads, `service install` writes what it says."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import cli_runner
import pytest
from stopping import STOP_GUARD_S

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "systemd" / "vramscope.service"


vramscope = cli_runner.vramscope


@pytest.fixture(scope="module")
def analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "systemd"], capture_output=True, timeout=300
        )
        tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed and cannot be installed here")
    return tool


def test_the_shipped_unit_verifies_and_keeps_devices_visible(analyze: str, tmp_path: Path) -> None:
    text = UNIT.read_text()
    unit = tmp_path / "vramscope.service"
    unit.write_text(text.replace("/usr/local/bin/vramscope", sys.executable))
    verify = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    assert verify.stderr.strip() == ""
    settings = [
        line.split("=", 1)[0]
        for line in text.splitlines()
        if "=" in line and not line.startswith("#")
    ]
    for key in (
        "Type",
        "WatchdogSec",
        "Restart",
        "StateDirectory",
        "SupplementaryGroups",
        "NoNewPrivileges",
        "ProtectSystem",
        "ProtectHome",
        "CapabilityBoundingSet",
    ):
        assert key in settings, key
    assert "PrivateDevices" not in settings and "ProtectKernelLogs" not in settings
    assert "Type=notify" in text and "Restart=on-failure" in text
    security = subprocess.run(
        [analyze, "security", "--offline=true", str(unit)], capture_output=True, text=True
    )
    exposure = [line for line in security.stdout.splitlines() if "Overall exposure" in line]
    assert exposure and float(exposure[0].split("level for")[1].split(":")[1].split()[0]) < 5


def test_daemon_sends_ready_watchdog_and_stopping(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(10)
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "600000"}
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "monitor",
            "daemon",
            "--db",
            str(tmp_path / "v.db"),
            "--interval",
            "0.1",
        ],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    got: list[str] = []
    try:
        started = time.monotonic()
        while time.monotonic() - started < 10 and got.count("WATCHDOG=1") < 3:
            got += sock.recv(4096).decode().splitlines()
        daemon.send_signal(signal.SIGTERM)
        got += sock.recv(4096).decode().splitlines()
        daemon.communicate(timeout=STOP_GUARD_S)
    finally:
        daemon.kill()
        sock.close()
    assert got[0] == "READY=1"
    assert got.count("WATCHDOG=1") >= 3
    assert "STOPPING=1" in got
    assert daemon.returncode == 0


def _tick_times(db: Path) -> list[int]:
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:  # not created yet
        return []
    try:
        return [
            r[0] for r in conn.execute("SELECT DISTINCT ts_ms FROM device_samples ORDER BY ts_ms")
        ]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _median_gap_s(times_ms: list[int]) -> float:
    import statistics

    return statistics.median(b - a for a, b in zip(times_ms, times_ms[1:], strict=False)) / 1000


@pytest.mark.slow  # a real daemon for many seconds: the default suite stays under 5 min
def test_sighup_reloads_and_a_broken_config_keeps_the_old_one(tmp_path: Path) -> None:
    """Driven by what the daemon says and records, not by sleeps: on a busy machine ticks
    come late, so the interval is read from the median gap between recorded ticks."""
    import threading

    cfg = tmp_path / "config.toml"
    cfg.write_text("[daemon]\ninterval_s = 0.5\n")
    db = tmp_path / "v.db"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--config", str(cfg)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(daemon.stderr.readline, "")), daemon=True
    )
    reader.start()

    def wait_until(what: str, done: object, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if done():  # type: ignore[operator]
                return
            time.sleep(0.05)
        raise AssertionError(f"{what} not seen in {timeout_s} s; log: {lines}")

    try:
        wait_until("6 ticks at 0.5 s", lambda: len(_tick_times(db)) >= 6)
        slow = _median_gap_s(_tick_times(db))
        cfg.write_text("[daemon]\ninterval_s = 0.1\n")
        daemon.send_signal(signal.SIGHUP)
        wait_until("the reload", lambda: any("configuration reloaded" in x for x in lines))
        before = len(_tick_times(db))
        wait_until("20 ticks after the reload", lambda: len(_tick_times(db)) >= before + 21)
        fast = _median_gap_s(_tick_times(db)[before:])
        cfg.write_text("[daemon]\ninterval_s = \n")  # broken
        daemon.send_signal(signal.SIGHUP)
        wait_until("the failed reload", lambda: any("reload failed" in x for x in lines))
        still = len(_tick_times(db))
        wait_until("10 ticks after the failed reload", lambda: len(_tick_times(db)) >= still + 11)
        after_broken = _median_gap_s(_tick_times(db)[still:])
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=STOP_GUARD_S)
    finally:
        daemon.kill()
        reader.join(timeout=10)
    err = "".join(lines)
    assert slow >= 0.4, slow  # the configured 0.5 s
    assert fast < 0.3, fast  # reloaded to 0.1 s
    assert after_broken < 0.3, after_broken  # still 0.1 s: the old configuration runs on
    assert "reload failed, keeping the running configuration" in err and "not valid TOML" in err
    assert daemon.returncode == 0


def test_service_install_writes_unit_and_config_and_uninstall_removes(tmp_path: Path) -> None:
    result = vramscope("service", "install", "--root", str(tmp_path))
    assert result.returncode == 0, result.stderr
    unit = tmp_path / "etc/systemd/system/vramscope.service"
    config = tmp_path / "etc/vramscope/config.toml"
    assert unit.exists() and config.exists()
    exec_line = next(x for x in unit.read_text().splitlines() if x.startswith("ExecStart="))
    assert exec_line.endswith("daemon --config /etc/vramscope/config.toml")  # not the staging
    assert "systemctl enable --now vramscope" in result.stdout
    again = vramscope("service", "install", "--root", str(tmp_path))
    assert f"kept {config}" in again.stdout
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    user = vramscope("service", "install", "--user", env=env)
    user_unit = home / ".config/systemd/user/vramscope.service"
    assert user.returncode == 0 and user_unit.exists()
    user_text = user_unit.read_text()
    assert "AmbientCapabilities" not in user_text and "WantedBy=default.target" in user_text
    assert "systemctl --user daemon-reload" in user.stdout
    gone = vramscope("service", "uninstall", "--root", str(tmp_path))
    assert gone.returncode == 0 and not unit.exists() and config.exists()
