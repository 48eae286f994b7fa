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
