"""Parse kernel-log evidence of out-of-memory kills and GPU faults, for post-mortems.

Inputs (../shared/research/sources.md section 5):

- ``/dev/kmsg`` records ``prio,seq,ts_usec,flags;message`` (continuation lines that start
  with a space are ignored), ``dmesg`` lines ``[12345.678901] message`` (also with
  ``dmesg -x``'s ``kern  :err   :`` prefix and kern.log's ``... kernel: `` prefix), bare
  messages, and ``journalctl -o json`` lines (kernel transport, systemd-oomd, units).
- The kernel OOM killer (mm/oom_kill.c, memcontrol.c), 2.6 to 6.x: ``<comm> invoked
  oom-killer: ...``, the ``oom-kill:constraint=...`` summary (4.19+; ``pid=%5d`` padded
  before 5.x), ``Out of memory: Killed process ...`` (``UID:``, ``pgtables:`` and
  ``oom_score_adj:`` only in newer kernels; 3.x has ``Killed process`` alone and no
  ``shmem-rss``; 2.6.3x ``vsz:``), and memcg ``memory: usage %llukB, limit %llukB``.
  The summary and the Killed line are separate records: :class:`KernelLogParser` merges
  them into one ``oom_kill`` event. A summary whose Killed line never comes (lost from the
  ring buffer) is emitted alone after ``PENDING_RECORDS`` further records or on ``flush()``.
- NVIDIA ``NVRM: Xid (PCI:...): N, [pid=..., name=..., ]detail``.
- amdgpu page faults (with the following ``in process``/``in page``/``*_PROTECTION_FAULT``
  records merged in), ring timeouts (with ``Process information:``), GPU resets and the
  old-kernel ``Failed to allocate GEM object`` error.
- systemd-oomd ``Killed <cgroup> due to ...`` / ``Marked <cgroup> for killing ...`` and
  PID 1's ``<unit>: systemd-oomd killed N process(es) in this unit.``
- Userspace out-of-memory lines (llama.cpp/ggml, PyTorch ``CUDA out of memory``) from
  non-kernel sources (a unit's journal, a bare line) are reported as kind ``app_oom``,
  using :mod:`monitor.logs.server_log`'s pattern.
- An engine's own log (``KernelLogParser(source=...)``: a followed file, llama-swap's
  stream, a unit's stdout in the journal) is anyone's text: a line there that looks like
  the kernel's or systemd-oomd's is not evidence of a kill. Such a parser reports only the
  engine's out-of-memory lines, as kind ``engine_oom`` with ``data["source"]`` the log;
  kernel kinds come from ``/dev/kmsg`` or the journal's ``_TRANSPORT=kernel`` records, and
  oomd kills from records journald says systemd-oomd or PID 1 wrote (``_COMM``, ``_PID``).

Timestamps: ``ts_usec`` is the source's clock: CLOCK_MONOTONIC µs since boot for kmsg and
dmesg, ``__REALTIME_TIMESTAMP`` (µs since the epoch) for the journal; ``data["clock"]``
says which ("monotonic" / "realtime") when known. Memory fields are kB as the kernel
prints them (``K()`` of pages). Nothing here raises; all state is bounded.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict

from monitor.logs.kernel_patterns import (
    _AMD_ADDRESS,
    _AMD_DEV,
    _AMD_FAULT,
    _AMD_GEM,
    _AMD_PROCESS,
    _AMD_RESET,
    _AMD_RING,
    _AMD_STATUS,
    _GFP,
    _INVOKED,
    _KERNEL_OOM_WORDS,
    _KILLED,
    _KILLED_PREFIX,
    _MEMCG_USAGE,
    _OOMD,
    _OOMD_PRESSURE,
    _OOMD_SWAP,
    _OOMD_UNIT,
    _ORDER,
    _PYTORCH,
    _SCORE_ADJ,
    _XID,
    _int,
    _parse_summary,
    _split_line,
)
from monitor.logs.kernel_records import MAX_MESSAGE_CHARS, KernelEvent, OomKill, _opt_int, _opt_str
from monitor.logs.server_log import _OOM as _APP_OOM
from monitor.logs.server_log import _strip_prefix as _strip_llama_prefix

__all__ = ["XID_DESCRIPTIONS", "KernelLogParser", "parse_journal_json", "parse_lines"]

PENDING_RECORDS = 8  # a pending oom-kill summary / amdgpu fault expires after this many
_MAX_PENDING_SUMMARIES = 8
_CONTEXT_RECORDS = 20000  # invoked / memcg usage lines attach to a kill this close
OOMD_MESSAGE_ID = "d989611b15e44c9dbf31e3c81256e4ed"

# NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors), the ones seen on LLM boxes.
XID_DESCRIPTIONS: dict[int, str] = {
    13: "Graphics engine exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double bit ECC error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


# --- the parser -----------------------------------------------------------------------


class KernelLogParser:
    """Feed kernel-log messages one record at a time; merges multi-record reports."""

    def __init__(self, source: str | None = None) -> None:
        """``source``: the engine log this parser reads (its path, URL or ``journal:UNIT``);
        None for the kernel log or text of unknown origin."""
        self.source = source
        self._records = 0
        # pid -> (record number, summary fields, ts_usec)
        self._summaries: dict[int, tuple[int, dict[str, object], int | None]] = {}
        self._recent_kills: deque[int] = deque(maxlen=16)
        self._memcg_usage: tuple[int, int, int] | None = None  # record, usage kB, limit kB
        self._invoked: tuple[int, str] | None = None  # record, comm
        self._amd: tuple[int, KernelEvent] | None = None  # pending fault / ring timeout

    # -- public -------------------------------------------------------------------------

    def feed(
        self,
        message: str,
        ts_usec: int | None = None,
        *,
        kernel: bool = False,
        clock: str | None = None,
        oomd: bool = False,
    ) -> list[KernelEvent]:
        """One record's message. ``kernel``: known to come from the kernel log (then
        userspace OOM lines are not looked for); ``clock``: "monotonic" / "realtime";
        ``oomd``: known to come from systemd-oomd or PID 1 (for a parser with a source)."""
        try:
            if isinstance(message, bytes | bytearray):
                message = bytes(message[:MAX_MESSAGE_CHARS]).decode("utf-8", "replace")
            if not isinstance(message, str):
                return []
            if ts_usec is not None and (not isinstance(ts_usec, int) or ts_usec < 0):
                ts_usec = None
            message = message[:MAX_MESSAGE_CHARS].rstrip("\r\n")
            if self.source is not None and not kernel and not oomd:
                return self._feed_engine(message, ts_usec, clock)
            return self._feed(message, ts_usec, kernel, clock)
        except Exception:  # noqa: BLE001 - a log parser must never take its caller down
            return []

    def flush(self) -> list[KernelEvent]:
        """Emit whatever is still pending (end of input)."""
        try:
            out = [self._summary_only(pid) for pid in list(self._summaries)]
            if self._amd is not None:
                out.append(self._amd[1])
                self._amd = None
            return out
        except Exception:  # noqa: BLE001
            return []

    # -- dispatch -----------------------------------------------------------------------

    def _feed(self, msg: str, ts: int | None, kernel: bool, clock: str | None) -> list[KernelEvent]:
        self._records += 1
        out: list[KernelEvent] = []
        self._expire(out)
        event: KernelEvent | None = None
        if "Killed process" in msg:
            event = self._on_killed(msg, ts)
        elif "oom-kill:" in msg:
            self._on_summary(msg, ts)
        elif "invoked oom-killer" in msg:
            event = self._on_invoked(msg, ts)
        elif msg.startswith("memory: usage"):
            m = _MEMCG_USAGE.match(msg)
            if m:
                self._memcg_usage = (self._records, int(m.group(1)), int(m.group(2)))
        elif "NVRM: Xid" in msg:
            event = self._on_xid(msg, ts)
        elif "amdgpu" in msg:
            event = self._on_amdgpu(msg, ts, out)
        elif ("due to" in msg and ("Killed /" in msg or "Marked /" in msg)) or (
            "systemd-oomd killed" in msg
        ):
            event = self._on_oomd(msg, ts)
        elif not kernel and not any(w in msg for w in _KERNEL_OOM_WORDS) and _APP_OOM.search(msg):
            event = self._on_app_oom(msg, ts)
        if event is not None:
            out.append(event)
        if clock:
            for e in out:
                if e.ts_usec is not None:
                    e.data.setdefault("clock", clock)
        return out

    def _feed_engine(self, msg: str, ts: int | None, clock: str | None) -> list[KernelEvent]:
        """An engine log's line: its own out-of-memory errors, nothing the kernel says."""
        if any(w in msg for w in _KERNEL_OOM_WORDS) or not _APP_OOM.search(msg):
            return []
        event = self._on_app_oom(msg, ts)
        data = {"source": self.source, "engine": event.data.pop("source"), **event.data}
        if clock and ts is not None:
            data["clock"] = clock
        return [KernelEvent("engine_oom", ts, event.message, None, None, data)]

    def _expire(self, out: list[KernelEvent]) -> None:
        for pid, (record, _, _) in list(self._summaries.items()):
            if self._records - record > PENDING_RECORDS:
                out.append(self._summary_only(pid))
        if self._amd is not None and self._records - self._amd[0] > PENDING_RECORDS:
            out.append(self._amd[1])
            self._amd = None

    # -- OOM killer ---------------------------------------------------------------------

    def _on_invoked(self, msg: str, ts: int | None) -> KernelEvent | None:
        at = msg.find(_INVOKED)
        if at < 1:
            return None
        comm, rest = msg[max(0, at - 64) : at].strip(), msg[at + len(_INVOKED) :]
        data: dict[str, object] = {}
        if g := _GFP.search(rest):
            data["gfp_mask"] = g.group(1)
            if g.group(2) is not None:
                data["gfp_flags"] = g.group(2)
        if g := _ORDER.search(rest):
            data["order"] = int(g.group(1))
        if g := _SCORE_ADJ.search(rest):
            data["oom_score_adj"] = int(g.group(1))
        if "order" not in data:
            return None  # truncated
        self._invoked = (self._records, comm)
        return KernelEvent("oom_invoked", ts, msg, None, comm, data)

    def _on_summary(self, msg: str, ts: int | None) -> None:
        m = _parse_summary(msg)
        if not m:
            return
        pid = int(m["pid"])
        if pid in self._recent_kills:
            return  # its Killed line came first
        memcg = m.get(",oom_memcg=")
        data: dict[str, object] = {
            "constraint": m["constraint"],
            "nodemask": m.get(",nodemask="),
            "cpuset": m.get(",cpuset="),
            "mems_allowed": m.get(",mems_allowed="),
            "memcg": memcg,
            "task_memcg": m.get(",task_memcg="),
            "comm": m["task"],
            "uid": int(m["uid"]),
        }
        if ",global_oom" in m:
            data["scope"] = "global"
        elif memcg is not None or m["constraint"] == "CONSTRAINT_MEMCG":
            data["scope"] = "memcg"
        if len(self._summaries) >= _MAX_PENDING_SUMMARIES and pid not in self._summaries:
            self._summaries.pop(next(iter(self._summaries)))
        self._summaries[pid] = (self._records, data, ts)

    def _on_killed(self, msg: str, ts: int | None) -> KernelEvent | None:
        at = msg.find("Killed process ")
        m = _KILLED.match(msg, at) if at >= 0 else None
        if not m:
            return None
        before = _KILLED_PREFIX.search(msg, max(0, at - 82), at)
        prefix = before.group(1).strip() if before else ""
        pid = int(m.group(1))
        summary: dict[str, object] = {}
        pending = self._summaries.pop(pid, None)
        if pending is not None:
            summary = pending[1]
        if "cgroup" in prefix:
            summary.setdefault("scope", "memcg")
        elif prefix.startswith("Out of memory"):
            summary.setdefault("scope", "global")
        uid = _int(m.group(7))
        if uid is None:
            uid = _opt_int(summary.get("uid"))
        kill = OomKill(
            pid=pid,
            comm=m.group(2),
            total_vm_kb=int(m.group(3)),
            anon_rss_kb=int(m.group(4)),
            file_rss_kb=int(m.group(5)),
            shmem_rss_kb=_int(m.group(6)),
            uid=uid,
            pgtables_kb=_int(m.group(8)),
            oom_score_adj=_int(m.group(9)),
            constraint=_opt_str(summary.get("constraint")),
            memcg=_opt_str(summary.get("memcg")),
            task_memcg=_opt_str(summary.get("task_memcg")),
            ts_usec=ts,
        )
        extra = {k: summary.get(k) for k in ("nodemask", "cpuset", "mems_allowed", "scope")}
        extra["has_summary"] = pending is not None
        extra["has_killed_line"] = True
        return self._kill_event(kill, msg, extra)

    def _summary_only(self, pid: int) -> KernelEvent:
        _, data, ts = self._summaries.pop(pid)
        kill = OomKill(
            pid=pid,
            comm=str(data.get("comm") or ""),
            total_vm_kb=None,
            anon_rss_kb=None,
            file_rss_kb=None,
            shmem_rss_kb=None,
            uid=_opt_int(data.get("uid")),
            pgtables_kb=None,
            oom_score_adj=None,
            constraint=_opt_str(data.get("constraint")),
            memcg=_opt_str(data.get("memcg")),
            task_memcg=_opt_str(data.get("task_memcg")),
            ts_usec=ts,
        )
        extra = {k: data.get(k) for k in ("nodemask", "cpuset", "mems_allowed", "scope")}
        extra["has_summary"] = True
        extra["has_killed_line"] = False
        return self._kill_event(kill, "oom-kill summary without a Killed line", extra)

    def _kill_event(self, kill: OomKill, msg: str, extra: dict[str, object]) -> KernelEvent:
        data: dict[str, object] = asdict(kill)
        data.update(extra)
        if self._memcg_usage and self._records - self._memcg_usage[0] <= _CONTEXT_RECORDS:
            data["memcg_usage_kb"] = self._memcg_usage[1]
            data["memcg_limit_kb"] = self._memcg_usage[2]
            self._memcg_usage = None
        if self._invoked and self._records - self._invoked[0] <= _CONTEXT_RECORDS:
            data["invoked_by"] = self._invoked[1]
            self._invoked = None
        self._recent_kills.append(kill.pid)
        return KernelEvent("oom_kill", kill.ts_usec, msg, kill.pid, kill.comm, data)

    # -- GPU drivers --------------------------------------------------------------------

    def _on_xid(self, msg: str, ts: int | None) -> KernelEvent | None:
        m = _XID.search(msg)
        if not m:
            return None
        xid = int(m.group(2)) if len(m.group(2)) < 8 else None
        if xid is None:
            return None
        pid = _int(m.group(3))
        name = m.group(4).strip() if m.group(4) is not None else None
        if name in ("<unknown>", "'<unknown>'", ""):
            name = None
        data: dict[str, object] = {
            "pci": m.group(1),
            "xid": xid,
            "detail": m.group(5).strip(),
            "description": XID_DESCRIPTIONS.get(xid),
        }
        return KernelEvent("xid", ts, msg, pid, name, data)

    def _on_amdgpu(self, msg: str, ts: int | None, out: list[KernelEvent]) -> KernelEvent | None:
        dev = _AMD_DEV.search(msg)
        pci = dev.group(1) if dev else None
        if "page fault" in msg and (m := _AMD_FAULT.search(msg)):
            self._flush_amd(out)
            data: dict[str, object] = {
                "error": "page_fault",
                "pci": pci,
                "hub": m.group(1),
                "retry": None if m.group(2) is None else m.group(2) == "retry",
                "src_id": int(m.group(3)),
                "ring": int(m.group(4)),
                "vmid": int(m.group(5)),
                "pasid": int(m.group(6)),
            }
            pid, comm = _int(m.group(8)), m.group(7)
            event = KernelEvent("amdgpu_error", ts, msg, pid or None, comm or None, data)
            self._amd = (self._records, event)
            return None
        if "timeout" in msg and (m := _AMD_RING.search(msg)):
            self._flush_amd(out)
            data = {
                "error": "ring_timeout",
                "pci": pci,
                "ring": m.group(1),
                "signaled_seq": _int(m.group(2)),
                "emitted_seq": _int(m.group(3)),
            }
            self._amd = (self._records, KernelEvent("amdgpu_error", ts, msg, None, None, data))
            return None
        if "GPU reset" in msg and (m := _AMD_RESET.search(msg)):
            phase = m.group(2).rstrip("!")
            data = {
                "error": "gpu_reset",
                "pci": pci,
                "phase": phase,
                "reset_count": _int(m.group(1)),
            }
            return KernelEvent("amdgpu_error", ts, msg, None, None, data)
        if "GEM object" in msg and (m := _AMD_GEM.search(msg)):
            data = {
                "error": "gem_alloc_failed",
                "pci": pci,
                "size_bytes": int(m.group(1)),
                "domain": int(m.group(2)),
                "alignment": int(m.group(3)),
                "errno": int(m.group(4)),
            }
            return KernelEvent("amdgpu_error", ts, msg, None, None, data)
        if self._amd is None:
            return None
        # follow-up records of the pending fault / timeout
        record, event = self._amd
        if m := _AMD_PROCESS.search(msg):
            pid = _int(m.group(2))
            self._amd = (
                record,
                KernelEvent(
                    event.kind,
                    event.ts_usec,
                    event.message,
                    pid or event.pid,
                    m.group(1) or event.comm,
                    event.data,
                ),
            )
            if event.data.get("error") == "ring_timeout":
                self._flush_amd(out)
        elif m := _AMD_ADDRESS.search(msg):
            event.data["address"] = m.group(1)
            event.data["client"] = m.group(2)
        elif m := _AMD_STATUS.search(msg):
            event.data["fault_status"] = m.group(2)
            self._flush_amd(out)
        return None

    def _flush_amd(self, out: list[KernelEvent]) -> None:
        if self._amd is not None:
            out.append(self._amd[1])
            self._amd = None

    # -- userspace ----------------------------------------------------------------------

    def _on_oomd(self, msg: str, ts: int | None) -> KernelEvent | None:
        m = _OOMD_UNIT.search(msg)
        if m and "systemd-oomd killed" in msg:
            data: dict[str, object] = {
                "action": "unit_killed",
                "unit": m.group(1),
                "processes": _int(m.group(2)),
            }
            return KernelEvent("oomd_kill", ts, msg, None, None, data)
        m = _OOMD.search(msg)
        if not m:
            return None
        data = {"action": "killed" if m.group(1) == "Killed" else "marked", "cgroup": m.group(2)}
        reason = m.group(3)
        if p := _OOMD_PRESSURE.search(reason):
            data.update(
                reason="memory_pressure",
                monitored_cgroup=p.group(1),
                pressure_pct=float(p.group(2)),
                limit_pct=float(p.group(3)),
                duration=p.group(4),
            )
        elif s := _OOMD_SWAP.search(reason):
            data.update(
                reason="swap",
                swap_used_bytes=int(s.group(1)),
                swap_total_bytes=int(s.group(2)),
                limit_pct=float(s.group(3)),
            )
        else:
            data["reason"] = reason.strip()[:200]
        return KernelEvent("oomd_kill", ts, msg, None, None, data)

    def _on_app_oom(self, msg: str, ts: int | None) -> KernelEvent:
        line = _strip_llama_prefix(msg)
        data: dict[str, object] = {"source": "llama.cpp"}
        if m := _PYTORCH.search(line):
            gpu = m.group(3) or m.group(4)
            data = {
                "source": "pytorch",
                "backend": m.group(1),
                "tried_to_allocate": m.group(2),
                "gpu": _int(gpu),
            }
        return KernelEvent("app_oom", ts, line, None, None, data)


