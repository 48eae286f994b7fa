"""The kernel log's record formats (/dev/kmsg, dmesg, kern.log, bare lines) and the patterns
of its OOM killer, GPU driver, systemd-oomd and userspace out-of-memory lines, each regex
bounded; the sources are in kernel.py's docstring."""

from __future__ import annotations

import re

from monitor.logs.kernel_records import MAX_MESSAGE_CHARS, KmsgRecord

# --- record formats -------------------------------------------------------------------

_KMSG = re.compile(r"(\d{1,10}),(\d{1,20}),(\d{1,20})(?:,[^;]{0,64})?;(.*)", re.DOTALL)
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")
_DMESG = re.compile(
    r"(?:[a-z]{2,8}\s*:\s*[a-z]{3,7}\s*:\s*)?\[\s*(\d{1,12})\.(\d{1,9})\]\s?(.*)", re.DOTALL
)
_DMESG_T = re.compile(r"\[[A-Z][a-z]{2} [^\]]{10,40}\]\s?(.*)", re.DOTALL)  # dmesg -T
_SYSLOG_KERNEL = re.compile(r"^\S.{0,80}? kernel: ")


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0].rstrip("\r")


def parse_kmsg_record(line: object) -> KmsgRecord | None:
    """One ``/dev/kmsg`` record; None for continuation lines (`` KEY=value``) and garbage."""
    try:
        if isinstance(line, bytes | bytearray):
            line = bytes(line[: MAX_MESSAGE_CHARS * 4]).decode("utf-8", "replace")
        if not isinstance(line, str) or not line or line[0] in " \t":
            return None
        m = _KMSG.match(_first_line(line[: MAX_MESSAGE_CHARS * 4]))
        if not m:
            return None
        message = m.group(4)
        if "\\x" in message:
            message = _ESCAPE.sub(lambda e: chr(int(e.group(1), 16)), message)
        return KmsgRecord(
            int(m.group(1)), int(m.group(2)), int(m.group(3)), message[:MAX_MESSAGE_CHARS]
        )
    except Exception:  # noqa: BLE001
        return None


def _split_line(line: str) -> tuple[str, int | None, bool]:
    """(message, ts_usec, known kernel origin) of a kmsg record, dmesg line or bare text."""
    rec = parse_kmsg_record(line)
    if rec is not None:
        return rec.message, rec.ts_usec, True
    text = _first_line(line)[:MAX_MESSAGE_CHARS]
    kernel = False
    m = _SYSLOG_KERNEL.match(text)
    if m:
        text = text[m.end() :]
        kernel = True
    m = _DMESG.match(text)
    if m:
        frac = m.group(2)[:6].ljust(6, "0")
        return m.group(3), int(m.group(1)) * 1_000_000 + int(frac), True
    m = _DMESG_T.match(text)
    if m:
        return m.group(1), None, True
    return text, None, kernel


# --- kernel OOM patterns --------------------------------------------------------------

# Every pattern below runs on up to MAX_MESSAGE_CHARS of hostile text (a followed engine
# log): no nested or unbounded lazy quantifiers; a pattern that would start at every
# position of a long run (``\w*X``) is anchored at a word start or found by its literal.
_INVOKED = " invoked oom-killer: "
_GFP = re.compile(r"gfp_mask=(0x[0-9a-fA-F]{1,16})(?:\(([^)]{0,256})\))?")
_ORDER = re.compile(r"\border=(-?\d+)")
_SCORE_ADJ = re.compile(r"\boom_score_adj=(-?\d+)")
# The summary (dump_oom_summary, 4.19+) is cut at its known keys with str.find, not one
# regex: lazy ``(.*?)`` groups for each optional key backtrack exponentially on a crafted
# line (issue 14: 64 s for 4 KiB). Cgroup paths and comms may hold commas.
_SUMMARY_HEAD = re.compile(r"oom-kill:constraint=(\w{1,64})")
_SUMMARY_TAIL = re.compile(r",task=(.{0,64}),pid=\s{0,8}(\d{1,10}),uid=\s{0,8}(\d{1,10})\s*$")
_SUMMARY_KEYS = (
    ",nodemask=",
    ",cpuset=",
    ",mems_allowed=",
    ",global_oom",
    ",oom_memcg=",
    ",task_memcg=",
)
_KILLED_PREFIX = re.compile(r"([^:]{0,80}): $")  # "Out of memory" / "Memory cgroup out of memory"
_KILLED = re.compile(
    r"Killed process (\d{1,10}) \((.{0,64}?)\) "
    r"(?:total-vm|vsz):(\d+)kB, anon-rss:(\d+)kB, file-rss:(\d+)kB"
    r"(?:, shmem-rss:(\d+)kB)?"
    r"(?:,? UID:(\d+))?"
    r"(?:,? pgtables:(\d+)kB)?"
    r"(?:,? oom_score_adj:(-?\d+))?"
)
_MEMCG_USAGE = re.compile(r"^memory: usage (\d+)kB, limit (\d+)kB, failcnt (\d+)")

