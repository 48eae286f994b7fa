"""The breakdown of a model whose memory a GPU lists without a size."""

from __future__ import annotations

from fake_source import GIB, T0, host, server, snap

from collectors.base import DeviceSample, ProcessMemory
from tui.source import FrameBuilder
from tui.widgets.breakdown import Breakdown


def test_a_model_with_unknown_memory_shows_cannot_judge_instead_of_failing(models) -> None:
    """NVML can list a process with no used-memory figure (its per-process counters off):
    the diagnosis is "unknown" and its excess is None; the breakdown says so."""
    q4 = models["qwen3-8b-q4_k.gguf"]
    gpu = DeviceSample(
        "nvml:GPU-0",
        "nvml",
        "nvidia",
        "NVIDIA RTX 4080",
        "dedicated",
        16 * GIB,
        9 * GIB,
        7 * GIB,
        0,
    )
    frame = FrameBuilder().build(
        snap(
            T0,
            [gpu, host(64 * GIB, 40 * GIB)],
            [server(8101, ["llama-server", "-m", q4, "-c", "16384", "-np", "2"])],
            [ProcessMemory(8101, "nvml:GPU-0", vram_bytes=None)],
        )
    )
    (row,) = frame.models
    assert row.measured_bytes is None
    assert row.diagnosis is not None and row.diagnosis.verdict == "unknown"

    text = Breakdown.describe(row, 100).plain

    assert "cannot judge" in text
    assert "qwen3-8b-q4_k.gguf" in text
