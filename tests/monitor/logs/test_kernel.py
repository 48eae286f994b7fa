"""Kernel-log OOM / GPU-fault parser against recorded-shape lines (tests/fixtures/kernlog)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.base import DeviceSample
from monitor.logs.kernel import PENDING_RECORDS, KernelLogParser, parse_journal_json, parse_lines
from monitor.logs.kernel_patterns import parse_kmsg_record
from monitor.logs.kernel_records import KernelEvent, KmsgRecord, OomKill
from monitor.logs.kmsg import device_for_pci, to_device_events

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kernlog"


def fixture_lines(name: str) -> list[str]:
    lines = (FIXTURES / name).read_text().splitlines()
    assert lines[0].startswith("# source:"), name
    return [line for line in lines if not line.startswith("#")]


def kinds(events: list[KernelEvent]) -> list[str]:
    return [e.kind for e in events]


def test_every_fixture_names_its_source() -> None:
    names = sorted(p.name for p in FIXTURES.glob("*.txt"))
    assert len(names) >= 6
    for name in names:
        assert (FIXTURES / name).read_text().startswith("# source:")


# --- record formats -------------------------------------------------------------------


def test_kmsg_record() -> None:
    rec = parse_kmsg_record("6,81242,5123590000,-;oom_reaper: reaped\\x20process 1\n")
    assert rec == KmsgRecord(6, 81242, 5123590000, "oom_reaper: reaped process 1")
    assert rec.level == 6 and rec.facility == 0
    assert parse_kmsg_record("12,7,100,c,extra;hello") == KmsgRecord(12, 7, 100, "hello")
    assert parse_kmsg_record("3,1,2,-;first\n SUBSYSTEM=pci\n") == KmsgRecord(3, 1, 2, "first")


@pytest.mark.parametrize(
    "line",
    [
        " SUBSYSTEM=memory",
        " DEVICE=+pci:0000:01:00.0",
        "",
        "4,81234",
        ",,,;",
        "a,b,c;d",
        "[ 1.0] not kmsg",
        None,
        5,
    ],
)
def test_kmsg_record_rejects(line: object) -> None:
    assert parse_kmsg_record(line) is None  # type: ignore[arg-type]


# --- OOM killer -----------------------------------------------------------------------


def test_global_oom_kmsg_6x_merged() -> None:
    events = parse_lines(fixture_lines("oom-global-kmsg-6x.txt"))
    assert kinds(events) == ["oom_invoked", "oom_kill"]
    invoked, kill_event = events
    assert invoked.comm == "llama-server" and invoked.pid is None
    assert invoked.ts_usec == 5123456789
    assert invoked.data["gfp_mask"] == "0x140cca"
    assert invoked.data["gfp_flags"] == "GFP_HIGHUSER_MOVABLE|__GFP_COMP"
    assert invoked.data["order"] == 0 and invoked.data["oom_score_adj"] == 0
    assert kill_event.oom_kill == OomKill(
        pid=40211,
        comm="llama-server",
        total_vm_kb=50331648,
        anon_rss_kb=31457280,
        file_rss_kb=4096,
        shmem_rss_kb=2048,
        uid=1000,
        pgtables_kb=62208,
        oom_score_adj=0,
        constraint="CONSTRAINT_NONE",
        memcg=None,
        task_memcg="/user.slice/user-1000.slice/session-3.scope",
        ts_usec=5123457600,
    )
    assert kill_event.oom_kill.rss_kb == 31457280 + 4096 + 2048
    assert kill_event.pid == 40211 and kill_event.comm == "llama-server"
    d = kill_event.data
    assert d["scope"] == "global" and d["has_summary"] and d["has_killed_line"]
    assert d["invoked_by"] == "llama-server" and d["clock"] == "monotonic"
    json.dumps(d)  # JSON-safe


def test_memcg_oom_dmesg_5x() -> None:
    events = parse_lines(fixture_lines("oom-memcg-dmesg-5x.txt"))
    assert kinds(events) == ["oom_invoked", "oom_kill"]
    assert events[0].ts_usec == 8123456789 and events[0].data["oom_score_adj"] == 200
    kill = events[1].oom_kill
    assert kill is not None
    assert kill.constraint == "CONSTRAINT_MEMCG"
    assert kill.memcg == "/system.slice/vllm.service"
    assert kill.task_memcg == "/system.slice/vllm.service/worker"
    assert (kill.pid, kill.comm, kill.uid, kill.oom_score_adj) == (5120, "python3", 998, 200)
    assert (kill.total_vm_kb, kill.anon_rss_kb, kill.file_rss_kb, kill.shmem_rss_kb) == (
        20971520,
        16252928,
        65536,
        0,
    )
    d = events[1].data
    assert d["nodemask"] == "0-1,3" and d["cpuset"] == "vllm" and d["mems_allowed"] == "0-1"
    assert d["scope"] == "memcg"
    assert d["memcg_usage_kb"] == 16777216 and d["memcg_limit_kb"] == 16777216


def test_oom_4x_padded_summary_and_old_killed_line() -> None:
    events = parse_lines(fixture_lines("oom-4x-dmesg.txt"))
    assert kinds(events) == ["oom_invoked", "oom_kill"]
    kill = events[1].oom_kill
    assert kill == OomKill(
        2211,
        "ollama_llama_se",
        33554432,
        29360128,
        1024,
        0,
        999,
        None,
        None,
        "CONSTRAINT_NONE",
        None,
        "/",
        345300100,
    )


def test_oom_3x_kernlog_and_dmesg_t() -> None:
    events = parse_lines(fixture_lines("oom-3x-kernlog.txt"))
    assert kinds(events) == ["oom_invoked", "oom_kill", "oom_kill"]
    assert events[0].data == {
        "gfp_mask": "0x280da",
        "order": 0,
        "oom_score_adj": 0,
        "clock": "monotonic",
    }
    assert events[1].oom_kill == OomKill(
        777, "python", 8388608, 7340032, 512, None, None, None, None, None, None, None, 1234600001
    )
    assert not events[1].data["has_summary"]
    last = events[2]
    assert last.ts_usec is None and last.comm == "my worker" and last.pid == 778


def test_summary_without_killed_line_expires() -> None:
    parser = KernelLogParser()
    summary = (
        "oom-kill:constraint=CONSTRAINT_CPUSET,nodemask=(null),cpuset=gpu,mems_allowed=0,"
        "oom_memcg=/a,task_memcg=/a/b,task=worker,pid=77,uid=5"
    )
    assert parser.feed(summary, 10) == []
    out: list[KernelEvent] = []
    for i in range(PENDING_RECORDS):
        out += parser.feed(f"unrelated {i}", 11 + i)
    assert out == []
    out = parser.feed("one more", 99)
    assert kinds(out) == ["oom_kill"]
    kill = out[0].oom_kill
    assert kill == OomKill(
        77, "worker", None, None, None, None, 5, None, None, "CONSTRAINT_CPUSET", "/a", "/a/b", 10
    )
    assert out[0].data["has_killed_line"] is False
    assert parser.flush() == []


def test_flush_emits_pending_summary_and_no_duplicate() -> None:
    parser = KernelLogParser()
    parser.feed(
        "oom-kill:constraint=CONSTRAINT_MEMORY_POLICY,nodemask=0,global_oom,"
        "task_memcg=/,task=x,pid=9,uid=0"
    )
    flushed = parser.flush()
    assert kinds(flushed) == ["oom_kill"]
    assert flushed[0].oom_kill.constraint == "CONSTRAINT_MEMORY_POLICY"  # type: ignore[union-attr]
    assert parser.flush() == []


def test_killed_line_first_then_summary_is_not_duplicated() -> None:
    parser = KernelLogParser()
    out = parser.feed(
        "Out of memory: Killed process 9 (x) total-vm:4kB, anon-rss:1kB, "
        "file-rss:2kB, shmem-rss:0kB, UID:0 pgtables:8kB oom_score_adj:-100"
    )
    assert out[0].oom_kill.oom_score_adj == -100  # type: ignore[union-attr]
    parser.feed(
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),global_oom,"
        "task_memcg=/,task=x,pid=9,uid=0"
    )
    assert parser.flush() == []


def test_interleaved_kills_merge_by_pid() -> None:
    parser = KernelLogParser()
    for pid in (1, 2):
        parser.feed(
            f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),oom_memcg=/m{pid},"
            f"task_memcg=/m{pid},task=t{pid},pid={pid},uid=0"
        )
    a = parser.feed(
        "Memory cgroup out of memory: Killed process 2 (t2) total-vm:1kB, "
        "anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"
    )
    b = parser.feed(
        "Memory cgroup out of memory: Killed process 1 (t1) total-vm:1kB, "
        "anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"
    )
    assert a[0].oom_kill.memcg == "/m2" and b[0].oom_kill.memcg == "/m1"  # type: ignore[union-attr]
    assert parser.flush() == []


# --- GPU drivers ----------------------------------------------------------------------


def test_xid_lines() -> None:
    events = parse_lines(fixture_lines("xid.txt"))
    assert kinds(events) == ["xid"] * 4
    old, new, remap, bus = events
    assert (old.pid, old.comm, old.data["pci"], old.data["xid"]) == (None, None, "0000:08:00", 31)
    assert old.data["detail"].startswith("Ch 0000003b, intr 10000000. MMU Fault")
    assert (new.pid, new.comm, new.data["pci"]) == (1587983, "exe", "0000:ca:00")
    assert new.data["description"] == "GPU memory page fault"
    assert (remap.pid, remap.comm, remap.data["xid"]) == (1896, None, 63)
    assert remap.data["detail"].startswith("Row Remapper")
    assert (bus.pid, bus.comm, bus.data["xid"], bus.ts_usec) == (None, None, 79, 9004000004)


def test_amdgpu_lines() -> None:
    events = parse_lines(fixture_lines("amdgpu.txt"))
    assert kinds(events) == ["amdgpu_error"] * 6
    fault, fault5, timeout, begin, done, gem = events
    assert (fault.pid, fault.comm, fault.ts_usec) == (4242, "llama-server", 7000000001)
    assert fault.data | {} == {
        "error": "page_fault",
        "pci": "0000:03:00.0",
        "hub": "gfxhub",
        "retry": None,
        "src_id": 0,
        "ring": 24,
        "vmid": 7,
        "pasid": 32796,
        "address": "0x00007f1234560000",
        "client": "10",
        "fault_status": "0x00701031",
        "clock": "monotonic",
    }
    assert (fault5.pid, fault5.comm, fault5.data["retry"], fault5.data["pasid"]) == (
        999,
        "python3",
        True,
        32769,
    )
    assert (timeout.pid, timeout.comm, timeout.data["ring"]) == (3131, "ollama", "gfx_0.0.0")
    assert (timeout.data["signaled_seq"], timeout.data["emitted_seq"]) == (1234, 1236)
    assert begin.data["phase"] == "begin" and done.data["phase"] == "succeeded"
    assert done.data["reset_count"] == 2
    assert gem.data["size_bytes"] == 17179869184 and gem.data["errno"] == -12


# --- journal --------------------------------------------------------------------------


def test_journal_lines() -> None:
    events = parse_lines(fixture_lines("journal.txt"))
    assert kinds(events) == [
        "oom_kill",
        "oomd_kill",
        "oomd_kill",
        "oomd_kill",
        "app_oom",
        "app_oom",
        "xid",
    ]
    kill = events[0]
    assert kill.ts_usec == 1718000000000002 and kill.data["clock"] == "realtime"
    assert kill.data["monotonic_usec"] == 5123457600 and kill.data["boot_id"] == "b1"
    assert kill.oom_kill.task_memcg == "/system.slice/llama.service"  # type: ignore[union-attr]
    pressure, swap, unit = events[1:4]
    assert pressure.data["reason"] == "memory_pressure"
    assert pressure.data["cgroup"].endswith("app-gnome-Terminal-1234.scope")
    assert pressure.data["pressure_pct"] == 72.31 and pressure.data["limit_pct"] == 50.0
    assert pressure.data["duration"] == "20s"
    assert swap.data["reason"] == "swap" and swap.data["swap_used_bytes"] == 8589934592
    assert unit.data == {
        "action": "unit_killed",
        "unit": "ollama.service",
        "processes": 3,
        "clock": "realtime",
    }
    llama, torch = events[4:6]
    assert (llama.pid, llama.comm, llama.data["unit"]) == (4001, "llama-server", "llama.service")
    assert "cudaMalloc failed" in llama.message
    assert torch.data["source"] == "pytorch" and torch.data["tried_to_allocate"] == "2.00 GiB"
    assert torch.data["gpu"] == 0
    assert events[6].data["xid"] == 79  # MESSAGE as a byte array


def test_parse_journal_json_single_and_stateful() -> None:
    lines = fixture_lines("journal.txt")
    alone = parse_journal_json(lines[0])  # a summary line alone: summary-only kill
    assert isinstance(alone, KernelEvent) and alone.data["has_killed_line"] is False
    parser = KernelLogParser()
    assert parse_journal_json(lines[0], parser=parser) is None
    merged = parse_journal_json(lines[1], parser=parser)
    assert isinstance(merged, KernelEvent) and merged.data["has_summary"] is True
    assert parse_journal_json('{"MESSAGE": "hello"}') is None


def test_kernel_out_of_memory_lines_are_not_app_oom() -> None:
    events = parse_lines(
        [
            "[ 1.0] Out of memory: Kill process 5 (x) score 1 or sacrifice child",
            "[ 1.1] nouveau 0000:01:00.0: out of memory",
        ]
    )
    assert events == []


# --- damage ---------------------------------------------------------------------------


def test_malformed_lines_give_nothing() -> None:
    assert parse_lines(fixture_lines("malformed.txt")) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=20))
def test_never_raises_on_random_text(lines: list[str]) -> None:
    parse_lines(lines)
    parser = KernelLogParser()
    for line in lines:
        assert isinstance(parser.feed(line), list)
        parse_kmsg_record(line)
        parse_journal_json(line)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(p.name for p in FIXTURES.glob("*.txt"))), st.data())
def test_never_raises_on_cut_fixture_lines(name: str, data: st.DataObject) -> None:
    lines = fixture_lines(name)
    cut = [line[: data.draw(st.integers(0, len(line)))] for line in lines]
    assert all(isinstance(e, KernelEvent) for e in parse_lines(cut))


def test_state_is_bounded() -> None:
    parser = KernelLogParser()
    for pid in range(1000):
        parser.feed(
            f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),global_oom,"
            f"task_memcg=/,task=t,pid={pid},uid=0"
        )
    assert len(parser._summaries) <= 8
    assert len(parser.flush()) <= 8


# --- filing GPU driver events under the sampled device ----------------------------------


def _gpu(device_id: str, bus: str | None, vendor: str = "nvidia") -> DeviceSample:
    return DeviceSample(device_id, "test", vendor, None, "dedicated", None, None, pci_bus_id=bus)


def test_driver_events_are_filed_under_the_sampled_device() -> None:
    events = parse_lines(fixture_lines("xid.txt")) + parse_lines(fixture_lines("amdgpu.txt"))
    devices = [
        _gpu("nvml:GPU-ca", "0000:CA:00.0"),
        _gpu("nvml:GPU-08", "0000:08:00.0"),
        _gpu("nvml:GPU-01", "0000:01:00.0"),
        _gpu("drm:0000:03:00.0", "0000:03:00.0", "amd"),
        _gpu("host", None, "host"),
    ]
    stored = to_device_events(events, 0, devices)
    assert [(e.kind, e.device_id) for e in stored] == [
        ("xid", "nvml:GPU-08"),
        ("xid", "nvml:GPU-ca"),
        ("xid", "0000:10:1c"),  # not sampled here: its PCI address stays the subject
        ("xid", "nvml:GPU-01"),
    ] + [("amdgpu_error", "drm:0000:03:00.0")] * 6
    assert [e.data["pci"] for e in stored[:2]] == ["0000:08:00", "0000:ca:00"]  # kept
    # With two AMD GPUs, a message naming none cannot be placed: it stays with the host.
    two = [*devices, _gpu("drm:0000:04:00.0", "0000:04:00.0", "amd")]
    subjects = [e.device_id for e in to_device_events(events, 0, two)][4:]
    assert subjects.count("host") == 2 and subjects.count("drm:0000:03:00.0") == 4


def test_device_for_pci_forms() -> None:
    devices = [_gpu("nvml:a", "0000:01:00.0"), _gpu("drm:b", "0000:c5:00.0"), _gpu("host", None)]
    assert device_for_pci("0000:01:00", devices) == "nvml:a"  # NVRM: no function
    assert device_for_pci("01:00", devices) == "nvml:a"  # no domain either
    assert device_for_pci("0000:C5:00.0", devices) == "drm:b"  # amdgpu: full address
    assert device_for_pci("0000:c5:00.1", devices) is None  # another function
    assert device_for_pci("0000:02:00", devices) is None
