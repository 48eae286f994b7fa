"""What the live TUI keeps of its frames, per tick fed: the frame store (tui/frames.py)
beside the deque of 3,600 whole frames it replaced (issue 32).

Method (results in bench/RESULTS.md): the test suite's discrete-GPU box (three
llama-servers, tests/tui/fake_source.py ``discrete_three``), each tick a new snapshot one
second later built into a whole Frame by the real ``FrameBuilder`` (picture, assessments,
rows), fed to both keepers in turn; ``tracemalloc`` (after ``gc.collect``) reads the bytes
each keeper still holds after 600, 1,800, 3,600, 5,400 and 7,200 ticks. Memory only: the
same frames go to both, so building them costs the same.

Run: .venv/bin/python bench/bench_tui_memory.py [--ticks 7200]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import tempfile
import tracemalloc
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "tui"), str(ROOT / "tests" / "fakes")]

from fake_source import discrete_three, write_models  # noqa: E402

from tui.frames import FrameStore  # noqa: E402
from tui.source import FrameBuilder  # noqa: E402

MIB = 2**20
MARKS = (600, 1800, 3600, 5400, 7200)


class WholeFrames:
    """The keeper before issue 32: ``deque(maxlen=3600)`` of whole frames."""

    def __init__(self) -> None:
        self.frames: deque[Any] = deque(maxlen=3600)

    def add(self, frame: Any) -> None:
        self.frames.append(frame)


def held(keeper_cls: type, ticks: int, snap: Any, builder: FrameBuilder) -> dict[int, float]:
    """MiB the keeper holds at each mark (frames built, fed, then dropped by the caller)."""
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    keeper, out = keeper_cls(), {}
    for i in range(1, ticks + 1):
        keeper.add(builder.build(dataclasses.replace(snap, ts_ms=snap.ts_ms + i * 1000)))
        if i in MARKS:
            gc.collect()
            out[i] = (tracemalloc.get_traced_memory()[0] - base) / MIB
    tracemalloc.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=7200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        snap = discrete_three(write_models(Path(tmp)), ticks=3)[-1]
        builder = FrameBuilder()
        builder.build(snap)  # assessments cached, as after the TUI's first tick
        old = held(WholeFrames, args.ticks, snap, builder)
        new = held(FrameStore, args.ticks, snap, builder)
    print("| ticks fed | whole frames (before) MiB | frame store MiB |")
    print("|---|---|---|")
    for mark in sorted(old):
        print(f"| {mark} | {old[mark]:.2f} | {new[mark]:.2f} |")


if __name__ == "__main__":
    main()
