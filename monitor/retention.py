"""How long rows are kept (its own module: reading the config must not import SQLite)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Retention:
    """How long rows are kept. Raw samples are rolled up per minute before they go."""

    raw_hours: float = 6.0
    minute_days: float = 30.0
    runs_hours: float = 6.0
