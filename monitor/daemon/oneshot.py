"""One tick of this machine for a command (``diagnose``, ``predict``): a Sampler made for
the call and closed after it, so nothing (NVML handles, /proc state) outlives it. The
TUI's live source and the daemon keep their Sampler open between ticks instead."""

from __future__ import annotations

from collections.abc import Iterable

from collectors.base import CollectorOptions, Roots, Snapshot


class OneShotSampler:
    """``sample()``: a fresh Sampler over ``roots`` (``enabled``: the collectors to run,
    None for all), sampled once (PSS not read: it costs a page-table walk per process)
    and closed."""

    def __init__(self, roots: Roots, enabled: Iterable[str] | None = None) -> None:
        self.roots = roots
        self.enabled = enabled

    def sample(self) -> Snapshot:
        from monitor.daemon.sampler import Sampler

        sampler = Sampler(self.roots, CollectorOptions(pss_per_tick=0), self.enabled)
        try:
            return sampler.sample()
        finally:
            sampler.close()
