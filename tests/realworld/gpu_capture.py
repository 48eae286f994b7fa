"""Run llama-server on this machine's accelerator (or its CPU) and record what it holds.

    python tests/realworld/gpu_capture.py --binary PATH --out DIR [--mode gpu|cpu]
                                          [--only SUBSTR] [--budget-s N] [--capture]

The driver of ``scripts/gpu-capture`` (which builds the binary). For each case of
``GPU_CASES`` (``--mode gpu``: ``-ngl 99`` and partial offload on CUDA) or ``CPU_CASES``
(``--mode cpu``: ``-dev none`` without ``-nr``, so llama.cpp's CPU backend puts the weights
it repacks for this CPU in its extra buffer types, AMX and CPU_REPACK), write the sparse
GGUF of tests/fakes/arch_models.py, start the server on 127.0.0.1, wait for /health and
record, while it idles:

- llama.cpp's memory log lines (the lines ``monitor.logs.server_log`` reads);
- /proc/PID/status RssAnon and RssFile;
- NVML's per-process used GPU memory and the device's used memory (``--mode gpu``);

then stop it. Each case is ``DIR/<id>.json`` with the provenance in ``DIR/provenance.json``
(CPU model and flags, GPU, driver, CUDA runtime, llama.cpp commit). ``--capture`` also runs
``vramscope capture`` and ``vramscope status --json`` beside the first healthy server.
Cases stop being started once ``--budget-s`` seconds have passed (a device lease is short).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fakes"), str(HERE)]

from arch_capture import KEEP  # noqa: E402
from arch_models import model_for  # noqa: E402
from conftest import (  # noqa: E402
    MODEL_SIZES,
    _stop,
    _wait_healthy,
    free_port,
    proc_status_kib,
)

# --numa distribute: mapped without MAP_POPULATE (a sparse file is not faulted in at load).
BASE = ("--no-warmup", "--numa", "distribute")


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    args: tuple[str, ...]
    draft: str | None = None


def _c(id: str, model: str, *args: str, draft: str | None = None) -> Case:
    return Case(id, model, tuple(args), draft)


GPU_CASES: tuple[Case, ...] = (
    # cheap first (a 0.6B header loads in a second), the big ones after: a lease is short
    _c("cuda-qwen3-0.6b-c4096-np1", "qwen3-0.6b", "-c", "4096", "-np", "1", "-ngl", "99"),
    _c("cuda-qwen3-0.6b-c8192-np4", "qwen3-0.6b", "-c", "8192", "-np", "4", "-ngl", "99"),
    _c(
        "cuda-qwen3-0.6b-fa-off", "qwen3-0.6b", "-c", "4096", "-np", "1", "-ngl", "99", "-fa", "off"
    ),
    _c(
        "cuda-qwen3-0.6b-ub2048",
        "qwen3-0.6b",
        "-c",
        "4096",
        "-np",
        "1",
        "-ngl",
        "99",
        "-ub",
        "2048",
    ),
    _c(
        "cuda-qwen3-0.6b-q8kv",
        "qwen3-0.6b",
        *("-c", "4096", "-np", "1", "-ngl", "99", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"),
    ),
    _c("cuda-qwen3-0.6b-ngl14", "qwen3-0.6b", "-c", "4096", "-np", "1", "-ngl", "14"),
    _c(
        "cuda-qwen3-0.6b-ngl14-nommap",
        "qwen3-0.6b",
        *("-c", "4096", "-np", "1", "-ngl", "14", "-lm", "none"),
    ),
    _c("cuda-qwen3-0.6b-ngl0", "qwen3-0.6b", "-c", "4096", "-np", "1", "-ngl", "0"),
    _c("cuda-qwen3-8b-c4096-np1", "qwen3-8b", "-c", "4096", "-np", "1", "-ngl", "99"),
    _c("cuda-gemma3-ngl99", "gemma3-4b", "-c", "8192", "-np", "2", "-ngl", "99"),
    _c("cuda-gpt-oss-ngl99", "gpt-oss-20b", "-c", "8192", "-np", "4", "-ngl", "99"),
    _c("cuda-qwen3-8b-ngl18", "qwen3-8b", "-c", "4096", "-np", "1", "-ngl", "18"),
    _c(
        "cuda-qwen3-8b-md",
        "qwen3-8b",
        *("-c", "4096", "-np", "1", "-ngl", "99", "-md", "{draft}", "-ngld", "99"),
        draft="qwen3-0.6b",
    ),
    _c("cuda-qwen3moe-cmoe", "qwen3moe-30b-a3b", "-c", "8192", "-np", "2", "-ngl", "99", "-cmoe"),
    _c("cuda-qwen3moe-ngl99", "qwen3moe-30b-a3b", "-c", "8192", "-np", "2", "-ngl", "99"),
    _c("cuda-deepseek2-ngl99", "deepseek-v2-lite", "-c", "4096", "-np", "1", "-ngl", "99"),
    _c("cuda-qwen35-ngl99", "qwen35-27b", "-c", "4096", "-np", "1", "-ngl", "99"),
)

CPU_CASES: tuple[Case, ...] = (
    _c("cpu-qwen3-8b-repack", "qwen3-8b", "-c", "4096", "-np", "1", "-dev", "none"),
    # the real-world tier's tiny models (tests/realworld/test_llama_server.py), anonymous
    _c("cpu-tiny-bert-embedding", "tiny:bert", "--embedding", "-lm", "none", "-dev", "none"),
    _c(
        "cpu-tiny-llama-nommap",
        "tiny:llama",
        "-c",
        "2048",
        "-np",
        "1",
        "-lm",
        "none",
        "-dev",
        "none",
    ),
    _c("cpu-qwen3-0.6b-repack", "qwen3-0.6b", "-c", "4096", "-np", "1", "-dev", "none"),
    _c("cpu-gemma3-repack", "gemma3-4b", "-c", "8192", "-np", "2", "-dev", "none"),
    _c("cpu-gpt-oss-repack", "gpt-oss-20b", "-c", "8192", "-np", "4", "-dev", "none"),
    _c("cpu-qwen3-8b-nr", "qwen3-8b", "-c", "4096", "-np", "1", "-dev", "none", "-nr"),
    _c("cpu-qwen3moe-repack", "qwen3moe-30b-a3b", "-c", "8192", "-np", "2", "-dev", "none"),
    _c("cpu-deepseek2-repack", "deepseek-v2-lite", "-c", "4096", "-np", "1", "-dev", "none"),
    _c(
        "cpu-qwen3-8b-repack-nommap",
        "qwen3-8b",
        *("-c", "4096", "-np", "1", "-dev", "none", "-lm", "none"),
    ),
)


def cpu_flags() -> list[str]:
    """The ``flags`` line of /proc/cpuinfo (what llama.cpp's native build used)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line.split(":", 1)[1].split()
    except OSError:
        pass
    return []


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def nvml_provenance() -> dict[str, object]:
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as exc:  # no driver, no library: recorded as such
        return {"nvml": f"unavailable: {exc}"}
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    mem = nv.nvmlDeviceGetMemoryInfo(handle)
    cuda = nv.nvmlSystemGetCudaDriverVersion()
    return {
        "gpu": _text(nv.nvmlDeviceGetName(handle)),
        "driver": _text(nv.nvmlSystemGetDriverVersion()),
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
        "gpu_total_bytes": mem.total,
        "gpu_used_bytes_idle": mem.used,
    }


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_process(pid: int) -> dict[str, int | None]:
    """NVML's used memory for ``pid`` and the device's used memory, right now."""
    try:
        import pynvml as nv

        handle = nv.nvmlDeviceGetHandleByIndex(0)
        procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
        used = next((p.usedGpuMemory for p in procs if p.pid == pid), None)
        return {
            "nvml_process_bytes": used,
            "nvml_device_used_bytes": nv.nvmlDeviceGetMemoryInfo(handle).used,
        }
    except Exception:
        return {"nvml_process_bytes": None, "nvml_device_used_bytes": None}


def vramscope_beside(out: Path, case_id: str) -> dict[str, object]:
    """``vramscope capture`` and ``status --json`` while the server runs."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    db = Path(tempfile.mkdtemp(prefix="vs-db-")) / "v.db"
    runs = {
        "capture": ["capture", str(out / f"capture-{case_id}"), "--archive", "--db", str(db)],
        "status": ["status", "--json", "--db", str(db)],
    }
    result: dict[str, object] = {}
    for name, args in runs.items():
        proc = subprocess.run(
            [sys.executable, "-m", "monitor", *args],
            capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
        )  # fmt: skip
        result[name] = {"rc": proc.returncode, "stderr": proc.stderr[-2000:]}
        if name == "status":
            (out / f"status-{case_id}.json").write_text(proc.stdout)
    return result


def write_model(key: str, models: Path) -> Path:
    """A sparse real-architecture header, or ``tiny:<name>``: a tiny model with real data."""
    if key.startswith("tiny:"):
        import tiny_models

        return tiny_models.write_all(models, **MODEL_SIZES)[key[5:]].path
    return model_for(key).write(models)


def run_case(binary: Path, case: Case, models: Path, logs: Path, out: Path, beside: bool) -> dict:
    model = write_model(case.model, models)
    args = list(case.args)
    if case.draft:
        draft = model_for(case.draft).write(models)
        args = [str(draft) if a == "{draft}" else a for a in args]
    port = free_port()
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-lv", "4"]
    argv += [*args, *BASE]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    log_path = logs / f"{case.id}.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        try:
            _wait_healthy(proc, port, log_path)
            load_s = time.monotonic() - t0
            time.sleep(1.0)  # let the post-load allocations settle
            rec: dict[str, object] = {
                "rss_anon_bytes": proc_status_kib(proc.pid, "RssAnon") * 1024,
                "rss_file_bytes": proc_status_kib(proc.pid, "RssFile") * 1024,
                **nvml_process(proc.pid),
            }
            if beside:
                rec["vramscope"] = vramscope_beside(out, case.id)
        finally:
            rc = _stop(proc)
    lines = log_path.read_text(errors="replace").splitlines()
    shown = ["{model}" if a == str(model) else a for a in argv[1:]]
    if case.draft:
        shown = ["{draft}" if a == str(draft) else a for a in shown]
    return {
        "id": case.id,
        "model": case.model,
        "draft": case.draft,
        "argv": ["llama-server", *["{port}" if a == str(port) else a for a in shown]],
        "load_s": round(load_s, 1),
        "returncode": rc,
        **rec,
        "log_lines": [
            ln for ln in lines if KEEP.search(ln) or "AMX" in ln or "REPACK" in ln or "CUDA" in ln
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--mode", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--only", default="")
    ap.add_argument("--budget-s", type=float, default=1e9)
    ap.add_argument("--capture", action="store_true")
    opts = ap.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    prov = {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "mode": opts.mode}
    if opts.mode == "gpu":
        prov.update(nvml_provenance())
    info = opts.binary.parent.parent / "build-info.txt"
    prov["build_info"] = info.read_text() if info.exists() else "unknown"
    (opts.out / f"provenance-{opts.mode}.json").write_text(json.dumps(prov, indent=1) + "\n")
    models = Path(tempfile.mkdtemp(prefix="gpu-models-"))
    logs = Path(tempfile.mkdtemp(prefix="gpu-logs-"))
    start, failed, beside = time.monotonic(), 0, opts.capture
    for case in GPU_CASES if opts.mode == "gpu" else CPU_CASES:
        if opts.only and not re.search(opts.only, case.id):
            continue
        if time.monotonic() - start > opts.budget_s:
            print(f"{case.id}: skipped (budget of {opts.budget_s:.0f} s spent)", flush=True)
            continue
        try:
            doc = run_case(opts.binary, case, models, logs, opts.out, beside)
        except (AssertionError, OSError, subprocess.SubprocessError) as exc:
            failed += 1
            print(f"{case.id}: FAILED {str(exc)[-1500:]}", flush=True)
            continue
        beside = False
        (opts.out / f"{case.id}.json").write_text(json.dumps(doc, indent=1) + "\n")
        bufs = [ln.split(":", 1)[-1].strip() for ln in doc["log_lines"] if "buffer size" in ln]
        print(
            f"{case.id}: {doc['load_s']} s; nvml {doc.get('nvml_process_bytes')}; "
            f"anon {doc['rss_anon_bytes'] >> 20} MiB; " + "; ".join(bufs),
            flush=True,
        )
    for path in models.iterdir():
        if path.is_file():
            path.unlink()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
