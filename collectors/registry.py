"""The explicit table of collectors (node_exporter's registry, not discovery).

Order matters: GPU collectors run first and add the PIDs that hold GPU memory to
``Tick.gpu_pids``, so that the ``/proc`` collector tracks them in the same tick.
The name is also the ``collector`` column in the database and the key in the config.
The DRM and amdsmi collectors are imported only once their probe finds their hardware
(collectors/probes.py): a one-shot command on a box without it does not pay for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collectors.base import Collector, CollectorOptions, Roots
from collectors.nvml import NvmlCollector
from collectors.probes import deferred_amdsmi, deferred_drm
from collectors.procfs import ProcfsCollector


@dataclass(frozen=True, slots=True)
class CollectorSpec:
    name: str
    factory: Callable[[Roots, CollectorOptions], Collector]
    default_enabled: bool
    about: str


REGISTRY: tuple[CollectorSpec, ...] = (
    CollectorSpec(
        "nvml",
        NvmlCollector,
        True,
        "NVIDIA GPUs via NVML (libnvidia-ml.so.1 from the driver), incl. unified-memory GB10",
    ),
    CollectorSpec(
        "drm",
        deferred_drm,
        True,
        "AMD/Intel GPUs via DRM sysfs (mem_info_*) and /proc/PID/fdinfo, no ROCm needed",
    ),
    CollectorSpec(
        "amdsmi",
        deferred_amdsmi,
        True,
        "AMD GPUs via ROCm amd-smi (optional amdsmi package): sensors, fills gaps left by drm",
    ),
    CollectorSpec(
        "procfs",
        ProcfsCollector,
        True,
        "host RAM (/proc/meminfo) and tracked processes (/proc/PID/status)",
    ),
)