# --- convenience ----------------------------------------------------------------------


def parse_lines(lines: Iterable[str]) -> list[KernelEvent]:
    """Events from kmsg records, dmesg lines, journal JSON lines or bare messages."""
    parser = KernelLogParser()
    out: list[KernelEvent] = []
    if isinstance(lines, str | bytes):
        lines = lines.splitlines()
    try:
        for raw in lines:
            try:
                if isinstance(raw, bytes | bytearray):
                    raw = bytes(raw[: MAX_MESSAGE_CHARS * 4]).decode("utf-8", "replace")
                if not isinstance(raw, str) or not raw.strip():
                    continue
                if raw.lstrip().startswith("{"):
                    got = parse_journal_json(raw, parser=parser)
                    if got is not None:
                        out.extend(got if isinstance(got, list) else [got])
                    continue
                if raw[0] in " \t" and "=" in raw.split(None, 1)[0]:
                    continue  # a kmsg continuation line: " SUBSYSTEM=pci", " DEVICE=+pci:..."
                message, ts, kernel = _split_line(raw)
                clock = "monotonic" if ts is not None else None
                out.extend(parser.feed(message, ts, kernel=kernel, clock=clock))
            except Exception:  # noqa: BLE001
                continue
    except Exception:  # noqa: BLE001 - a broken iterator ends the input
        pass
    out.extend(parser.flush())
    return out


