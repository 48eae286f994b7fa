"""The operator's terminal (issue 34): output into a closed pipe, `events --since` in the
words people type, one-line errors for a bad `predict --state` or `daemon --db`, and no
"-0.00" in `estimate`. Each runs the real command (`python -m monitor`) on real files."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import cli_runner
import pytest

from monitor.store.database import Store

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "fakes"))
# piped without a width (COLUMNS, which xdist's workers may carry): every line whole
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
    "PYTHONPATH": str(ROOT),
}
EXIT_PIPE = 141


vramscope = functools.partial(cli_runner.vramscope, unset=("COLUMNS", "LINES"))


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The command writing into a pipe whose reader has gone (`| head` that has its
    lines): the read end is closed before the command starts, so every write fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return vramscope(*args, stdout=write_end)
    finally:
        os.close(write_end)


@pytest.fixture
def events_db(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """A real database with events 3 days, 90 minutes and 5 minutes old, and 3000 more
    old enough for any --since here to leave out but `--since 1w` to print."""
    now_ms = int(time.time() * 1000)
    at = {"3d": now_ms - 3 * 86_400_000, "90m": now_ms - 90 * 60_000, "5m": now_ms - 5 * 60_000}
    db = tmp_path / "v.db"
    store = Store.open(db)
    try:
        for name, ts_ms in at.items():
            store.add_event("crash", "critical", "llama-server[7]", f"event {name}", ts_ms=ts_ms)
        for i in range(3000):
            store.add_event("xid", "warning", "GPU0", f"filler {i}", ts_ms=at["3d"] - 1000 - i)
    finally:
        store.close()
    return db, at


def _listed(db: Path, since: str) -> list[str]:
    result = vramscope("events", "--db", str(db), "--since", since, "--kind", "crash", "--json")
    assert result.returncode == 0, result.stderr
    return sorted(e["message"] for e in json.loads(result.stdout))


def test_events_since_reads_spans_days_and_times_of_day(
    events_db: tuple[Path, dict[str, int]],
) -> None:
    db, at = events_db
    assert _listed(db, "10m") == ["event 5m"]
    assert _listed(db, "2h") == ["event 5m", "event 90m"]
    assert _listed(db, "1d") == ["event 5m", "event 90m"]
    assert _listed(db, "yesterday") == ["event 5m", "event 90m"]
    assert _listed(db, "1w") == ["event 3d", "event 5m", "event 90m"]
    half_hour_ago = datetime.fromtimestamp(time.time() - 30 * 60)
    assert _listed(db, half_hour_ago.strftime("%H:%M")) == ["event 5m"]  # its latest 14:30
    four_days_ago = datetime.fromtimestamp(at["3d"] / 1000) - timedelta(days=1)
    assert len(_listed(db, four_days_ago.strftime("%Y-%m-%d %H:%M"))) == 3


@pytest.mark.parametrize("since", ["bogus", "25:00", "14:61", "", "2026-13-01", "0001-01-01"])
def test_events_since_it_cannot_read_is_one_line_naming_the_forms(
    events_db: tuple[Path, dict[str, int]], since: str
) -> None:
    result = vramscope("events", "--db", str(events_db[0]), "--since", since)
    assert result.returncode == 2
    assert result.stderr.startswith(f"vramscope: error: --since {since!r}: cannot read it")
    assert "yesterday" in result.stderr and "14:30" in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_events_into_a_closed_pipe_exits_quietly(events_db: tuple[Path, dict[str, int]]) -> None:
    result = into_closed_pipe("events", "--db", str(events_db[0]), "--since", "1w")
    assert result.stderr == ""  # no BrokenPipeError, no "events failed"
    assert result.returncode == EXIT_PIPE


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["doctor"]])
def test_other_long_outputs_into_a_closed_pipe_exit_quietly(args: list[str]) -> None:
    result = into_closed_pipe(*args)
    assert result.stderr == ""
    assert result.returncode == EXIT_PIPE


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tiny_models

    path = tmp_path_factory.mktemp("m") / "tiny-llama.gguf"
    return Path(
        tiny_models.write_llama(
            path, n_layer=4, n_embd=1024, n_head=16, n_head_kv=4, n_ff=2816, n_vocab=2048
        ).path
    )


def _estimate_beside_log(model: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    log = ROOT / "tests" / "fixtures" / "llamalog" / "real-cpu-draft.log"
    return vramscope(
        "estimate", *extra, "--cpu-only", "--log", str(log), "--",
        "llama-server", "-m", str(model), "-c", "2048", "-np", "1",
    )  # fmt: skip


def test_estimate_beside_the_log_never_prints_negative_zero(tiny_model: Path) -> None:
    """The real CPU llama-server log: weights, compute and output are a few KiB under
    llama.cpp's figures, deltas that round to zero and printed as "-0.00" before."""
    text = _estimate_beside_log(tiny_model)
    assert text.returncode == 0, text.stderr
    assert "estimated vs reported by llama.cpp" in text.stdout
    assert "-0.00" not in text.stdout and "-0.0 " not in text.stdout
    beside = text.stdout.split("estimated vs reported by llama.cpp")[1].splitlines()
    weights = next(line for line in beside if line.startswith("weights "))
    assert weights.split()[-1] == "+0.00"
    doc = json.loads(_estimate_beside_log(tiny_model, "--json").stdout)
    for row in doc["reported_by_llama_cpp"]:
        for key in ("estimated_mib", "reported_mib", "delta_mib"):
            assert str(row[key]) != "-0.0", row
    into_pipe = into_closed_pipe(
        "estimate", "--cpu-only", "--", "llama-server", "-m", str(tiny_model)
    )
    assert (into_pipe.returncode, into_pipe.stderr) == (EXIT_PIPE, "")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[1, 2, 3]", "is a JSON list, not a vramscope status --json document"),
        ('"status"', "is a JSON string, not a vramscope status --json document"),
        ("null", "is a JSON null, not a vramscope status --json document"),
        ("[" * 100_000, "not JSON"),
        ('{"schema": "vramscope.status/1", "devices": [1]}', "not a whole vramscope status"),
        ('{"schema": "vramscope.status/1"}', "(no 'devices')"),
    ],
    ids=["list", "string", "null", "deep", "shape", "missing"],
)
def test_predict_state_that_is_not_a_status_object_is_one_line(
    tmp_path: Path, tiny_model: Path, content: str, says: str
) -> None:
    state = tmp_path / "state.json"
    state.write_text(content)
    result = vramscope(
        "predict", "--state", str(state), "--", "llama-server", "-m", str(tiny_model)
    )
    assert result.returncode == 2
    assert result.stderr.startswith("vramscope: error: ") and says in result.stderr
    assert "Error" not in result.stderr and "failed" not in result.stderr  # no Python words
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_predict_state_through_a_link_is_refused(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    result = vramscope(
        "predict",
        "--state",
        str(tmp_path / "link.json"),
        "--",
        "llama-server",
        "-m",
        str(tiny_model),
    )
    assert result.returncode == 2 and "a symbolic link (not followed)" in result.stderr


def test_daemon_refuses_a_named_database_in_a_missing_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    result = vramscope("daemon", "--db", str(missing / "x.db"))
    assert result.returncode == 2
    assert result.stderr == (
        f"vramscope: error: the database folder {missing} does not exist (--db: "
        f"{missing / 'x.db'}): create it first; only the default location's are created\n"
    )
    assert not (tmp_path / "no").exists()  # nothing made
    config = tmp_path / "config.toml"
    config.write_text(f'[daemon]\ndb = "{missing / "x.db"}"\n')
    from_config = vramscope("daemon", "--config", str(config))
    assert from_config.returncode == 2 and f"[daemon] db of {config}" in from_config.stderr
    assert not (tmp_path / "no").exists()


def test_daemon_still_creates_the_default_locations_folders(
    tmp_path: Path, wait_for_ticks, stop_with_sigterm
) -> None:
    """No --db: the database goes to the default folder ($STATE_DIRECTORY, as systemd's
    StateDirectory= sets it, else ~/.local/state/vramscope), made when missing."""
    state = tmp_path / "state" / "vramscope"  # missing, as on a fresh box
    config = tmp_path / "config.toml"
    config.write_text("[http]\nenabled = false\n[collectors]\nenabled = ['procfs']\n")
    env = {**ENV, "STATE_DIRECTORY": str(state)}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--config", str(config), "--interval", "0.2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        wait_for_ticks(state / "vramscope.db", 1)
    finally:
        err = stop_with_sigterm(daemon)
    assert daemon.returncode == 0, err


def test_diagnose_sizes_a_small_server_in_mib_and_one_slot_plainly(
    tmp_path: Path, tiny_model: Path
) -> None:
    """A CPU llama-server of a tiny model (33 MiB resident, -c 4096 -np 1) in a saved
    status: its sizes read in MiB, not "0.0 GiB", and one slot is not "(not 1 x 4096)"."""
    from collectors.base import DeviceSample, ProcessInfo, ProcessMemory, Snapshot
    from monitor.report.status import to_json

    mib, gib = 1024**2, 1024**3
    argv = ("llama-server", "-m", str(tiny_model), "-c", "4096", "-np", "1", "--port", "40999")
    info = ProcessInfo(4242, 1, None, 1000, 1000, "llama-server", argv, "llama.cpp", ("inference",))
    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * gib, 8 * gib, available_bytes=56 * gib
    )
    held = ProcessMemory(4242, "host", rss_anon_bytes=33 * mib, rss_file_bytes=0)
    state = tmp_path / "state.json"
    snap = Snapshot(1_800_000_000_000, (host,), (info,), (held,), (), (), ())
    state.write_text(json.dumps(to_json(snap)))
    result = vramscope("diagnose", "--state", str(state))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("pid 4242: tiny-llama.gguf holds 33 MiB"), result.stdout
    assert "0.0 GiB" not in result.stdout
    kv = next(line for line in result.stdout.splitlines() if line.strip().startswith("kv "))
    assert "-c 4096 is 4096 cells for its one slot" in kv and "(not 1 x" not in kv
    assert kv.split()[1:3] == ["16", "MiB"]  # 4096 cells x 4 layers x (K+V) x 256 x 2 B


def test_estimate_pid_beside_its_log_never_prints_negative_zero(
    tmp_path: Path, tiny_model: Path
) -> None:
    """`estimate --pid` of a running process whose executable is llama-server (a copy of
    Python, so it runs `-c code`; the later `-c 2048` is llama.cpp's), beside the real log."""
    import shutil

    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    code = "import time; print('ready', flush=True); time.sleep(120)"
    argv = [str(exe), "-c", code, "-m", str(tiny_model), "-c", "2048", "-np", "1"]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    log = ROOT / "tests" / "fixtures" / "llamalog" / "real-cpu-draft.log"
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        result = vramscope("estimate", "--cpu-only", "--pid", str(child.pid), "--log", str(log))
    finally:
        child.kill()
        child.wait()
    assert result.returncode == 0, result.stderr
    assert "estimated vs reported by llama.cpp" in result.stdout
    assert "-0.00" not in result.stdout
