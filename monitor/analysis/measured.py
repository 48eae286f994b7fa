"""What one process really holds: the one definition of "measured" every view uses.

measured = device memory (VRAM + GTT on every GPU, as the driver reports it)
         + host anonymous memory (RssAnon: llama.cpp's host buffers, KV in RAM, the heap)
         + resident file-backed memory (RssFile: the mmap'd GGUF weights that are in the
           page cache now, and the process's shared libraries)

Unknown is never 0: when the driver reports a GPU process without its memory (NVML's "not
available", WSL2/WDDM, some containers) the device part, and so the total, is ``None``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from collectors.base import ProcessMemory

HOST = "host"


@dataclass(frozen=True, slots=True)
class Measured:
    """One process at one tick; each part ``None`` when it is unknown."""

    device_bytes: int | None  # VRAM + GTT summed over GPUs; 0 when it holds no GPU memory
    host_anon_bytes: int | None
    host_file_bytes: int | None
    unknown_device_ids: tuple[str, ...] = ()  # GPUs that list it without a size

    @property
    def total_bytes(self) -> int | None:
        """The sum; ``None`` when a GPU holds it without saying how much. A host part that
        could not be read (its /proc entry gone or hidden) adds nothing and is ``None``
        on its own field, so the GPU figure, the bulk of a served model, is still shown."""
        if self.device_bytes is None:
            return None
        return self.device_bytes + (self.host_anon_bytes or 0) + (self.host_file_bytes or 0)

    def as_dict(self) -> dict[str, int | list[str] | None]:
        """The JSON object every document carries (status, post-mortem): parts and total."""
        return {
            "total_bytes": self.total_bytes,
            "device_bytes": self.device_bytes,
            "host_anon_bytes": self.host_anon_bytes,
            "host_file_bytes": self.host_file_bytes,
            "unknown_device_ids": list(self.unknown_device_ids),
        }

    @property
    def why_unknown(self) -> str | None:
        """One sentence naming what is not known, or None when the total is known."""
        if self.unknown_device_ids:
            return (
                f"the driver lists it on {', '.join(self.unknown_device_ids)} without its "
                "memory (NVML 'not available': WSL2/WDDM, or a container that hides it)"
            )
        return None


def measure(pid: int, rows: Iterable[ProcessMemory], helpers: Iterable[int] = ()) -> Measured:
    """The :class:`Measured` of ``pid`` from one tick's memory rows (all devices), with the
    GPU memory of its forked helpers (servers.recognise.helper_parents). A helper's host
    RSS is not added: its pages are the server's, shared copy-on-write."""
    helper_pids = set(helpers)
    device: int | None = 0
    unknown: list[str] = []
    anon: int | None = None
    file: int | None = None
    seen_host = False
    for m in rows:
        if m.pid != pid and (m.pid not in helper_pids or m.device_id == HOST):
            continue
        if m.device_id == HOST:
            seen_host = True
            anon, file = m.rss_anon_bytes, m.rss_file_bytes
            continue
        if m.vram_bytes is None and m.gtt_bytes is None:
            unknown.append(m.device_id)
            continue
        device = (device or 0) + (m.vram_bytes or 0) + (m.gtt_bytes or 0)
    if unknown:
        device = None
    if not seen_host:
        anon = file = None
    return Measured(device, anon, file, tuple(unknown))


def measured_by_device(
    pid: int, rows: Iterable[ProcessMemory], helpers: Iterable[int] = ()
) -> dict[str, int | None]:
    """What ``pid`` holds on each device this tick, to set beside an estimate's
    ``by_device``: a GPU's VRAM + GTT (its forked helpers' too, as :func:`measure` counts
    them), ``None`` where the GPU lists the process without a size; the host's resident
    anonymous + file pages (RssAnon + RssFile of /proc/PID/status: mapped weights the
    kernel has paged in count, those it has not, or has evicted, do not)."""
    helper_pids = set(helpers)
    out: dict[str, int | None] = {}
    for m in rows:
        if m.pid != pid and (m.pid not in helper_pids or m.device_id == HOST):
            continue
        if m.device_id == HOST:
            parts = (m.rss_anon_bytes, m.rss_file_bytes)
            out[HOST] = None if None in parts else sum(p or 0 for p in parts)
            continue
        if m.vram_bytes is None and m.gtt_bytes is None:
            out[m.device_id] = None
        elif out.get(m.device_id, 0) is not None:
            out[m.device_id] = (
                (out.get(m.device_id) or 0) + (m.vram_bytes or 0) + (m.gtt_bytes or 0)
            )
    return out
