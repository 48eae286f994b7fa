"""Recorded box states for `predict --state`: ``status --json`` documents built from the
collector types (the same JSON a real `vramscope status --json` writes), and the seed
stories' parts (issue 18): a Strix Halo APU whose GTT an embedding server already holds."""

from __future__ import annotations

import json
from pathlib import Path

from collectors.base import DeviceSample, ProcessInfo, ProcessMemory, Snapshot
from monitor.report.status import to_json
from monitor.units import GIB, MIB

APU = "drm:0000:c5:00.0"
EMBED_PID = 4242


def write_state(
    path: Path, devices: list[DeviceSample], procs: list[tuple[ProcessInfo, list[ProcessMemory]]]
) -> Path:
    """A ``status --json`` file of one moment: these devices and processes."""
    snap = Snapshot(
        1_800_000_000_000,
        tuple(devices),
        tuple(p for p, _ in procs),
        tuple(m for _, rows in procs for m in rows),
        (),
        (),
        (),
    )
    path.write_text(json.dumps(to_json(snap)))
    return path


def host(available: int, total: int = 128 * GIB) -> DeviceSample:
    return DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", total, total - available,
        available_bytes=available,
    )  # fmt: skip


def embedding_server(pid: int = EMBED_PID) -> ProcessInfo:
    """The seed's "16 GiB" embedding server: 16 slots, -ub 8192 (it really holds 23.8)."""
    argv = (
        "llama-server", "-m", "/models/qwen3-embedding-8b.gguf", "--embedding",
        "-c", "8192", "-np", "16", "-ub", "8192",
    )  # fmt: skip
    return ProcessInfo(pid, 1000, None, 1, 1000, "llama-server", argv, "llama.cpp",
                       ("inference", "gpu"))  # fmt: skip


def strix_halo(gtt_used: int) -> DeviceSample:
    """A Ryzen AI Max+ 395's GPU view: 512 MiB carve-out (300 MiB used), GTT up to 120 GiB."""
    return DeviceSample(
        APU,
        "drm",
        "amd",
        "Strix Halo",
        "unified",
        total_bytes=int(120.5 * GIB),
        used_bytes=gtt_used + 300 * MIB,
        vram_total_bytes=512 * MIB,
        vram_used_bytes=300 * MIB,
        gtt_total_bytes=120 * GIB,
        gtt_used_bytes=gtt_used,
        gtt_ceiling_bytes=120 * GIB,
    )
