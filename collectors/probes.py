"""Collectors whose hardware may be absent, imported only once a probe finds it.

The DRM collector (collectors/drm.py) and the amdsmi collector (collectors/amdsmi.py) are
on by default, but on most boxes (an NVIDIA one, a CPU-only one) they find nothing, every
tick: all they do is raise :class:`~collectors.base.NoData`. Importing them costs a
one-shot command (``vramscope status``, a cold ``predict``) about 8 ms of module code,
tables and six dataclasses (issue 32 item 4, bench/RESULTS.md "Fourth pass").
:class:`DeferredCollector` stands in for such a collector: each tick until its probe says
the hardware is there it raises the same NoData the collector would; from then on it
imports the collector once and hands every call to it.

Probes, each the first step of the real collector's own discovery, so they agree with it:

* DRM: a primary node ``sys/class/drm/cardN`` whose ``device/uevent`` names a driver of
  :data:`DRIVERS` (collectors/drm.py ``_discover``). The collector re-discovers its
  devices itself once it runs.
* amdsmi: the Python package ``amdsmi`` can be found (``importlib.util.find_spec``, or it
  is already imported). A package that is there but fails to import is the collector's
  to report (collectors/amdsmi.py ``load_amdsmi``); an absent one is cached, as the
  collector caches its import failure.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable

from collectors._fs import listdir, try_read_bytes
from collectors.base import Collector, CollectorOptions, NoData, Reading, Roots, Tick

DRIVERS: dict[str, str] = {"amdgpu": "amd", "i915": "intel", "xe": "intel"}
CARD_RE = re.compile(r"card[0-9]+")
NOT_INSTALLED = (
    "python package amdsmi is not installed (optional extra vramscope[amd], which needs "
    "ROCm's libamd_smi.so); AMD GPUs are still read by the drm collector"
)


def parse_uevent(data: bytes) -> dict[str, str]:
    """``KEY=value`` lines of a sysfs ``uevent`` file."""
    out: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, found, value = line.partition("=")
        if found:
            out[key.strip()] = value.strip()
    return out


def drm_absent(roots: Roots) -> str | None:
    """None when a DRM card of a known driver is there; else the DRM collector's NoData."""
    drm_dir = roots.sys / "class/drm"
    try:
        names = listdir(drm_dir)
    except OSError:
        names = []
    for name in names:
        if CARD_RE.fullmatch(name):
            data = try_read_bytes(drm_dir / name / "device/uevent")
            if data is not None and parse_uevent(data).get("DRIVER", "") in DRIVERS:
                return None
    return f"no amdgpu/i915/xe device under {drm_dir}"


def amdsmi_absent(roots: Roots) -> str | None:
    """None when the amdsmi package can be imported (or tried); else NOT_INSTALLED."""
    if "amdsmi" in sys.modules:
        return None
    try:
        found = importlib.util.find_spec("amdsmi") is not None
    except (ImportError, ValueError):
        found = True  # let the collector's own import say what is wrong
    return None if found else NOT_INSTALLED


class DeferredCollector:
    """A collector imported only once ``absent`` (its probe) returns None (see above).

    ``cache_absence``: a probe whose "absent" cannot change while the process runs (a
    package not installed) is not asked again."""

    def __init__(
        self,
        name: str,
        absent: Callable[[Roots], str | None],
        load: Callable[[], Callable[[Roots, CollectorOptions], Collector]],
        roots: Roots,
        options: CollectorOptions,
        cache_absence: bool = False,
    ) -> None:
        self.name = name
        self.roots = roots
        self.options = options
        self._absent = absent
        self._load = load
        self._cache_absence = cache_absence
        self._absence: str | None = None
        self.inner: Collector | None = None

    def collect(self, tick: Tick) -> Reading:
        if self.inner is None:
            absence = self._absence or self._absent(self.roots)
            if absence is not None:
                if self._cache_absence:
                    self._absence = absence
                raise NoData(absence)
            self.inner = self._load()(self.roots, self.options)
        return self.inner.collect(tick)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def _drm() -> Callable[[Roots, CollectorOptions], Collector]:
    from collectors.drm import DrmCollector

    return DrmCollector


def _amdsmi() -> Callable[[Roots, CollectorOptions], Collector]:
    from collectors.amdsmi import AmdsmiCollector

    return AmdsmiCollector


def deferred_drm(roots: Roots, options: CollectorOptions) -> Collector:
    """The DRM collector, imported once a card of a known driver shows in sysfs."""
    return DeferredCollector("drm", drm_absent, _drm, roots, options)


def deferred_amdsmi(roots: Roots, options: CollectorOptions) -> Collector:
    """The amdsmi collector, imported once the amdsmi package can be found."""
    return DeferredCollector("amdsmi", amdsmi_absent, _amdsmi, roots, options, True)
