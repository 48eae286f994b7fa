"""Cost of reading a big-vocabulary GGUF header: monitor.gguf.reader.read_header vs gguf.GGUFReader.

Method (results in bench/RESULTS.md): tests/fakes/gguf_models.py writes, with gguf's own
GGUFWriter, a Qwen3-8B-shaped Q8_0 header (399 tensor infos) with a 151,936-entry
``tokenizer.ggml.tokens``, the same-length ``token_type`` and 151,000 merges; the 8.7 GB
data region is a sparse hole. Each measurement runs in a fresh ``python`` subprocess:

- time: ``read_header`` ``--runs`` times with the cache cleared before each (median, min,
  max), and one cached call; ``gguf.GGUFReader(path)`` ``--ref-runs`` times;
- memory: the peak RSS is reset after the imports (``/proc/self/clear_refs`` = 5) and
  ``VmHWM - VmRSS`` after the reads is what they added at peak (file-backed pages of
  GGUFReader's mapping included; ``ru_maxrss`` deltas where the reset is refused); and,
  in another subprocess, the ``tracemalloc`` peak of one read (Python and numpy
  allocations).

The reader's work scales with the number of array items walked (vocabulary + merges),
not with the file size. Page cache is warm (the file was just written).

Run: .venv/bin/python bench/bench_gguf.py [--runs 15] [--ref-runs 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes")]

from monitor.units import MIB  # noqa: E402


def child(which: str, path: str, runs: int, trace: bool) -> dict:
    """Runs in a fresh interpreter: import, then measure ``which`` on ``path``."""
    import gguf

    from monitor.gguf import reader as mg

    def read() -> object:
        if which == "ours":
            mg.clear_cache()
            return mg.read_header(path)
        return gguf.GGUFReader(path)

    if trace:
        tracemalloc.start()
        read()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return {"tracemalloc_peak_bytes": peak}
    reset = _reset_peak_rss()
    rss0 = _status_bytes("VmRSS") if reset else _maxrss()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = read()
        times.append(time.perf_counter() - t0)
        del result
    rss1 = _status_bytes("VmHWM") if reset else _maxrss()
    out = {
        "times_s": times,
        "rss_before_bytes": rss0,
        "rss_delta_bytes": rss1 - rss0,
        "peak_reset": reset,
    }
    if which == "ours":
        mg.read_header(path)
        t0 = time.perf_counter()
        mg.read_header(path)
        out["cached_s"] = time.perf_counter() - t0
    return out


def _reset_peak_rss() -> bool:
    """Reset the peak RSS (VmHWM) so it measures the read, not the imports (Linux >= 4.0,
    ``proc(5)`` clear_refs value 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(which: str, path: Path, runs: int, trace: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", which, str(path), "--runs", str(runs)]
    if trace:
        cmd.append("--trace")
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def write(dirpath: Path) -> Path:
    from gguf_models import qwen3_8b, write_model

    metadata, tensors = qwen3_8b()
    path = dirpath / "Qwen3-8B-Q8_0.gguf"
    write_model(path, "qwen3", metadata, tensors, vocab_size=151_936, merges=151_000)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--ref-runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--child", nargs=2, metavar=("WHICH", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.runs, args.trace)))
        return

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = write(Path(tmp))
        from monitor.gguf.reader import read_header

        h = read_header(path)
        header_end = _header_bytes(path)
        st = path.stat()
        print(
            f"file: {st.st_size / 1e9:.2f} GB apparent, {st.st_blocks * 512 / MIB:.1f} MiB on "
            f"disk, header {header_end / MIB:.2f} MiB; {len(h.tensors)} tensors, "
            f"n_vocab {h.n_vocab}"
        )
        ours = measure("ours", path, args.runs)
        ours_tm = measure("ours", path, 1, trace=True)
        ref = measure("gguf", path, args.ref_runs)
        ref_tm = measure("gguf", path, 1, trace=True)

    def row(name: str, m: dict, tm: dict) -> str:
        t = sorted(m["times_s"])
        return (
            f"| {name} | {len(t)} | {statistics.median(t) * 1e3:.1f} | {t[0] * 1e3:.1f} | "
            f"{t[-1] * 1e3:.1f} | {m['rss_delta_bytes'] / MIB:.1f} | "
            f"{tm['tracemalloc_peak_bytes'] / MIB:.1f} |"
        )

    print(
        "| reader | runs | median ms | min ms | max ms | peak RSS delta MiB | "
        "tracemalloc peak MiB |"
    )
    print("|---|---|---|---|---|---|---|")
    print(row("monitor.gguf.reader.read_header (cache cleared)", ours, ours_tm))
    print(row("gguf.GGUFReader(path)", ref, ref_tm))
    ratio_t = statistics.median(ref["times_s"]) / statistics.median(ours["times_s"])
    ratio_m = ref_tm["tracemalloc_peak_bytes"] / ours_tm["tracemalloc_peak_bytes"]
    print(f"\ncached read_header: {ours['cached_s'] * 1e6:.0f} us (stat of the file + dict lookup)")
    print(f"ratio GGUFReader / read_header: {ratio_t:.0f}x time, {ratio_m:.0f}x tracemalloc peak")
    print(f"peak RSS reset honoured: {ours['peak_reset']}")
    print(f"interpreter + imports before the read: {ours['rss_before_bytes'] / MIB:.0f} MiB RSS")


def _header_bytes(path: Path) -> int:
    """Where the tensor infos end: the parser's cursor after a full parse."""
    from monitor.gguf.reader import _Parser

    with open(path, "rb", buffering=0) as f:
        p = _Parser(f, str(path), path.stat().st_size, 4096)
        p.parse()
        return p.base + p.pos


if __name__ == "__main__":
    main()
