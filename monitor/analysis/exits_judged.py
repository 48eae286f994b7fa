"""Exits judged in one place: which exits become events, which alert, and their words.

The cause of an exit is monitor/exits.py's classification (the daemon's, from the
process-event connector, a zombie's ``/proc/PID/stat``, a kernel OOM kill record, an
engine's out-of-memory line; else one from the exit status the record carries). From it
and the process's stored row this decides what the writer records (typed records of
monitor/store/records.py; the store makes no decision of its own):

- a ``process_exit`` event for every exit worth telling: an inference server's always,
  vramscope's own CLI runs never, any other process only when it was seen for at least
  ``SHORT_LIVED_MS`` (a busy box has short-lived top-N processes come and go every
  minute);
- a ``crash`` event (critical: the alert rules page on it, and the prune keeps the
  full-resolution samples around it) for an exit that alerts: an OOM kill (kernel,
  cgroup, systemd-oomd), an engine's out-of-memory exit, a crash signal. Such an exit is
  told even when its process has no row (it died before its second tick);
- a server the connector saw exec and die before any sample is always told.

A server stopped by SIGTERM (llama-swap swapping models) or exiting 0 never alerts.
Pure: no I/O; the daemon hands :data:`JUDGE` to the store it opens.
"""

from __future__ import annotations

import json
from typing import Any

from collectors.base import ExitedProcess
from collectors.proc_events import is_server_comm
from monitor.exits import ALERT_CAUSES, classify_legacy, signal_name
from monitor.store.records import EventRecord, ExitRecord, ProcessRow

SHORT_LIVED_MS = 60_000  # an exit of a process seen for less than this is no event ...
OWN_NAMES = ("vramscope",)  # ... nor one of our own CLI runs (unless they alert)


def exit_is_event(
    comm: str,
    engine: str | None,
    argv_json: str | None,
    first_seen_ms: int | None,
    last_seen_ms: int,
) -> bool:
    """An inference server's exit is always an event; vramscope's own CLI runs never are;
    any other process only when it was seen for at least ``SHORT_LIVED_MS``."""
    if engine is not None:
        return True
    try:
        argv = json.loads(argv_json or "[]")
    except ValueError:
        argv = []
    words = [str(a) for a in argv[:4]] if isinstance(argv, list) else []
    if (
        comm in OWN_NAMES
        or any(w.rsplit("/", 1)[-1] in OWN_NAMES for w in words)
        or ("-m" in words and "monitor" in words)
    ):
        return False
    return first_seen_ms is None or last_seen_ms - first_seen_ms >= SHORT_LIVED_MS


def keeps_record(gone: ExitedProcess) -> bool:
    """An exit that alerts (crash, OOM kill) keeps its process's row, however short."""
    return classify_legacy(gone)[0] in ALERT_CAUSES


def judge_exit(gone: ExitedProcess, row: ProcessRow | None, ts_ms: int) -> ExitRecord:
    """What the writer records about one exit seen at ``ts_ms`` (see the module
    docstring); ``row``: its process's row, None when none was written."""
    cause, severity, how = classify_legacy(gone)
    alerts = cause in ALERT_CAUSES
    if row is None:
        told = alerts or (gone.exit_source == "connector" and is_server_comm(gone.comm or ""))
        who: tuple[int | None, str, str | None] = (None, gone.comm or "?", None)
    else:
        told = alerts or exit_is_event(
            row.comm, row.engine, row.argv_json, row.first_seen_ms, gone.last_seen_ms
        )
        who = (row.id, row.comm, row.engine)
    if not told:
        return ExitRecord(cause, ())
    return ExitRecord(cause, _exit_events(gone, who, ts_ms, (cause, severity, how)))


def _exit_events(
    gone: ExitedProcess,
    who: tuple[int | None, str, str | None],
    ts_ms: int,
    verdict: tuple[str, str, str],
) -> tuple[EventRecord, ...]:
    """The ``process_exit`` event of an exit, and its ``crash`` event (at the time it was
    last seen) when it alerts; ``who``: (process row id or None, comm, engine)."""
    cause, severity, how = verdict
    process_id, comm, engine = who
    pid, last_seen_ms = gone.pid, gone.last_seen_ms
    data: dict[str, Any] = {
        "pid": pid,
        "start_ticks": gone.start_ticks,
        "process_id": process_id,
        "engine": engine,
        "comm": comm,
        "last_seen_ms": last_seen_ms,
        "how": how,
        "cause": cause,
        "exit_code": gone.exit_code,
        "exit_signal": gone.exit_signal,
        "signal": signal_name(gone.exit_signal),
        "core_dumped": gone.core_dumped,
        "exit_source": gone.exit_source,
    }
    subject = f"{comm}[{pid}]"
    told = EventRecord(
        ts_ms,
        "process_exit",
        severity,
        subject,
        f"{comm} (pid {pid}) {how}; last seen {ts_ms - last_seen_ms} ms before",
        data,
    )
    if cause not in ALERT_CAUSES:
        return (told,)
    crash = EventRecord(
        last_seen_ms, "crash", "critical", subject, f"{comm} (pid {pid}) {how}", data
    )
    return (told, crash)


class ExitsJudged:
    """The exit judge the daemon hands its store (monitor/store/records.py ExitJudge)."""

    def keeps_record(self, gone: ExitedProcess) -> bool:
        return keeps_record(gone)

    def judge(self, gone: ExitedProcess, row: ProcessRow | None, ts_ms: int) -> ExitRecord:
        return judge_exit(gone, row, ts_ms)


JUDGE = ExitsJudged()
