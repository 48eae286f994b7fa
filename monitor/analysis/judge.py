"""Is a measured figure "as expected"? One rule for `diagnose`, the TUI and the alerts.

A server is over its estimate (or budget) only when the excess is beyond BOTH a relative
and an absolute threshold: +95 % on a 0.25 GiB embedding server is a finding, 15 MiB over
on a 20 MiB helper is noise, and 0.3 GiB over on a 40 GiB model is within the estimator's
error. Defaults: 20 % and 128 MiB; ``[alerts] surprise_pct`` and ``surprise_min_mib``
change both.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.units import MIB

DEFAULT_OVER_PCT = 20.0
DEFAULT_OVER_MIN_MIB = 128.0


@dataclass(frozen=True, slots=True)
class Tolerance:
    over_pct: float = DEFAULT_OVER_PCT
    over_min_bytes: int = int(DEFAULT_OVER_MIN_MIB * MIB)

    @classmethod
    def from_settings(cls, settings: dict[str, float]) -> Tolerance:
        """From the config's ``[alerts]`` values (``Config.alert_settings``)."""
        return cls(
            float(settings.get("surprise_pct", DEFAULT_OVER_PCT)),
            int(float(settings.get("surprise_min_mib", DEFAULT_OVER_MIN_MIB)) * MIB),
        )


def is_over(measured_bytes: int, expected_bytes: int, tol: Tolerance = Tolerance()) -> bool:
    """True when ``measured`` exceeds ``expected`` by more than both thresholds."""
    excess = measured_bytes - expected_bytes
    return excess > tol.over_min_bytes and excess > expected_bytes * tol.over_pct / 100.0
