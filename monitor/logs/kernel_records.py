"""What the kernel-log parser (kernel.py) reads and reports: one /dev/kmsg record, an OOM
kill's figures (kB as the kernel prints them) and one kernel event."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KernelEvent", "KmsgRecord", "OomKill"]

MAX_MESSAGE_CHARS = 4096


# --- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    priority: int  # as printed: facility << 3 | level (kernel facility is 0)
    seq: int
    ts_usec: int  # CLOCK_MONOTONIC µs since boot
    message: str  # \xNN escapes decoded

    @property
    def level(self) -> int:
        return self.priority & 7

    @property
    def facility(self) -> int:
        return self.priority >> 3


@dataclass(frozen=True, slots=True)
class OomKill:
    pid: int
    comm: str
    total_vm_kb: int | None
    anon_rss_kb: int | None
    file_rss_kb: int | None
    shmem_rss_kb: int | None
    uid: int | None
    pgtables_kb: int | None
    oom_score_adj: int | None
    constraint: str | None  # "CONSTRAINT_NONE" | "CONSTRAINT_MEMCG" | "CONSTRAINT_CPUSET" | ...
    memcg: str | None  # oom_memcg=<path> (the cgroup whose limit was hit); None: global
    task_memcg: str | None  # the victim's cgroup
    ts_usec: int | None

    @property
    def rss_kb(self) -> int | None:
        """anon + file + shmem RSS at the kill (None when anon-rss is unknown)."""
        if self.anon_rss_kb is None:
            return None
        return self.anon_rss_kb + (self.file_rss_kb or 0) + (self.shmem_rss_kb or 0)


@dataclass(frozen=True, slots=True)
class KernelEvent:
    kind: str  # "oom_kill" | "oom_invoked" | "xid" | "amdgpu_error" | "oomd_kill" | "app_oom"
    # | "engine_oom"
    ts_usec: int | None
    message: str
    pid: int | None
    comm: str | None
    data: dict[str, object]  # JSON-safe values; for "oom_kill" the OomKill fields and more

    @property
    def oom_kill(self) -> OomKill | None:
        """The OomKill of an ``oom_kill`` event (rebuilt from ``data``)."""
        d = self.data
        pid = _opt_int(d.get("pid"))
        if self.kind != "oom_kill" or pid is None:
            return None
        return OomKill(
            pid=pid,
            comm=_opt_str(d.get("comm")) or "",
            total_vm_kb=_opt_int(d.get("total_vm_kb")),
            anon_rss_kb=_opt_int(d.get("anon_rss_kb")),
            file_rss_kb=_opt_int(d.get("file_rss_kb")),
            shmem_rss_kb=_opt_int(d.get("shmem_rss_kb")),
            uid=_opt_int(d.get("uid")),
            pgtables_kb=_opt_int(d.get("pgtables_kb")),
            oom_score_adj=_opt_int(d.get("oom_score_adj")),
            constraint=_opt_str(d.get("constraint")),
            memcg=_opt_str(d.get("memcg")),
            task_memcg=_opt_str(d.get("task_memcg")),
            ts_usec=_opt_int(d.get("ts_usec")),
        )


def _opt_int(value: object) -> int | None:
    """``value`` when it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None
