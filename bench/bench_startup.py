"""One-shot start-up: CPU of ``status``, ``status --json``, a cold ``predict`` and
``--help``, this tree beside the code before the change and beside ``nvitop -1``
(issue 32 item 4).

Method (results in bench/RESULTS.md, "One-shot start-up"):
- Every command is a fresh interpreter (this venv's python), so every ``predict`` is
  cold: nothing of the model or the estimator is cached. Bytecode is cached
  (``PYTHONPYCACHEPREFIX``) as an installed package's is; one unmeasured run of each
  command writes it first.
- Each runs under a small launcher that first installs the fake NVML driver
  (tests/fakes/nvml_fake.py: one H100 with one real fake llama-server on it,
  tests/fakes/fake_server.py), so vramscope and nvitop see the same GPU; the launcher's
  own cost is in every figure alike. It imports no project code: the fake's symbol list
  (collectors/nvml_recorder.py's PROBED_SYMBOLS) comes in the scenario file, read from
  each tree's source; before 2026-11-27 it imported nvml_recorder, which loaded
  collectors.nvml, collectors.base and logging into nvitop's figure too, and into
  vramscope's before it could load (or, for ``--help``, skip) them itself. Since the sixth
  pass (2026-11-27) it runs vramscope through the console script's entry, ``tui.entry:main``
  (what ``vramscope status`` runs); before, through ``monitor.cli.main:main`` (~2 M
  instructions less: the ``tui`` command's options are not built).
- CPU = user + system time of the child (``RUSAGE_CHILDREN``), not wall time; or, with
  ``--instructions``, the instructions it ran under valgrind's callgrind (all threads),
  which the load of a busy shared box does not move (one or two rounds are enough).
- ``--pairs`` rounds (default 7); in each, every command runs from this tree ("new")
  and from ``--baseline DIR`` ("old": ``git archive main | tar -x -C DIR``), in
  alternating order, and ``nvitop -1`` when ``--nvitop DIR`` names a folder it was
  installed in (``pip install --no-deps --target DIR nvitop``). The table gives each
  median and the median of the per-round ratios.

Run: .venv/bin/python bench/bench_startup.py --baseline /tmp/base [--nvitop /tmp/nvitop]
     [--instructions --pairs 1]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "fakes")]

LAUNCHER = textwrap.dedent("""
    import json, sys, types
    root, ui, scenario, extra = sys.argv[1:5]
    sys.path[:0] = [root + "/tests/fakes", root]
    doc = json.loads(open(scenario).read())
    # the fake's one import of project code, its symbol list, as a stand-in module: the real
    # collectors/nvml_recorder.py loads collectors.nvml and collectors.base, which nvitop
    # would then pay for and vramscope would find loaded for free
    stub = types.ModuleType("collectors.nvml_recorder")
    stub.PROBED_SYMBOLS = tuple(doc.pop("probed_symbols"))
    sys.modules["collectors.nvml_recorder"] = stub
    import nvml_fake
    nvml_fake.install(doc)
    del sys.modules["collectors.nvml_recorder"]
    if ui == "nvitop":
        sys.path.insert(0, extra)
        from nvitop.cli import main
        sys.argv = ["nvitop", *sys.argv[5:]]
        sys.exit(main())
    from tui.entry import main  # the console script's entry ([project.scripts] vramscope)
    sys.argv = ["vramscope", *sys.argv[5:]]
    main()
""")

COMMANDS = {
    "status": ["status"],
    "status --json": ["status", "--json"],
    "predict (cold)": ["predict", "--json", "--", "llama-server", "-m", "tiny.gguf", "-c", "512"],
    "--help": ["--help"],
}


def probed_symbols(tree: Path) -> list[str]:
    """The NVML symbols the fake driver exports (collectors/nvml_recorder.py's
    PROBED_SYMBOLS), read from the tree's source, so the launcher imports no project code."""
    source = (tree / "collectors" / "nvml_recorder.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PROBED_SYMBOLS":
            return list(ast.literal_eval(node.value))
    raise SystemExit(f"no PROBED_SYMBOLS in {tree}/collectors/nvml_recorder.py")


def cpu_ms(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def instructions_m(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Millions of instructions the child ran, all its threads (valgrind callgrind's
    "Collected" total): a count the load of a shared box does not move, unlike CPU time."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind counted nothing: {done.stderr[-300:]}")
    return int(found.group(1)) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--nvitop", type=Path, help="folder nvitop was pip-installed in")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions (valgrind), not CPU"
    )
    args = parser.parse_args()
    import fake_server
    import tiny_models
    from bench_tui_vs_nvitop import scenario

    env = dict(os.environ, PYTHONPYCACHEPREFIX=tempfile.gettempdir() + "/bench-startup-pyc")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    trees = {"new": ROOT, "old": args.baseline.resolve()}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        tiny_models.write_llama(work / "tiny.gguf")
        server = stack.enter_context(
            fake_server.running(["llama-server", "-m", "tiny.gguf", "-c", "512"], cwd=work)
        )
        for who, tree in trees.items():
            doc = {**scenario([server.pid]), "probed_symbols": probed_symbols(tree)}
            (work / f"scenario-{who}.json").write_text(json.dumps(doc))
        (work / "launch.py").write_text(LAUNCHER)

        def run(who: str, argv: list[str]) -> float:
            tree = trees.get(who, ROOT)
            ui = "nvitop" if who == "nvitop" else "vramscope"
            cmd = [sys.executable, str(work / "launch.py"), str(tree), ui]
            cmd += [str(work / f"scenario-{'old' if who == 'old' else 'new'}.json")]
            cmd += [str(args.nvitop or ""), *argv]
            measure = instructions_m if args.instructions else cpu_ms
            return measure(cmd, work, {**env, "PYTHONPATH": str(tree), "HOME": str(work)})

        runs: dict[tuple[str, str], list[float]] = {}
        jobs = [(name, who) for name in COMMANDS for who in ("new", "old")]
        if args.nvitop:
            jobs.append(("nvitop -1", "nvitop"))
        argv_of = {**COMMANDS, "nvitop -1": ["-1"]}
        for name, who in jobs:  # bytecode written, not measured
            run(who, argv_of[name])
        for i in range(args.pairs):
            for name, who in jobs if i % 2 == 0 else reversed(jobs):
                runs.setdefault((name, who), []).append(run(who, argv_of[name]))
            print(
                f"round {i + 1}: " + ", ".join(f"{n}/{w} {v[-1]:.0f}" for (n, w), v in runs.items())
            )
        report(runs, args.pairs, "M instructions" if args.instructions else "ms CPU")


def report(runs: dict[tuple[str, str], list[float]], pairs: int, unit: str) -> None:
    nvitop = runs.get(("nvitop -1", "nvitop"))
    print(f"\n| command | new {unit} | old {unit} | new/old | new/nvitop -1 |  ({pairs} rounds)")
    print("|---|---|---|---|---|")
    if nvitop:
        print(f"| nvitop -1 | {statistics.median(nvitop):.0f} | | | 1.00 |")
    for name in COMMANDS:
        new, old = runs[(name, "new")], runs[(name, "old")]
        ratio = statistics.median(a / b for a, b in zip(new, old, strict=True))
        vs = "-"
        if nvitop:
            vs = f"{statistics.median(a / b for a, b in zip(new, nvitop, strict=True)):.2f}"
        print(
            f"| {name} | {statistics.median(new):.0f} | {statistics.median(old):.0f} | "
            f"{ratio:.2f} | {vs} |"
        )


if __name__ == "__main__":
    main()
