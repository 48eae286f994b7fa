"""The explicit table of collectors (node_exporter's registry, not discovery).

Order matters: GPU collectors run first and add the PIDs that hold GPU memory to
``Tick.gpu_pids``, so that the ``/proc`` collector tracks them in the same tick.
The name is also the ``collector`` column in the database and the key in the config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collectors.amdsmi import AmdsmiCollector
from collectors.base import Collector, CollectorOptions, Roots
from collectors.drm import DrmCollector
from collectors.nvml import NvmlCollector
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
        DrmCollector,
        True,
        "AMD/Intel GPUs via DRM sysfs (mem_info_*) and /proc/PID/fdinfo, no ROCm needed",
    ),
    CollectorSpec(
        "amdsmi",
        AmdsmiCollector,
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
