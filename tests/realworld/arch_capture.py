"""Run the real-architecture tier on a real llama-server and keep its memory lines.

    .venv/bin/python tests/realworld/arch_capture.py [--only ID_SUBSTRING] [--models DIR]

For every case of arch_cases.CASES: write the sparse GGUF (tests/fakes/arch_models.py),
start the llama-server built by scripts/build-llama-server on 127.0.0.1 with
``--no-warmup -nr -lv 4``, wait for /health, stop it, and write
tests/fixtures/llamalog/arch/<id>.json: the llama.cpp commit, the command line (model
paths as ``{model}`` / ``{draft}``), and the log lines monitor.logs.server_log reads (checked:
parsing the kept lines gives the same report as parsing the whole log).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes"), str(HERE)]

from arch_cases import BASE_ARGS, CASES  # noqa: E402
from arch_models import model_for  # noqa: E402
from conftest import DEFAULT_BINARY, run_llama_server  # noqa: E402

from monitor.logs.server_log import parse_llama_log  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "llamalog" / "arch"
KEEP = re.compile(
    r"buffer size|llama_kv_cache|llama_memory|llama_context|load_tensors|load_model|"
    r"MTP|draft|n_slots|kv_unified|Flash Attention|creating|speculative|n_ctx|n_seq|"
    r"offloaded|constructing|loaded meta data"
)


def build_info() -> dict[str, str]:
    info = (DEFAULT_BINARY.parent.parent / "build-info.txt").read_text().splitlines()
    out = {}
    for line in info:
        if line.startswith("llama.cpp commit"):
            out["llama_cpp_commit"] = line.split()[-1]
        elif line.startswith("llama-cpp-python"):
            out["llama_cpp_python"] = line.split()[-1]
    return out


def capture(case, models_dir: Path, logs_dir: Path) -> dict:
    model = model_for(case.model).write(models_dir)
    args = list(case.args)
    if case.draft:
        draft = model_for(case.draft).write(models_dir)
        args = [str(draft) if a == "{draft}" else a for a in args]
    log_path = logs_dir / f"{case.id}.log"
    t0 = time.monotonic()
    run = run_llama_server(DEFAULT_BINARY, model, [*args, *BASE_ARGS], log_path)
    elapsed = time.monotonic() - t0
    lines = run.log.splitlines()
    kept = [ln for ln in lines if KEEP.search(ln)]
    full, short = parse_llama_log(lines), parse_llama_log(kept)
    assert (full.buffers, full.kv) == (short.buffers, short.kv), case.id
    argv = [
        "llama-server",
        "-m",
        "{model}",
        "-lv",
        "4",
        *["{draft}" if case.draft and a == str(draft) else a for a in args],
        *BASE_ARGS,
    ]
    return {
        "id": case.id,
        "model": case.model,
        "draft": case.draft,
        "argv": argv,
        **build_info(),
        "server_s": round(elapsed, 1),
        "log_lines": kept,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--models", default=None)
    opts = ap.parse_args()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    models_dir = Path(opts.models or tempfile.mkdtemp(prefix="arch-models-"))
    models_dir.mkdir(parents=True, exist_ok=True)
    logs_dir = Path(tempfile.mkdtemp(prefix="arch-logs-"))
    failed = 0
    for case in CASES:
        if opts.only and opts.only not in case.id:
            continue
        try:
            doc = capture(case, models_dir, logs_dir)
        except AssertionError as exc:
            failed += 1
            print(f"{case.id}: FAILED\n{str(exc)[-3000:]}", flush=True)
            continue
        (FIXTURES / f"{case.id}.json").write_text(json.dumps(doc, indent=1) + "\n")
        report = parse_llama_log(doc["log_lines"])
        bufs = ", ".join(f"{b.context}/{b.kind}/{b.backend}={b.mib}" for b in report.buffers)
        print(f"{case.id}: {doc['server_s']} s; {bufs}", flush=True)
    print(f"logs in {logs_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
