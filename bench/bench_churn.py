"""The daemon's CPU on a box that churns llama-servers, beside a plain psutil loop and
beside the code before the change (issue 32 item 3).

Method (results in bench/RESULTS.md, "Churn"):
- A churn generator in this process starts ``--rate`` short-lived ``llama-server -m
  tiny.gguf -c 256 --port N`` processes a second (tests/fakes/fake_server.py: real
  processes whose /proc reads like that command line; each its own port, as a test
  harness's are), each living ``--life-s``; one long-lived ``llama-server -m tiny.gguf -c
  512`` runs throughout. Its own CPU is not measured.
- Measured, all at the same time so the box's background load falls on each alike:
  ``vramscope daemon --interval 1`` of this tree ("new"), the same of ``--baseline DIR``
  (``git archive main | tar -x -C DIR``: "old"), each with its own database and HTTP off,
  and a plain psutil loop (``psutil.process_iter(['memory_info', 'cmdline'])`` once a
  second, the floor any per-process monitor pays).
- After ``--warmup-s``, ``--pairs`` windows of ``--seconds`` each: utime + stime of each
  process (``/proc/PID/stat``, all threads) at each window's start and end. Each window
  gives the ratios new/psutil, old/psutil and new/old; the table gives their medians.
- At the end, each database's ``processes`` and ``estimates`` row counts, ``meta``'s
  ``short_lived_processes`` and its ``load_started`` events.
- Bytecode is cached (``PYTHONPYCACHEPREFIX``) for all of them, as an installed package is.

Run: .venv/bin/python bench/bench_churn.py --baseline /tmp/base [--pairs 5] [--seconds 30]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "fakes")]
HZ = os.sysconf("SC_CLK_TCK")

PSUTIL_LOOP = """
import time, psutil
while True:
    for p in psutil.process_iter(["memory_info", "cmdline"]):
        pass
    time.sleep(1.0)
"""


def cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def fake(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    import fake_server

    cfg = json.dumps({"argv": argv, "child": None})
    padding = "x" * (sum(len(a) + 1 for a in argv) + 16)
    return subprocess.Popen(
        [sys.executable, "-c", fake_server._SCRIPT, cfg, padding],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def end(p: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError):
        assert p.stdin is not None
        p.stdin.close()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def churn(cwd: Path, rate: float, life_s: float, stop: threading.Event) -> int:
    """Start ``rate`` short-lived servers a second until ``stop``; how many were started."""
    alive: list[tuple[float, subprocess.Popen[str]]] = []
    started, port = 0, 20000
    next_at = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now >= next_at:
            argv = ["llama-server", "-m", "tiny.gguf", "-c", "256", "--port", str(port)]
            alive.append((now + life_s, fake(argv, cwd)))
            started, port, next_at = started + 1, port + 1, next_at + 1 / rate
        while alive and alive[0][0] <= now:
            end(alive.pop(0)[1])
        time.sleep(0.01)
    for _, p in alive:
        end(p)
    return started


def daemon(tree: Path, db: Path, cfg: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "1"]
        + ["--config", str(cfg)],
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree)},
        stdout=subprocess.DEVNULL,
        stderr=(db.parent / f"{db.stem}.err").open("w"),
    )


def counts(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        procs = conn.execute("SELECT count(*) FROM processes").fetchone()[0]
        ests = conn.execute("SELECT count(*) FROM estimates").fetchone()[0]
        row = conn.execute("SELECT value FROM meta WHERE key='short_lived_processes'").fetchone()
        started = conn.execute("SELECT count(*) FROM events WHERE kind='load_started'").fetchone()
        return (
            f"{procs} processes rows, {ests} estimates rows, short-lived count {row and row[0]},"
            f" {started[0]} load_started events"
        )
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup-s", type=float, default=20)
    parser.add_argument("--rate", type=float, default=6.0)
    parser.add_argument("--life-s", type=float, default=0.4)
    args = parser.parse_args()
    import tiny_models

    env = dict(os.environ, PYTHONPYCACHEPREFIX=tempfile.gettempdir() + "/bench-churn-pyc")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny_models.write_llama(work / "tiny.gguf")
        cfg = work / "c.toml"
        cfg.write_text("[http]\nenabled = false\n")
        long_lived = fake(["llama-server", "-m", "tiny.gguf", "-c", "512"], work)
        stop = threading.Event()
        started: list[int] = []
        gen = threading.Thread(
            target=lambda: started.append(churn(work, args.rate, args.life_s, stop))
        )
        procs = {
            "new": daemon(ROOT, work / "new.db", cfg, env),
            "old": daemon(args.baseline.resolve(), work / "old.db", cfg, env),
            "psutil": subprocess.Popen([sys.executable, "-c", PSUTIL_LOOP], env=env),
        }
        gen.start()
        rows: list[dict[str, float]] = []
        try:
            time.sleep(args.warmup_s)
            for _ in range(args.pairs):
                a = {k: cpu_s(p.pid) for k, p in procs.items()}
                time.sleep(args.seconds)
                b = {k: cpu_s(p.pid) for k, p in procs.items()}
                rows.append({k: b[k] - a[k] for k in a})
                print({k: round(v, 3) for k, v in rows[-1].items()}, flush=True)
        finally:
            stop.set()
            gen.join()
            for p in procs.values():
                p.send_signal(signal.SIGTERM)
            for p in procs.values():
                p.wait(timeout=60)
            end(long_lived)
        median = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"\nchurn: {started[0]} servers started, {args.rate}/s, each {args.life_s} s")
        print("| process | CPU % of a core (median) |")
        print("|---|---|")
        for k, v in median.items():
            print(f"| {k} | {100 * v / args.seconds:.2f} |")
        for name, num, den in (("new/psutil", "new", "psutil"), ("old/psutil", "old", "psutil")):
            ratio = statistics.median(r[num] / r[den] for r in rows if r[den] > 0)
            print(f"- {name}: {ratio:.2f}x (median of {len(rows)} windows)")
        ratio = statistics.median(r["new"] / r["old"] for r in rows if r["old"] > 0)
        print(f"- new/old: {ratio:.2f}x")
        print(f"- new: {counts(work / 'new.db')}")
        print(f"- old: {counts(work / 'old.db')}")
        for name in ("new", "old"):
            errors = (work / f"{name}.err").read_text().splitlines()
            print(f"- {name}'s log, last lines: {errors[-3:]}")


if __name__ == "__main__":
    main()
