"""``vramscope events`` as text: one line per event, and one per crash with its evidence.

A crash is stored as several events (monitor/store/database.py ``_exit_events``: a
``crash`` event at the last moment it was seen and its ``process_exit`` event; the kernel's
``oom_kill`` record naming its pid, systemd-oomd's ``oomd_kill``, the ``oom_invoked`` line
before a kill, or the engine's ``engine_oom`` log line the daemon joined it to). The text
shows them as one event, its headline the ``crash`` (or the ``process_exit`` when it did
not alert), the evidence indented beneath it. An event is evidence of an exit only by the
daemon's own join rules (monitor/daemon/loop.py: a kill record names the pid and comes
within 120 s; an engine line precedes the exit by at most 120 s and the exit's cause says
so), so an unrelated record is never folded in. ``events --json`` is not grouped: it keeps
every event whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from monitor.device_names import relabel
from monitor.report.status import wrapped
from monitor.textsafe import terminal_safe

WINDOW_MS = 120_000  # the daemon's join window (loop.py recent_kills, last_app_oom_ms)
KILLED = {"oom_killed": "oom_kill", "cgroup_oom_killed": "oom_kill", "oomd_killed": "oomd_kill"}
Event = dict[str, Any]


def _key(row: Event) -> tuple[Any, Any] | None:
    data = row.get("data") or {}
    pid = data.get("pid")
    return (pid, data.get("start_ticks")) if isinstance(pid, int) else None


EVIDENCE_KINDS = frozenset({"oom_kill", "oomd_kill", "engine_oom", "oom_invoked"})


def _evidence_for(
    exit_row: Event, rows: Sequence[Event], candidates: Sequence[int], used: set[int]
) -> list[int]:
    """Indexes of the records the daemon joined to this exit (see the module docstring);
    ``candidates``: the indexes of rows of EVIDENCE_KINDS."""
    data = exit_row.get("data") or {}
    cause, pid, ts = data.get("cause"), data.get("pid"), exit_row["ts_ms"]
    if cause not in KILLED and cause != "engine_oom":
        return []
    out: list[int] = []
    for i in candidates:
        r = rows[i]
        if i in used or abs(r["ts_ms"] - ts) > WINDOW_MS:
            continue
        if _joined(cause, pid, ts, r):
            out.append(i)
    kills = [rows[i]["ts_ms"] for i in out if rows[i]["kind"] == "oom_kill"]
    for i in candidates:  # the "invoked oom-killer" line of that same kill
        r = rows[i]
        invoked = r["kind"] == "oom_invoked" and i not in used and i not in out
        if invoked and any(0 <= k - r["ts_ms"] <= 1000 for k in kills):
            out.append(i)
    return out


def _joined(cause: Any, pid: Any, exit_ms: int, r: Event) -> bool:
    """Whether record ``r`` is one the daemon joined to an exit of this cause and pid: a
    kill record of the kind its cause names, naming its pid (systemd-oomd's names none);
    an engine out-of-memory line before it, for an engine_oom exit."""
    kind, named = r["kind"], (r.get("data") or {}).get("pid")
    if kind in ("oom_kill", "oomd_kill") and KILLED.get(cause) == kind:
        return named == pid or (kind == "oomd_kill" and named is None)
    return kind == "engine_oom" and cause == "engine_oom" and r["ts_ms"] <= exit_ms


def grouped(rows: Sequence[Event]) -> list[tuple[Event, list[Event]]]:
    """(headline, evidence) per event shown, in time order of each group's first row."""
    exits = {_key(r): i for i, r in enumerate(rows) if r["kind"] == "process_exit" and _key(r)}
    crashes: dict[Any, int] = {}
    for i, r in enumerate(rows):
        if r["kind"] == "crash" and _key(r) in exits:
            crashes.setdefault(_key(r), i)
    candidates = [i for i, r in enumerate(rows) if r["kind"] in EVIDENCE_KINDS]
    members: dict[int, list[int]] = {}  # first index of a group -> its indexes
    used: set[int] = set()
    for key, at in exits.items():
        group = [crashes[key], at] if key in crashes else [at]
        used.update(group)
        group += _evidence_for(rows[at], rows, candidates, used)
        used.update(group)
        members[min(group)] = sorted(group, key=lambda i: (i != group[0], rows[i]["ts_ms"], i))
    out: list[tuple[Event, list[Event]]] = []
    for i, r in enumerate(rows):
        if i in members:
            head, *rest = members[i]
            out.append((rows[head], [rows[j] for j in rest]))
        elif i not in used:
            out.append((r, []))
    return out


HEAD_INDENT = " " * 21  # a headline's continuation: under its severity column
EVIDENCE_INDENT = " " * 4  # an evidence line's continuation: under its time


def render(
    rows: Sequence[Event], labels: dict[str, str] | None = None, width: int | None = None
) -> list[str]:
    """The text lines of ``vramscope events``; device ids in messages read as ``labels``
    gives them (monitor/device_names.py: ``GPU0 RTX 4060``). ``width``: the columns to fit
    (monitor/report/status.py ``output_width``), a long message wrapped at spaces beneath
    its line and a word longer than a line cut with an ellipsis; None: every line whole."""
    names = labels or {}
    lines: list[str] = []
    for head, evidence in grouped(rows):
        when = datetime.fromtimestamp(head["ts_ms"] / 1000).strftime("%Y-%m-%d %H:%M:%S")
        line = (
            f"{when}  {terminal_safe(head['severity']):<8} {terminal_safe(head['kind']):<14} "
            f"{terminal_safe(relabel(head['message'], names))}"
        )
        lines += wrapped(line, width, HEAD_INDENT)
        for e in evidence:
            at = datetime.fromtimestamp(e["ts_ms"] / 1000).strftime("%H:%M:%S")
            message = terminal_safe(relabel(e["message"], names))
            line = f"{'':>19}  └ {at} {terminal_safe(e['kind']):<14} {message}"
            lines += wrapped(line, width, EVIDENCE_INDENT)
    return lines
