"""The whole ``vramscope estimate`` process vs opening the same file with gguf.GGUFReader.

Method (results in bench/RESULTS.md, issue 17): tests/fakes/arch_models.py writes every
header of the real-architecture tier (sparse data); the one with the largest header
(metadata + tensor infos, in bytes) is used. Each measurement is a fresh subprocess, timed
from outside (wall clock, page cache warm):

- ``vramscope estimate --cpu-only --json -- llama-server -m FILE -c 4096`` (Python start,
  imports, an uncached header read, the estimate, JSON out);
- ``python -c "import gguf; gguf.GGUFReader(FILE)"`` (the same interpreter start).

Run: .venv/bin/python bench/bench_estimate_arch.py [--runs 7] [--ref-runs 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes")]


def header_bytes(path: Path) -> int:
    from monitor.gguf.reader import read_header

    header = read_header(str(path))
    return header.file_bytes - header.tensor_bytes  # metadata + tensor infos (+ padding)


def timed(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--ref-runs", type=int, default=3)
    ap.add_argument("--dir", default=None)
    opts = ap.parse_args()
    from arch_models import ARCH_MODELS

    directory = Path(opts.dir or tempfile.mkdtemp(prefix="bench-arch-"))
    directory.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for key, factory in ARCH_MODELS.items():
        path = factory().write(directory)
        sizes[key] = (header_bytes(path), path)
    key = max(sizes, key=lambda k: sizes[k][0])
    hdr, path = sizes[key]
    py = sys.executable
    ours = timed(
        [
            py,
            "-m",
            "monitor",
            "estimate",
            "--cpu-only",
            "--json",
            "--",
            "llama-server",
            "-m",
            str(path),
            "-c",
            "4096",
        ],
        opts.runs,
    )
    ref = timed([py, "-c", f"import gguf; gguf.GGUFReader({str(path)!r})"], opts.ref_runs)
    print(
        f"largest header: {key} ({hdr / 2**20:.2f} MiB of header, "
        f"{path.stat().st_size / 2**30:.1f} GiB file)"
    )
    print("| command (fresh process) | runs | median ms | min ms | max ms |")
    print("|---|---|---|---|---|")
    for name, t in (("vramscope estimate --cpu-only --json", ours), ("gguf.GGUFReader(path)", ref)):
        print(f"| {name} | {len(t)} | {statistics.median(t):.0f} | {min(t):.0f} | {max(t):.0f} |")
    print(f"ratio (median): {statistics.median(ref) / statistics.median(ours):.1f}x")


if __name__ == "__main__":
    main()