def _journal_message(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value[:MAX_MESSAGE_CHARS]).decode("utf-8", "replace")  # non-UTF-8
    return None


def parse_journal_json(
    line: str, parser: KernelLogParser | None = None
) -> KernelEvent | list[KernelEvent] | None:
    """One ``journalctl -o json`` line: None, one event, or a list when there are several.

    Pass a ``parser`` to merge across lines (the OOM summary + Killed records); without one
    each line is parsed alone (a summary line then gives a summary-only ``oom_kill``).
    """
    try:
        if isinstance(line, bytes | bytearray):
            line = bytes(line).decode("utf-8", "replace")
        if not isinstance(line, str) or len(line) > 1_000_000:
            return None
        entry = json.loads(line)
        if not isinstance(entry, dict):
            return None
        message = _journal_message(entry.get("MESSAGE"))
        if not message:
            return None
        ts = _int(str(entry.get("__REALTIME_TIMESTAMP", ""))) or None
        kernel = entry.get("_TRANSPORT") == "kernel"  # set by journald, not by the writer
        oomd = entry.get("_COMM") == "systemd-oomd" or str(entry.get("_PID")) == "1"
        own = parser is None
        p = parser if parser is not None else KernelLogParser()
        events = p.feed(message, ts, kernel=kernel, clock="realtime", oomd=oomd)
        if own:
            events.extend(p.flush())
        for event in events:
            if event.ts_usec is not None and event.data.get("clock") == "realtime":
                mono = _int(str(entry.get("_SOURCE_MONOTONIC_TIMESTAMP", "")))
                if mono is not None and kernel:
                    event.data.setdefault("monotonic_usec", mono)
                if isinstance(entry.get("_BOOT_ID"), str):
                    event.data.setdefault("boot_id", entry["_BOOT_ID"])
            if event.kind in ("app_oom", "engine_oom"):
                pid = _int(str(entry.get("_PID", "")))
                comm = entry.get("_COMM") or entry.get("SYSLOG_IDENTIFIER")
                unit = entry.get("_SYSTEMD_UNIT") or entry.get("UNIT")
                if isinstance(unit, str):
                    event.data["unit"] = unit
                events[events.index(event)] = KernelEvent(
                    event.kind,
                    event.ts_usec,
                    event.message,
                    pid,
                    comm if isinstance(comm, str) else None,
                    event.data,
                )
            elif event.kind == "oomd_kill" and "unit" not in event.data:
                unit = entry.get("UNIT") or entry.get("_SYSTEMD_UNIT")
                if isinstance(unit, str):
                    event.data["unit"] = unit
        if not events:
            return None
        return events[0] if len(events) == 1 else events
    except Exception:  # noqa: BLE001
        return None
