"""The /proc collector on this machine's real /proc, with real child processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collectors.base import CollectorOptions, Roots, Tick, now_ms
from collectors.procfs import ProcfsCollector, host_device, parse_cmdline, parse_stat, parse_status
from collectors.proctable import list_pids

MIB = 1024 * 1024
REAL = Roots()
TRACK_ALL = CollectorOptions(top_n=100_000, max_tracked=100_000, pss_per_tick=0)


def spawn(code: str, *args: str, argv0: str | None = None) -> subprocess.Popen[str]:
    """A Python child that prints 'ready' once set up, then sleeps until killed."""
    proc = subprocess.Popen(
        [argv0 or sys.executable, "-c", code, *args],
        executable=sys.executable,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


def collect(collector: ProcfsCollector, gpu_pids: set[int] | None = None):
    return collector.collect(Tick(REAL, now_ms(), gpu_pids=gpu_pids or set()))


ALLOC = """
import sys, time
block = bytearray(256 * 1024 * 1024)
block[::4096] = b"\\x01" * (len(block) // 4096)   # touch every page
print("ready", flush=True)
time.sleep(120)
"""


def status_rss_anon(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon")


def test_rss_anon_of_a_256_mib_child_is_reported_within_5_percent() -> None:
    child = spawn(ALLOC)
    try:
        # Every process is "top N" here: the child need not be among the biggest on a busy
        # box (other tests, other servers), only measured right once it is tracked.
        every = 1_000_000
        reading = collect(
            ProcfsCollector(
                REAL, CollectorOptions(top_n=every, max_tracked=every, pss_per_tick=every)
            )
        )
        rows = {m.pid: m for m in reading.memory}
        assert child.pid in rows, "a process with resident memory must be tracked as top N"
        anon = rows[child.pid].rss_anon_bytes
        assert anon is not None
        assert abs(anon - 256 * MIB) <= 0.05 * 256 * MIB, anon / MIB
        info = next(p for p in reading.processes if p.pid == child.pid)
        assert "top" in info.reasons
        # PSS was read for it this tick (pss_per_tick=64) and agrees with the anon figure.
        assert rows[child.pid].pss_bytes is not None
        assert rows[child.pid].pss_bytes >= 256 * MIB * 0.95
    finally:
        stop(child)


def test_host_device_matches_proc_meminfo() -> None:
    reading = collect(ProcfsCollector(REAL, CollectorOptions()))
    (host,) = reading.devices
    meminfo = dict(
        (line.split(":")[0], int(line.split()[1]) * 1024)
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.split()[-1] == "kB"
    )
    assert host.device_id == "host" and host.memory_kind == "host"
    assert host.total_bytes == meminfo["MemTotal"]
    assert host.used_bytes is not None and 0 < host.used_bytes < host.total_bytes
    assert host.swap_total_bytes == meminfo["SwapTotal"]
    assert host.gtt_used_bytes is None  # not a host concept: unknown, not 0


def test_inference_server_is_tracked_by_name_with_secrets_redacted(tmp_path: Path) -> None:
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)  # a real process whose executable is llama-server
    code = "import time; print('ready', flush=True); time.sleep(120)"
    child = subprocess.Popen(
        [str(exe), "-c", code, "--api-key", "sk-supersecret123", "-m", "/models/q.gguf"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        reading = collect(ProcfsCollector(REAL, CollectorOptions(top_n=0)))
        info = next(p for p in reading.processes if p.pid == child.pid)
        assert info.engine == "llama.cpp"
        assert info.reasons == ("inference",)
        assert "sk-supersecret123" not in " ".join(info.argv)
        assert info.argv[-4:] == ("--api-key", "<redacted>", "-m", "/models/q.gguf")
        assert info.uid == os.getuid()
        assert info.started_at_ms is not None
        assert abs(info.started_at_ms - now_ms()) < 60_000
    finally:
        stop(child)


def test_gpu_holders_are_tracked_even_when_small() -> None:
    child = spawn("import time; print('ready', flush=True); time.sleep(120)")
    try:
        reading = collect(ProcfsCollector(REAL, CollectorOptions(top_n=0)), {child.pid})
        info = next(p for p in reading.processes if p.pid == child.pid)
        assert info.reasons == ("gpu",)
    finally:
        stop(child)


def test_max_tracked_bounds_the_top_n_list_and_counts_what_it_leaves_out() -> None:
    collector = ProcfsCollector(REAL, CollectorOptions(top_n=50, max_tracked=3))
    reading = collect(collector)
    servers = [p for p in reading.processes if "inference" in p.reasons]
    assert len(reading.processes) == max(3, len(servers))  # servers are never dropped
    assert len([m for m in reading.memory if m.device_id == "host"]) == len(reading.processes)
    tracked = {p.pid for p in reading.processes}
    left = collector._top - tracked  # noqa: SLF001 - the top-N list of this tick
    assert reading.untracked is not None
    assert reading.untracked.processes == len(left) > 0
    assert reading.untracked.bytes == sum(collector._known[p].rss_bytes for p in left)  # noqa: SLF001


def test_every_gpu_holder_is_tracked_past_max_tracked() -> None:
    children = [spawn("print('ready', flush=True); import time; time.sleep(120)") for _ in range(3)]
    try:
        gpu = {c.pid for c in children}
        reading = collect(ProcfsCollector(REAL, CollectorOptions(top_n=50, max_tracked=1)), gpu)
        tracked = {p.pid: p for p in reading.processes}
        assert gpu <= set(tracked)
        assert all("gpu" in tracked[pid].reasons for pid in gpu)
        assert not [p for p in reading.processes if p.reasons == ("top",)]  # the cap is full
    finally:
        for c in children:
            stop(c)


def test_process_that_exits_mid_scan_does_not_raise_and_is_reported_as_exited() -> None:
    child = spawn("import time; print('ready', flush=True); time.sleep(120)")
    collector = ProcfsCollector(REAL, TRACK_ALL)
    first = collect(collector)
    assert child.pid in {p.pid for p in first.processes}
    # The listing is taken while the child is alive; it dies before its files are read.
    tick = Tick(REAL, now_ms())
    tick._pids = list_pids(REAL.proc)
    assert child.pid in tick.pids()
    collector._known.pop(child.pid)  # force a re-read of its identity after it is gone
    stop(child)
    second = collector.collect(tick)
    assert child.pid not in {p.pid for p in second.processes}
    third = collect(collector)
    gone = [e for e in (*second.exited, *third.exited) if e.pid == child.pid]
    assert len(gone) == 1


def test_pid_listed_but_never_existing_is_skipped() -> None:
    tick = Tick(REAL, now_ms())
    tick._pids = {**list_pids(REAL.proc), 2**22 + 12345: 1}
    reading = ProcfsCollector(REAL, TRACK_ALL).collect(tick)
    assert 2**22 + 12345 not in {p.pid for p in reading.processes}


def test_reused_pid_is_a_new_identity(tmp_path: Path) -> None:
    """A different start time under the same PID is an exit plus a new process."""
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 500 kB\n")
    (proc / "stat").write_text("cpu 0 0\nbtime 1700000000\n")

    def write(start: int, argv0: str) -> None:
        (proc / "77" / "stat").write_text(
            f"77 (x) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1000 10 0\n"
        )
        (proc / "77" / "cmdline").write_bytes(argv0.encode() + b"\0")
        (proc / "77" / "status").write_text("Uid:\t1000\t1000\t1000\t1000\nRssAnon:\t8 kB\n")
        (proc / "77" / "statm").write_text("100 10 0 0 0 0 0\n")

    roots = Roots(proc=proc, sys=tmp_path / "sys")
    collector = ProcfsCollector(roots, TRACK_ALL)
    write(100, "llama-server")
    first = collector.collect(Tick(roots, 1000, _pids={77: 5}))
    assert [(p.pid, p.start_ticks, p.engine) for p in first.processes] == [(77, 100, "llama.cpp")]
    write(900, "ollama")
    second = collector.collect(Tick(roots, 2000, _pids={77: 6}))  # new inode: verify
    assert [(p.pid, p.start_ticks, p.engine) for p in second.processes] == [(77, 900, "ollama")]
    assert [(e.pid, e.start_ticks, e.last_seen_ms) for e in second.exited] == [(77, 100, 1000)]


def test_parse_stat_handles_hostile_comm() -> None:
    data = (
        b"4242 (evil) (name ) x) S 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 "
        b"1000 10 18446744073709551615\n"
    )
    assert parse_stat(data) == ("evil) (name ) x", 1, 987654)
    assert parse_stat(b"garbage") is None
    assert parse_stat(b"1 (x) S") is None


def test_parse_cmdline_nul_and_rewritten_titles() -> None:
    assert parse_cmdline(b"llama-server\0-m\0a b.gguf\0") == ("llama-server", "-m", "a b.gguf")
    assert parse_cmdline(b"postgres: writer process   ") == ("postgres:", "writer", "process")
    assert parse_cmdline(b"") == ()


def test_parse_status_and_meminfo_units() -> None:
    row, uid = parse_status(
        b"Uid:\t1000\t1000\t1000\t1000\nRssAnon:\t  2048 kB\nRssFile:\t1 kB\nVmHWM: junk kB\n", 9
    )
    assert (row.rss_anon_bytes, row.rss_file_bytes, row.hwm_bytes, uid) == (
        2 * MIB,
        1024,
        None,
        1000,
    )
    host = host_device(
        b"MemTotal: 100 kB\nMemAvailable: 40 kB\nHugePages_Total: 2\n"
        b"HugePages_Free: 1\nHugepagesize: 2048 kB\n"
    )
    assert (host.total_bytes, host.used_bytes, host.available_bytes) == (102400, 61440, 40960)
    assert (host.hugepages_total_bytes, host.hugepages_free_bytes) == (4 * MIB, 2 * MIB)
    assert host.swap_total_bytes is None


def test_sigkill_of_untracked_processes_is_not_an_exit_event() -> None:
    child = spawn("import time; print('ready', flush=True); time.sleep(120)")
    collector = ProcfsCollector(REAL, CollectorOptions(top_n=0))
    collect(collector)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    time.sleep(0.05)
    assert all(e.pid != child.pid for e in collect(collector).exited)


@pytest.mark.parametrize("rescan_s", [0.0, 3600.0])
def test_top_n_ranking_follows_rescan_cadence(rescan_s: float) -> None:
    # every process is "top": what decides is only whether the ranking was refreshed
    collector = ProcfsCollector(
        REAL, CollectorOptions(top_n=100_000, max_tracked=100_000, rescan_s=rescan_s)
    )
    collect(collector)
    child = spawn(ALLOC)
    try:
        reading = collect(collector)
        tracked = child.pid in {p.pid for p in reading.processes}
        # Re-ranked at once when a rescan is due; otherwise it waits for the next rescan.
        assert tracked is (rescan_s == 0.0)
    finally:
        stop(child)


def test_pss_rotates_and_an_unreadable_rollup_does_not_starve_the_others(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 500 kB\n")
    for pid in (10, 11, 12):
        d = proc / str(pid)
        d.mkdir()
        (d / "stat").write_text(
            f"{pid} (llama-server) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {pid} 1 1 0\n"
        )
        (d / "cmdline").write_bytes(b"llama-server\0")
        (d / "status").write_text("RssAnon:\t4 kB\n")
        if pid != 10:  # pid 10's smaps_rollup is missing: as if denied
            (d / "smaps_rollup").write_text(f"Rss: 8 kB\nPss: {pid} kB\n")
    roots = Roots(proc=proc, sys=tmp_path / "sys")
    opts = CollectorOptions(pss_interval_s=60, pss_per_tick=1, top_n=0)
    collector = ProcfsCollector(roots, opts)
    got = []
    for i in range(5):
        reading = collector.collect(Tick(roots, 1000 + i * 1000, _pids={10: 1, 11: 1, 12: 1}))
        got.append(sorted((m.pid, m.pss_bytes) for m in reading.memory if m.pss_bytes))
    # one read per tick; every process gets its turn; then nobody until 60 s have passed
    assert got == [[], [(11, 11 * 1024)], [(12, 12 * 1024)], [], []]
    later = collector.collect(Tick(roots, 62_000, _pids={10: 1, 11: 1, 12: 1}))
    assert [m.pid for m in later.memory if m.pss_bytes] == []  # pid 10's turn again (denied)
    later = collector.collect(Tick(roots, 63_000, _pids={10: 1, 11: 1, 12: 1}))
    assert [m.pid for m in later.memory if m.pss_bytes] == [11]


def test_a_process_that_execs_a_server_after_it_was_first_seen_is_recognised(
    tmp_path: Path,
) -> None:
    """A wrapper (``sh -c '...; exec llama-server ...'``, a service's start script) keeps its
    pid and start time across exec: seen first as ``sh``, it must be seen as the server
    once it has exec'd, not kept as the shell it was."""
    exe = tmp_path / "llama-server"
    exe.symlink_to(sys.executable)
    code = "import time; print('ready', flush=True); time.sleep(120)"
    child = subprocess.Popen(
        ["/bin/sh", "-c", f'read go; exec "{exe}" -c "{code}" -m /models/q.gguf'],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        collector = ProcfsCollector(REAL, CollectorOptions(top_n=0))
        first = collect(collector)  # the shell, waiting: not a server
        assert child.pid not in {p.pid for p in first.processes}
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "ready"
        after = collect(collector)
        info = next((p for p in after.processes if p.pid == child.pid), None)
        assert info is not None, "the exec'd server is not tracked"
        assert info.engine == "llama.cpp" and info.comm == "llama-server"
        assert info.argv[-2:] == ("-m", "/models/q.gguf")
    finally:
        stop(child)  # type: ignore[arg-type]
