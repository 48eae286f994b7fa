"""How long rows are kept (its own module: reading the config must not import SQLite)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Retention:
    """How long rows are kept. Raw samples are rolled up per minute before they go.
    Events (kills, crashes, alerts) outlive the samples, but both by age and by count:
    a flood of them (a noisy log, a hostile one) cannot grow the database without end."""

    raw_hours: float = 6.0
    minute_days: float = 30.0
    runs_hours: float = 6.0
    events_days: float = 365.0
    events_max: int = 200_000  # the newest are kept


LOG_DERIVED_KINDS = frozenset({"engine_oom", "app_oom"})
"""Events parsed from text anyone who can write an engine's log can write (a followed
file, llama-swap's stream, a unit's journal outside the kernel transport:
monitor/logs/kernel.py ``_feed_engine`` and ``_on_app_oom``)."""
KEPT_KINDS = frozenset({"oom_kill", "oomd_kill", "oom_invoked", "xid", "amdgpu_error", "crash"})
"""Kernel records (kmsg, or a journal's kernel transport) and crashes; with every
``process_exit`` and ``alert_*`` event they are the evidence a post-mortem needs."""


def is_log_derived(kind: str) -> bool:
    """An event of a followed log's text: merged per minute, pruned first."""
    return kind in LOG_DERIVED_KINDS


def is_kept(kind: str) -> bool:
    """Kernel OOM kills and records, process exits and crashes, alerts: never pruned to
    make room for other events (only by age, or when they alone exceed ``events_max``)."""
    return kind in KEPT_KINDS or kind == "process_exit" or kind.startswith("alert_")
