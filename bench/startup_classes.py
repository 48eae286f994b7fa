"""Which dataclasses each one-shot command builds, and which of them its run uses (issue 32
item 4; bench/RESULTS.md "One-shot start-up", fourth pass).

Method: bench/bench_startup.py's launcher and scenario (the fake NVML driver: one H100 with
one fake llama-server, a tiny GGUF), with a prelude that wraps
``dataclasses._process_class``: every class it builds is recorded with the time building
it took (``time.perf_counter``, so it moves with the box's load) and its generated
``__init__`` is wrapped to count the instances made. A class with no instance is "unused"
by that run (a base class used only through a subclass would count as unused: none
is, today). Each command runs in a fresh interpreter from ``--tree`` (default: this one).

Run: .venv/bin/python bench/startup_classes.py [--tree DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "fakes")]

PRELUDE = textwrap.dedent("""
    import atexit, dataclasses, functools, json, os, time
    _built = {}
    _process_class = dataclasses._process_class

    def _counted(cls, *args, **kwargs):
        start = time.perf_counter()
        out = _process_class(cls, *args, **kwargs)
        record = _built.setdefault(
            out.__module__ + "." + out.__qualname__,
            {"instances": 0, "build_ms": (time.perf_counter() - start) * 1000},
        )
        init = out.__dict__.get("__init__")
        if init is not None:
            @functools.wraps(init)
            def __init__(self, *a, _init=init, _record=record, **k):
                _record["instances"] += 1
                return _init(self, *a, **k)
            out.__init__ = __init__
        return out

    dataclasses._process_class = _counted
    atexit.register(lambda: open(os.environ["CLASSES_OUT"], "w").write(json.dumps(_built)))
""")


def census(tree: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Command -> class -> {"instances", "build_ms"}."""
    import bench_startup
    import fake_server
    import tiny_models
    from bench_tui_vs_nvitop import scenario

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        tiny_models.write_llama(work / "tiny.gguf")
        argv = ["llama-server", "-m", "tiny.gguf", "-c", "512"]
        server = stack.enter_context(fake_server.running(argv, cwd=work))
        doc = {**scenario([server.pid]), "probed_symbols": bench_startup.probed_symbols(tree)}
        (work / "scenario.json").write_text(json.dumps(doc))
        (work / "launch.py").write_text(PRELUDE + bench_startup.LAUNCHER)
        out: dict[str, dict[str, dict[str, float]]] = {}
        for name, args in bench_startup.COMMANDS.items():
            found = work / "classes.json"
            env = {**os.environ, "PYTHONPATH": str(tree), "HOME": str(work)}
            cmd = [sys.executable, str(work / "launch.py"), str(tree), "vramscope"]
            cmd += [str(work / "scenario.json"), "", *args]
            subprocess.run(
                cmd, cwd=work, env={**env, "CLASSES_OUT": str(found)}, stdout=subprocess.DEVNULL
            )
            out[name] = json.loads(found.read_text())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="source tree to run")
    parser.add_argument("--json", action="store_true", help="the whole census as JSON")
    args = parser.parse_args()
    result = census(args.tree.resolve())
    if args.json:
        print(json.dumps(result, indent=1))
        return
    for name, classes in result.items():
        unused = sorted(k for k, v in classes.items() if not v["instances"])
        ms = sum(v["build_ms"] for v in classes.values())
        print(f"{name}: builds {len(classes)} ({ms:.1f} ms), {len(unused)} unused")
        for cls in unused:
            print(f"    unused {cls}  {classes[cls]['build_ms']:.2f} ms")


if __name__ == "__main__":
    main()
