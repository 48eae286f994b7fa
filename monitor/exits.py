"""How a process ended: one pure classification of its exit status and the records
around it (kernel OOM kills, an engine's out-of-memory line, the load watch).

The exit status comes from the kernel's process-event connector
(collectors/proc_events.py), else from a zombie's ``/proc/PID/stat`` field 52
(collectors/procfs.py), else it is unknown; a kernel OOM kill record naming the pid says
who sent a SIGKILL. Only OOM kills, crashes and engine OOMs alert: a server stopped by
SIGTERM (llama-swap swapping models does it all the time) or exiting 0 never pages anyone.

It imports nothing of ours and sits at the bottom of monitor/ with ``errors`` and ``units``
(docs/architecture.md): the daemon that classifies each exit, the exit judge
(analysis/exits_judged.py), the alert rules and the reports share this one table.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass

STOP_SIGNALS = frozenset({_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP})
CRASH_SIGNALS = frozenset(
    {
        _signal.SIGSEGV,
        _signal.SIGABRT,
        _signal.SIGBUS,
        _signal.SIGILL,
        _signal.SIGFPE,
        _signal.SIGTRAP,
        _signal.SIGSYS,
    }
)
OOM_CAUSES = frozenset({"oom_killed", "cgroup_oom_killed", "oomd_killed", "engine_oom"})
ALERT_CAUSES = OOM_CAUSES | {"crashed"}
# all causes: exited, exited_error, stopped, stopped_during_load, killed, signalled,
# unknown, and the alerting ones above


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """What is known about one exit (None: unknown)."""

    exit_code: int | None = None
    exit_signal: int | None = None
    core_dumped: bool | None = None
    loading: bool = False  # the load watch had not seen it finish loading
    kernel_kill: str | None = None  # "oom_kill" | "oomd_kill": a kill record names the pid
    constraint: str | None = None  # the OOM record's constraint (CONSTRAINT_MEMCG: a cgroup)
    engine_oom: bool = False  # its log said CUDA/HIP out of memory shortly before


@dataclass(frozen=True, slots=True)
class ExitClass:
    cause: str
    text: str  # "killed by the kernel OOM killer (SIGKILL)", "stopped (SIGTERM)", ...
    severity: str  # "info" | "warning" | "critical"

    @property
    def alerts(self) -> bool:
        return self.cause in ALERT_CAUSES

    @property
    def is_oom(self) -> bool:
        return self.cause in OOM_CAUSES


def signal_name(number: int | None) -> str | None:
    if number is None:
        return None
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify(f: ExitFacts) -> ExitClass:
    """The cause of one exit (see the module docstring for which ones alert)."""
    sig = signal_name(f.exit_signal)
    core = " (core dumped)" if f.core_dumped else ""
    if f.kernel_kill == "oom_kill":
        if f.constraint == "CONSTRAINT_MEMCG":
            return ExitClass(
                "cgroup_oom_killed",
                "killed by the kernel OOM killer: its cgroup's memory limit (CONSTRAINT_MEMCG)",
                "critical",
            )
        return ExitClass("oom_killed", "killed by the kernel OOM killer", "critical")
    if f.kernel_kill == "oomd_kill":
        return ExitClass("oomd_killed", "killed by systemd-oomd", "critical")
    failed = (f.exit_code not in (None, 0)) or f.exit_signal in CRASH_SIGNALS
    if f.engine_oom and failed:
        how = f"exited with code {f.exit_code}" if f.exit_code is not None else f"{sig}{core}"
        return ExitClass(
            "engine_oom",
            f"ran out of GPU memory (CUDA/HIP out of memory in its log), then {how}",
            "critical",
        )
    if f.exit_signal is not None:
        if f.exit_signal in STOP_SIGNALS:
            if f.loading:
                return ExitClass("stopped_during_load", f"stopped during load ({sig})", "info")
            return ExitClass("stopped", f"stopped ({sig})", "info")
        if f.exit_signal == _signal.SIGKILL:
            during = " during load" if f.loading else ""
            return ExitClass("killed", f"killed (SIGKILL) by someone else{during}", "warning")
        if f.exit_signal in CRASH_SIGNALS:
            return ExitClass("crashed", f"crashed ({sig}){core}", "critical")
        return ExitClass("signalled", f"ended by {sig}{core}", "warning")
    if f.exit_code == 0:
        if f.loading:  # llama-server catches SIGTERM/SIGINT and returns 0; a failed load is 1
            return ExitClass(
                "stopped_during_load", "stopped during load (exited 0 before it was ready)", "info"
            )
        return ExitClass("exited", "exited 0", "info")
    if f.exit_code is not None:
        during = " during load" if f.loading else ""
        return ExitClass("exited_error", f"exited with code {f.exit_code}{during}", "warning")
    during = " during load" if f.loading else ""
    return ExitClass("unknown", f"exited{during} (exit status unknown)", "info")


def classify_legacy(gone: object) -> tuple[str, str, str]:
    """(cause, severity, text) of an exit record: the daemon's classification when it made
    one (``cause``), else one from the exit status the record carries."""
    cause = getattr(gone, "cause", None)
    how = getattr(gone, "how", None)
    verdict = classify(
        ExitFacts(
            getattr(gone, "exit_code", None),
            getattr(gone, "exit_signal", None),
            getattr(gone, "core_dumped", None),
        )
    )
    if cause is None:
        if verdict.cause == "unknown":
            return verdict.cause, verdict.severity, how or verdict.text
        unreaped = (
            "; not reaped by its parent (state Z)" if getattr(gone, "state", None) == "Z" else ""
        )
        return verdict.cause, verdict.severity, verdict.text + unreaped
    severity = (
        "critical"
        if cause in ALERT_CAUSES
        else (
            "info"
            if cause in ("exited", "stopped", "stopped_during_load", "unknown")
            else "warning"
        )
    )
    return cause, severity, how or verdict.text
