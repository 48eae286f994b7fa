"""Merging readings of several collectors into one snapshot."""

from __future__ import annotations

from collectors.base import DeviceSample, ProcessMemory, Reading, Roots
from collectors.registry import CollectorSpec
from monitor.daemon import sampler as sampler_mod
from monitor.daemon.sampler import Sampler, fill

GIB = 1024**3
DEV = "drm:0000:03:00.0"


def test_fill_takes_only_gaps() -> None:
    first = ProcessMemory(1, DEV, vram_bytes=5, gtt_bytes=None)
    later = ProcessMemory(1, DEV, vram_bytes=7, gtt_bytes=9, cpu_bytes=None)
    assert fill(first, later) == ProcessMemory(1, DEV, vram_bytes=5, gtt_bytes=9)
    assert fill(None, later) is later


class _Fixed:
    def __init__(self, name: str, reading: Reading) -> None:
        self.name, self.reading = name, reading

    def collect(self, tick):  # noqa: ANN001
        return self.reading

    def close(self) -> None:
        pass


def test_two_collectors_on_one_device_never_count_twice(monkeypatch) -> None:
    drm = Reading(
        devices=(DeviceSample(DEV, "drm", "amd", "RX 7900 XTX", "dedicated", 24 * GIB, 20 * GIB),),
        memory=(ProcessMemory(42, DEV, vram_bytes=19 * GIB, gtt_bytes=GIB),),
    )
    amd = Reading(
        devices=(
            DeviceSample(
                DEV,
                "amdsmi",
                "amd",
                "Radeon RX 7900 XTX",
                "dedicated",
                24 * GIB,
                21 * GIB,
                temp_c=61.0,
                power_w=250.0,
            ),
        ),
        memory=(ProcessMemory(42, DEV, vram_bytes=19 * GIB, gtt_bytes=GIB, cpu_bytes=0),),
    )
    specs = (
        CollectorSpec("drm", lambda r, o: _Fixed("drm", drm), True, ""),
        CollectorSpec("amdsmi", lambda r, o: _Fixed("amdsmi", amd), True, ""),
    )
    monkeypatch.setattr(sampler_mod, "REGISTRY", specs)
    snap = Sampler(Roots()).sample(1)
    (device,) = snap.devices
    assert (device.collector, device.used_bytes, device.temp_c) == ("drm", 20 * GIB, 61.0)
    (row,) = snap.memory
    assert (row.vram_bytes, row.gtt_bytes, row.cpu_bytes) == (19 * GIB, GIB, 0)
    assert snap.runs[0].collector == "drm" and snap.runs[1].collector == "amdsmi"
