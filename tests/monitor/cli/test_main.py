"""The vramscope command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cli_runner
import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())


vramscope = cli_runner.vramscope


def test_status_json_follows_the_schema_and_sees_this_process() -> None:
    result = vramscope("status", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    host = next(d for d in doc["devices"] if d["device_id"] == "host")
    meminfo = Path("/proc/meminfo").read_text().split()
    assert host["total_bytes"] == int(meminfo[meminfo.index("MemTotal:") + 1]) * 1024
    runs = {r["collector"]: r["status"] for r in doc["collectors"]}
    assert runs["procfs"] == "ok"
    assert runs["drm"] in {"ok", "nodata"}
    assert all(
        p["memory"]["host"]["rss_anon_bytes"] >= 0
        for p in doc["processes"]
        if "host" in p["memory"]
    )


def test_status_table_is_readable() -> None:
    result = vramscope("status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["DEVICE", "KIND", "USED", "TOTAL"]
    assert any(line.startswith("host") and "GiB" in line for line in lines)
    assert any(line.startswith("PID") and "COMMAND" in line for line in lines)


def test_no_command_prints_status() -> None:
    result = vramscope()
    assert result.returncode == 0
    assert result.stdout.startswith("DEVICE")


def test_doctor_explains_each_collector() -> None:
    result = vramscope("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "collector procfs" in result.stdout
    assert "collector drm" in result.stdout
    checks = json.loads(vramscope("doctor", "--json").stdout)
    names = {c["name"] for c in checks}
    assert {
        "kernel",
        "privileges",
        "collector procfs",
        "collector drm",
        "collector nvml",
        "database",
    } <= names
    nvml = next(c for c in checks if c["name"] == "collector nvml")
    assert "libnvidia-ml.so.1 not found" in nvml["detail"]  # this machine has no NVIDIA driver
    assert all(c["level"] in {"ok", "info", "warn", "fail"} for c in checks)
    assert all(c["fix"] for c in checks if c["level"] in {"warn", "fail"})


BROKEN_CONFIGS = [
    ("[daemon]\ninterval_s = \n", "not valid TOML"),
    ("[daemon]\ninterval_s = 1\nbogus = 3\n", ":3: unknown key 'bogus' in [daemon]"),
    ("[daemon]\n\ninterval_s = 'fast'\n", ":3: [daemon] interval_s must be a number"),
    ("[daemon]\ninterval_s = 0\n", ":2: [daemon] interval_s = 0 is outside 0.05..3600"),
    ("[colectors]\ntop_n = 1\n", ":1: unknown section [colectors]"),
    ("[collectors]\nenabled = ['drm', 'nvml2']\n", "unknown collector 'nvml2'"),
    ("[daemon]\nlog_level = 'loud'\n", "log_level must be one of debug, info"),
]


@pytest.mark.parametrize(("text", "message"), BROKEN_CONFIGS)
@pytest.mark.parametrize("command", ["status", "daemon"])
def test_broken_config_is_one_line_and_exit_2(
    tmp_path: Path, text: str, message: str, command: str
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    result = vramscope(command, "--config", str(cfg), "--db", str(tmp_path / "v.db"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vramscope: error: ")
    assert message in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "v.db").exists()  # nothing started


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    result = vramscope("status", "--config", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr


def test_unusable_database_path_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = vramscope("daemon", "--db", str(tmp_path / "file" / "v.db"))
    assert result.returncode == 2
    assert result.stderr.strip().startswith("vramscope: error: cannot create the database")
    assert len(result.stderr.strip().splitlines()) == 1


def test_valid_config_is_applied(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("[collectors]\nenabled = ['procfs']\ntop_n = 1\nmax_tracked = 1\n")
    doc = json.loads(vramscope("status", "--json", "--config", str(cfg)).stdout)
    assert [r["collector"] for r in doc["collectors"]] == ["procfs"]
    # servers and GPU holders are always tracked (whatever else runs on this box); the cap
    # bounds the rest
    others = [p for p in doc["processes"] if not {"inference", "gpu"} & set(p["reasons"])]
    assert len(others) <= 1, [(p["pid"], p["reasons"]) for p in doc["processes"]]


def test_example_config_is_valid() -> None:
    from monitor.config import read_file

    data = read_file(ROOT / "systemd" / "config.example.toml")
    assert data["daemon"]["interval_s"] == 1.0


def test_help_teaches() -> None:
    result = vramscope("--help")
    assert result.returncode == 0
    for word in ("status", "daemon", "doctor", "Quick start"):
        assert word in result.stdout
    daemon_help = vramscope("daemon", "--help").stdout
    assert "--interval" in daemon_help and "--proc-root" in daemon_help and "Example" in daemon_help


def test_default_database_goes_to_the_users_state_dir(tmp_path: Path) -> None:
    import os

    from monitor import config

    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    env.pop("STATE_DIRECTORY", None)
    code = "from monitor.config import load; print(load().db_path)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    expected = (
        "/var/lib/vramscope/vramscope.db"
        if os.geteuid() == 0
        else f"{tmp_path}/state/vramscope/{config.DB_NAME}"
    )
    assert out.stdout.strip() == expected
    env["STATE_DIRECTORY"] = str(tmp_path / "svc")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == f"{tmp_path}/svc/vramscope.db"


@pytest.mark.parametrize("value", ["''", "'/tmp'"])
def test_config_db_that_is_not_a_file_is_one_line(tmp_path: Path, value: str) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"[daemon]\ndb = {value}\n")
    result = vramscope("daemon", "--config", str(cfg))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("vramscope: error: [daemon] db in ")
    assert "must name a database file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["status", "--proc-root", "/no/such/dir"], "Directory '/no/such/dir' does not exist"),
        (["stauts"], "No such command 'stauts'"),
        (["daemon", "--interval", "fast"], "'fast' is not a valid float"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], message: str) -> None:
    result = vramscope(*args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"vramscope: error: {result.stderr.strip()[18:]}"]
    assert message in result.stderr


def test_config_before_the_command_is_applied(tmp_path: Path) -> None:
    """README: every command takes --config, also given before it (issue 34)."""
    cfg = tmp_path / "config.toml"
    cfg.write_text("[collectors]\nenabled = ['procfs']\n")
    result = vramscope("--config", str(cfg), "status", "--json")
    assert result.returncode == 0, result.stderr
    assert [r["collector"] for r in json.loads(result.stdout)["collectors"]] == ["procfs"]
    same = vramscope("--config", str(cfg), "status", "--json", "--config", str(cfg))
    assert same.returncode == 0, same.stderr
    # bare `vramscope --config FILE` (no command, not a terminal: status) reads it too
    bare = vramscope("--config", str(tmp_path / "nope.toml"))
    assert bare.returncode == 2
    assert bare.stderr.strip().splitlines() == [
        f"vramscope: error: config file {tmp_path / 'nope.toml'} does not exist"
    ]


def test_config_given_twice_and_different_is_one_line(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text("")
    b.write_text("")
    result = vramscope("--config", str(a), "status", "--config", str(b))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"vramscope: error: --config given twice and different: {a} and {b}; give one"
    ]
