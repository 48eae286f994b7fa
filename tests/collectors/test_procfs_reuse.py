"""collectors/procfs.py's per-tick work for a tracked process that did not change (issue 32
item 3), on the real /proc with our own real processes: only the status lines the rows are
made of are picked out (``_fs.pick_kv``, never a whole ``parse_kv``), and last tick's
``ProcessMemory`` / ``ProcessInfo`` objects are handed out again while those lines are the
same bytes (the noise case); memory that moved, a changed reason, are new objects at the
next tick (the signal cases). Counted, never timed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fake_server
import pytest

from collectors import _fs
from collectors.base import CollectorOptions, Roots, Tick, now_ms
from collectors.procfs import MEMINFO_KEYS, STATUS_KEYS, ProcfsCollector

REAL = Roots()
NO_TOP = CollectorOptions(top_n=0, pss_per_tick=0)  # only servers and GPU holders tracked
GROWER = """
import sys
hold = []
print("ready", flush=True)
for line in sys.stdin:
    hold.append(b"x" * (64 << 20))  # written, so resident
    print("grown", flush=True)
"""


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every whole-file ``parse_kv`` the collector makes (the real one, counted)."""
    seen: list[int] = []
    real = _fs.parse_kv

    def counted(data: bytes, sep: bytes = b":") -> dict[str, bytes]:
        seen.append(len(data))
        return real(data, sep)

    monkeypatch.setattr(_fs, "parse_kv", counted)
    return seen


@pytest.fixture
def grower() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", GROWER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc
    proc.kill()
    proc.wait()


def tick(collector: ProcfsCollector, at_ms: int, gpu_pids: set[int] | None = None):
    return collector.collect(Tick(REAL, at_ms, gpu_pids=gpu_pids or set()))


def ours(reading, pid: int):
    info = next(p for p in reading.processes if p.pid == pid)
    row = next(m for m in reading.memory if m.pid == pid)
    return info, row


def test_pick_kv_is_parse_kv_of_the_wanted_lines() -> None:
    """On the kernel's own files, every key picked as parse_kv reads it."""
    for path, keys in (
        ("/proc/self/status", STATUS_KEYS),
        ("/proc/meminfo", MEMINFO_KEYS),
        (
            "/proc/self/status",
            tuple(k.encode() for k in _fs.parse_kv(Path("/proc/self/status").read_bytes())),
        ),
    ):
        data = Path(path).read_bytes()
        whole = _fs.parse_kv(data)
        picked = _fs.pick_kv(data, keys)
        assert picked == {k: v for k, v in whole.items() if k.encode() in keys}
        assert picked  # found something: the test is not vacuous


def test_pick_kv_edges() -> None:
    data = b"Pss_Anon: 5 kB\nPss: 7 kB\nSwapPss: 9 kB\nPss: 8 kB\nLast:\t 3 kB"
    assert _fs.pick_kv(data, (b"Pss", b"Last", b"Missing")) == {"Pss": b"8 kB", "Last": b"3 kB"}
    assert _fs.pick_kv(b"First: 1\nOther: 2\n", (b"First",)) == {"First": b"1"}
    assert _fs.pick_kv(b"", (b"Pss",)) == {}
    assert _fs.pick_kv(b"Pss 5\nPss_Anon: 4", (b"Pss",)) == {}  # no "Pss:" line


def test_an_idle_server_is_not_rebuilt(parses: list[int]) -> None:
    """Noise: a server whose status lines do not move gives last tick's objects back, and
    no tick parses a whole status or meminfo (main: 1 + one per tracked process a tick)."""
    collector = ProcfsCollector(REAL, NO_TOP)
    with fake_server.running(["llama-server", "-m", "tiny.gguf", "-c", "512"]) as server:
        start = now_ms()
        first = ours(tick(collector, start), server.pid)
        built = (collector.rows_built, collector.infos_built)
        for i in range(1, 11):
            again = ours(tick(collector, start + i * 1000), server.pid)
            assert again[0] is first[0] and again[1] is first[1]
        assert (collector.rows_built, collector.infos_built) == built
    assert first[0].engine == "llama.cpp" and first[1].rss_anon_bytes
    assert parses == []


def test_memory_that_moved_is_read_at_the_next_tick(grower: subprocess.Popen[str]) -> None:
    """Signal: 64 MiB written between two ticks is a new row at the second, with the
    bytes; the ProcessInfo, which did not change, stays the same object."""
    collector = ProcfsCollector(REAL, NO_TOP)
    gpu = {grower.pid}
    start = now_ms()
    info, row = ours(tick(collector, start, gpu), grower.pid)
    assert ours(tick(collector, start + 1000, gpu), grower.pid)[1] is row
    assert grower.stdin is not None and grower.stdout is not None
    grower.stdin.write("grow\n")
    grower.stdin.flush()
    assert grower.stdout.readline() == "grown\n"
    info2, row2 = ours(tick(collector, start + 2000, gpu), grower.pid)
    assert row2 is not row
    assert row2.rss_anon_bytes - row.rss_anon_bytes >= 60 << 20
    assert row2.hwm_bytes > row.hwm_bytes
    assert info2 is info


def test_a_changed_reason_is_a_new_info(grower: subprocess.Popen[str]) -> None:
    """Signal: a process tracked for one more reason (now a GPU holder and a top process)
    is a new ProcessInfo saying so, at the next tick."""
    collector = ProcfsCollector(REAL, CollectorOptions(top_n=0, pss_per_tick=0))
    start = now_ms()
    info, _ = ours(tick(collector, start, {grower.pid}), grower.pid)
    assert info.reasons == ("gpu",)
    collector._top = {grower.pid}  # as a rescan ranking it would leave it
    info2, _ = ours(tick(collector, start + 1000, {grower.pid}), grower.pid)
    assert info2 is not info and info2.reasons == ("gpu", "top")
    assert info2.argv == info.argv and info2.start_ticks == info.start_ticks


def test_the_exec_window_is_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Noise: without the connector, a process past its first 5 s costs no start-time sum
    a tick (main: one per known process per tick); signal: a young one is still re-read
    each tick (its stat), an old one not."""
    with fake_server.running(["sleep-not", "x"]) as young:
        collector = ProcfsCollector(REAL, NO_TOP)
        sums: list[int] = []
        real = collector._started_at_ms
        monkeypatch.setattr(collector, "_started_at_ms", lambda t: sums.append(t) or real(t))
        start = now_ms()
        tick(collector, start)
        first = len(sums)
        assert first >= len(collector._known)  # each new process, once
        reads = collector.stat_reads
        tick(collector, start + 1000)  # ours is young: its stat is read again
        assert collector.stat_reads > reads
        assert collector._young(collector._known[young.pid], start + 1000)
        reads = collector.stat_reads
        late = start + 60_000
        tick(collector, late)
        tick(collector, late + 1000)
        assert not collector._young(collector._known[young.pid], late)
        # two ticks over every known process: a sum only for what is new or rebuilt (a
        # process appearing on the box, a python one's torch check), not one each
        assert len(sums) - first < len(collector._known)
        assert collector.stat_reads - reads < len(collector._known)  # the old: not re-read