# --- GPU driver patterns --------------------------------------------------------------

_XID = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),\s*"
    r"(?:pid=(\d+|'?<unknown>'?),\s*(?:name=([^,]*),\s*)?)?(.*)"
)
_AMD_DEV = re.compile(r"amdgpu (\d{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)")
_AMD_FAULT = re.compile(
    r"\[(\w+)\]\s+(?:(retry|no-retry)\s+)?(?:VMC\s+)?page fault\s*"
    r"\(src_id:(\d+) ring:(\d+) vmid:(\d+) pasid:(\d+)"
    r"(?:, for process (.{0,64}?) pid (\d+) thread (.{0,64}?) pid (\d+))?"
)
_AMD_PROCESS = re.compile(
    r"(?:in process|Process information: process) (.{0,64}?) pid (\d+) thread"
)
_AMD_ADDRESS = re.compile(
    r"(?:in page starting at address|at page|at address) (0x[0-9a-fA-F]+) from "
    r"(?:IH client |client )?(\S+)"
)
_AMD_STATUS = re.compile(r"(?<!\w)(\w{0,32}_L2_PROTECTION_FAULT_STATUS):\s*(0x[0-9a-fA-F]+)")
_AMD_RING = re.compile(r"ring (\S+) timeout(?:, signaled seq=(\d+), emitted seq=(\d+))?")
_AMD_RESET = re.compile(r"GPU reset(?:\((\d+)\))? (begin!|succeeded!|failed)")
_AMD_GEM = re.compile(r"Failed to allocate GEM object \((\d+), (\d+), (\d+), (-?\d+)\)")

# --- systemd-oomd ---------------------------------------------------------------------

_OOMD = re.compile(r"\b(Killed|Marked) (/\S*) (?:for killing )?due to (.*)")
_OOMD_PRESSURE = re.compile(
    r"memory pressure for (\S+) being ([\d.]+)% > ([\d.]+)% for > (.{1,64}?)"
    r"(?: with reclaim activity)?$"
)
_OOMD_SWAP = re.compile(r"swap used \((\d+)\) / total \((\d+)\) being more than ([\d.]+)%")
_OOMD_UNIT = re.compile(r"^(\S+): systemd-oomd killed (\d+) process")

_PYTORCH = re.compile(
    r"(CUDA|HIP) out of memory\. Tried to allocate ([\d.]+ ?[KMGT]?i?B)"
    r"(?:\. GPU (\d+)| \(GPU (\d+))?"
)
_KERNEL_OOM_WORDS = (
    "Kill process",
    "Killed process",
    "oom-kill",
    "invoked oom",
    "no killable",
    "oom_reaper",
)


def _int(text: str | None) -> int | None:
    if text is None or not text.isdigit() and not (text[:1] == "-" and text[1:].isdigit()):
        return None
    return int(text) if len(text) <= 20 else None


def _parse_summary(msg: str) -> dict[str, str] | None:
    """The fields of an ``oom-kill:constraint=...,task=C,pid=N,uid=N`` summary, or None.

    Keys come in the kernel's order, each optional (``cpuset`` with ``mems_allowed``); a
    value runs to the next key that follows it. Linear in the line's length.
    """
    head = _SUMMARY_HEAD.search(msg)
    if not head:
        return None
    tail = _SUMMARY_TAIL.search(msg, head.end())
    if not tail:
        return None
    middle = msg[head.end() : tail.start()]
    out = {
        "constraint": head.group(1),
        "task": tail.group(1),
        "pid": tail.group(2),
        "uid": tail.group(3),
    }
    pos = 0
    for i, key in enumerate(_SUMMARY_KEYS):
        if not middle.startswith(key, pos):
            continue
        start = pos + len(key)
        ends = [e for k in _SUMMARY_KEYS[i + 1 :] if (e := middle.find(k, start)) >= 0]
        pos = min(ends, default=len(middle))
        out[key] = middle[start:pos]
    if pos != len(middle) or out.get(",global_oom", "") != "":
        return None
    return out
