"""collectors/procfs.py under churn (issue 32 item 3), on the real /proc with our own real
processes: a process that is no server and comes and goes costs a ``stat`` read, no
``cmdline`` read and no redaction (the noise case); a server, and any process tracked for
another reason, still has its redacted argv on its first tick (the signal case)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fake_server
import pytest

from collectors import _fs, procfs
from collectors.base import CollectorOptions, Roots, Tick, now_ms
from collectors.procfs import ProcfsCollector

REAL = Roots()
NO_TOP = CollectorOptions(top_n=0, pss_per_tick=0)  # only servers and GPU holders tracked
SLEEP_S = "4321.5"  # marks our sleepers' argv


def collect(collector: ProcfsCollector, gpu_pids: set[int] | None = None):
    return collector.collect(Tick(REAL, now_ms(), gpu_pids=gpu_pids or set()))


@pytest.fixture
def redactions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every argv the collector redacts (the real redact_argv, counted)."""
    seen: list[tuple[str, ...]] = []
    real = procfs.redact_argv

    def counted(argv: tuple[str, ...]) -> tuple[str, ...]:
        seen.append(tuple(argv))
        return real(argv)

    monkeypatch.setattr(procfs, "redact_argv", counted)
    return seen


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    sleep = shutil.which("sleep")
    assert sleep is not None
    procs = [subprocess.Popen([sleep, SLEEP_S]) for _ in range(200)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_one_tick_non_servers_cost_no_cmdline_read_and_no_redaction(
    sleepers: list[subprocess.Popen[bytes]], redactions: list[tuple[str, ...]]
) -> None:
    collector = ProcfsCollector(REAL, NO_TOP)
    reads: list[str] = []
    with _fs.recording(lambda kind, path, result: reads.append(path)):
        reading = collect(collector)
    for p in sleepers:
        p.kill()
        p.wait()
    collect(collector)  # they are gone before their second tick
    ours = {p.pid for p in sleepers}
    stats = {int(path.split("/")[2]) for path in reads if path.endswith("/stat")}
    assert ours <= stats  # each was seen: its identity read
    cmdlines = [path for path in reads if path.endswith("/cmdline")]
    assert [path for path in cmdlines if int(path.split("/")[2]) in ours] == []
    assert [argv for argv in redactions if SLEEP_S in argv] == []
    assert ours.isdisjoint(info.pid for info in reading.processes)
    assert not any(pid in collector._known and collector._known[pid].argv for pid in ours)  # noqa: SLF001


def test_long_lived_server_has_its_redacted_argv_on_its_first_tick(
    tmp_path: Path, redactions: list[tuple[str, ...]]
) -> None:
    model = str(tmp_path / "x.gguf")  # unique: the box may run other such servers
    argv = ["llama-server", "-m", model, "-c", "512", "--api-key", "sekrit"]
    with fake_server.running(argv, cwd=tmp_path) as server:
        collector = ProcfsCollector(REAL, NO_TOP)
        info = {i.pid: i for i in collect(collector).processes}[server.pid]
        again = {i.pid: i for i in collect(collector).processes}[server.pid]
    assert info.engine == "llama.cpp"
    assert "inference" in info.reasons
    assert info.argv == ("llama-server", "-m", model, "-c", "512", "--api-key", "<redacted>")
    assert info.cwd == str(tmp_path)
    assert again.argv == info.argv
    assert sum(1 for r in redactions if model in r) == 1  # read and redacted once


def test_python_script_run_by_its_shebang_is_recognised_by_its_executable(
    tmp_path: Path,
) -> None:
    """comm is the script's name (``vllm_entry.py``), no server's; /proc/PID/exe is
    Python, so its argv is read and the vLLM marker in it recognised."""
    script = tmp_path / "vllm_entry.py"
    script.write_text(
        f"#!{os.path.realpath(sys.executable)}\n"
        "import sys, time\nprint('ready', flush=True)\nsys.stdin.read()\n"
    )
    script.chmod(0o755)
    proc = subprocess.Popen(
        [str(script), "--model", "m"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
        assert comm == "vllm_entry.py"
        infos = {i.pid: i for i in collect(ProcfsCollector(REAL, NO_TOP)).processes}
    finally:
        proc.kill()
        proc.wait()
    assert infos[proc.pid].engine == "vllm"
    assert infos[proc.pid].argv[1:] == (str(script), "--model", "m")


def test_gpu_holder_that_is_no_server_has_its_argv_on_its_first_tracked_tick(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    collector = ProcfsCollector(REAL, NO_TOP)
    collect(collector)
    holder = sleepers[0].pid
    assert collector._known[holder].argv is None  # noqa: SLF001  not read: no server
    reads: list[str] = []  # the holder's cmdline reads only: the box starts its own Pythons
    own = f"/{holder}/cmdline"
    with _fs.recording(
        lambda kind, path, result: reads.append(path) if path.endswith(own) else None
    ):
        info = {i.pid: i for i in collect(collector, {holder}).processes}[holder]
        assert info.reasons == ("gpu",)
        assert info.argv == (shutil.which("sleep"), SLEEP_S)
        assert info.engine is None
        assert len(reads) == 1
        collect(collector, {holder})
    assert len(reads) == 1  # read once in its life
