"""Wall time of `vramscope predict` on this live box, GGUF header cached.

Method (results in bench/RESULTS.md): a Qwen3-8B-shaped GGUF header (151,936-token vocab,
151,000 merges, sparse data) is written once; ``run_predict`` (the whole command minus
process start-up: one live sample of every collector, the estimate, the verdict) runs once
to warm the header cache, then ``--runs`` times, for a load that fits (no fixes to price)
and one that does not (every fix priced, which re-runs the estimator ~20 times), and with
``--fit-ctx`` (a bisection over -c). Median and max wall time.

Then the whole command as a user types it: ``vramscope predict -- llama-server -m <header>
-c 8192`` as a fresh process, ``--cli-runs`` times (Python start-up, imports, an uncached
header parse in each new process, one live sample, the verdict), median and max wall time.

Run: .venv/bin/python bench/bench_predict.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes")]

import gguf_models as g  # noqa: E402

from monitor.cli.predict import PredictRequest, run_predict  # noqa: E402
from monitor.config import Config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--cli-runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        md, tensors = g.qwen3_8b()
        model = str(
            g.write_model(
                Path(tmp) / "q.gguf", "qwen3", md, tensors, vocab_size=151936, merges=151000
            )[0]
        )
        cfg = Config(db_path=Path(tmp) / "v.db")
        cases = {
            "fits (-c 8192)": PredictRequest(["llama-server", "-m", model, "-c", "8192"]),
            "OOM, all fixes priced (-c 262144 -np 4)": PredictRequest(
                ["llama-server", "-m", model, "-c", "262144", "-np", "4"]
            ),
            "--fit-ctx": PredictRequest(["llama-server", "-m", model], want_fit_ctx=True),
        }
        print("| case | median ms | max ms |")
        print("|---|---|---|")
        for label, req in cases.items():
            run_predict(cfg, req)  # warms the header cache
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                run_predict(cfg, req)
                times.append((time.perf_counter() - t0) * 1000)
            print(f"| {label} | {statistics.median(times):.1f} | {max(times):.1f} |")
        exe = Path(sys.executable).with_name("vramscope")
        argv = [str(exe), "predict", "--", "llama-server", "-m", model, "-c", "8192"]
        times = []
        for _ in range(args.cli_runs):
            t0 = time.perf_counter()
            subprocess.run(
                argv,
                check=True,
                stdout=subprocess.DEVNULL,
                env={**os.environ, "XDG_STATE_HOME": tmp},
            )
            times.append((time.perf_counter() - t0) * 1000)
        print(
            f"| whole command, fresh process, header not cached | "
            f"{statistics.median(times):.0f} | {max(times):.0f} |"
        )


if __name__ == "__main__":
    main()
