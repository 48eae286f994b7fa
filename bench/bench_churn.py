"""The daemon's CPU on a box that churns llama-servers, beside a plain psutil loop and
beside the code before the change (issue 32 item 3).

Method (results in bench/RESULTS.md, "Churn"):
- A churn generator in this process starts ``--rate`` short-lived ``llama-server -m
  tiny.gguf -c 256 --port N`` processes a second (tests/fakes/fake_server.py: real
  processes whose /proc reads like that command line; each its own port, as a test
  harness's are), each living ``--life-s``; one long-lived ``llama-server -m tiny.gguf -c
  512`` runs throughout (``--servers N``: N of them, the others with ``--port N``). Its
  own CPU is not measured.
- Measured, all at the same time so the box's background load falls on each alike:
  ``vramscope daemon --interval 1`` of this tree ("new"), the same of ``--baseline DIR``
  (``git archive main | tar -x -C DIR``: "old"), each with its own database and HTTP off,
  and a plain psutil loop (``psutil.process_iter(['memory_info', 'cmdline'])`` once a
  second, the floor any per-process monitor pays).
- After ``--warmup-s``, ``--pairs`` windows of ``--seconds`` each: utime + stime of each
  process (``/proc/PID/stat``, all threads) at each window's start and end. Each window
  gives the ratios new/psutil, old/psutil and new/old; the table gives their medians.
- ``--conditions isolated,busy`` (default ``busy``): each condition with fresh daemons,
  psutil loop and databases, one after the other. **isolated**: the long-lived server and
  nothing else the bench starts; **busy**: the churn generator too. ``--pid-namespace``:
  all of it in a PID namespace of its own (``unshare -pf --mount-proc``, re-exec'd), so
  "isolated" sees only the scenario's processes and "busy" adds only the churn (there the
  kernel's process-event connector delivers nothing to the daemon's listener).
- Each daemon thread's CPU (``/proc/PID/task/TID/stat``, ms a second, median of the
  windows), the threads named by ``py-spy dump`` (its Python name and outermost frame).
- At the end, each database's ``processes`` and ``estimates`` row counts, ``meta``'s
  ``short_lived_processes`` and its ``load_started`` events.
- Bytecode is cached (``PYTHONPYCACHEPREFIX``) for all of them, as an installed package is.

Run: .venv/bin/python bench/bench_churn.py --baseline /tmp/base [--pairs 5] [--seconds 30]
     [--conditions isolated,busy] [--pid-namespace]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
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


def thread_ticks(pid: int) -> dict[int, int]:
    """utime + stime of each thread of ``pid`` in clock ticks (``/proc/PID/task/TID/stat``)."""
    ticks = {}
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                stat = (task / "stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                ticks[int(task.name)] = int(fields[11]) + int(fields[12])
    return ticks


def thread_names(pid: int) -> dict[int, str]:
    """Each thread's Python name and the outermost frame of its own code (``py-spy dump``)."""
    spy = Path(sys.executable).with_name("py-spy")
    try:
        out = subprocess.run(
            [str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    names: dict[int, str] = {}
    tid, frame = None, ""
    for line in out.splitlines() + ["Thread 0 (end): "]:
        m = re.match(r'Thread (0x[0-9a-fA-F]+|\d+) \((\w+)\): "?([^"]*)"?', line)
        if m:
            if tid is not None:
                names[tid] = f"{names[tid]} [{frame}]"
            tid, frame = int(m[1], 0), ""
            names[tid] = m[3]
        elif line.startswith("    ") and "threading.py" not in line:
            frame = line.strip()
    names.pop(0, None)
    return names


def per_thread(before: dict[int, int], after: dict[int, int], s: float) -> dict[int, float]:
    """ms of CPU a second of each thread alive at the window's end."""
    return {t: 1000 * (v - before.get(t, 0)) / HZ / s for t, v in after.items()}


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def measure(busy: bool, args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict:
    """One condition with fresh processes: each window's CPU seconds per process, each
    daemon thread's ms/s (median over the windows), the load, servers started, row counts."""
    tag = "busy" if busy else "isolated"
    stop = threading.Event()
    started: list[int] = []
    gen = threading.Thread(target=lambda: started.append(churn(work, args.rate, args.life_s, stop)))
    dbs = {"new": work / f"new-{tag}.db", "old": work / f"old-{tag}.db"}
    procs = {
        "new": daemon(ROOT, dbs["new"], work / "c.toml", env),
        "old": daemon(args.baseline.resolve(), dbs["old"], work / "c.toml", env),
        "psutil": subprocess.Popen([sys.executable, "-c", PSUTIL_LOOP], env=env),
    }
    if busy:
        gen.start()
    load = loadavg()
    rows: list[dict[str, float]] = []
    threads: dict[str, dict[int, list[float]]] = {"new": {}, "old": {}}
    names: dict[str, dict[int, str]] = {}
    try:
        time.sleep(args.warmup_s)
        names = {k: thread_names(procs[k].pid) for k in threads}
        for _ in range(args.pairs):
            a = {k: cpu_s(p.pid) for k, p in procs.items()}
            ta = {k: thread_ticks(procs[k].pid) for k in threads}
            time.sleep(args.seconds)
            b = {k: cpu_s(p.pid) for k, p in procs.items()}
            for k in threads:
                for tid, ms in per_thread(ta[k], thread_ticks(procs[k].pid), args.seconds).items():
                    threads[k].setdefault(tid, []).append(ms)
            rows.append({k: b[k] - a[k] for k in a})
            print(tag, {k: round(v, 3) for k, v in rows[-1].items()}, flush=True)
    finally:
        stop.set()
        if busy:
            gen.join()
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            p.wait(timeout=60)
    per = {
        k: {names[k].get(t, str(t)): statistics.median(v) for t, v in threads[k].items()}
        for k in threads
    }
    return {
        "tag": tag,
        "rows": rows,
        "load": f"{load} -> {loadavg()}",
        "threads": per,
        "started": started[0] if started else 0,
        "counts": {k: counts(db) for k, db in dbs.items()},
        "logs": {
            k: (work / f"{db.stem}.err").read_text().splitlines()[-3:] for k, db in dbs.items()
        },
    }


def report(r: dict, s: float) -> None:
    rows = r["rows"]
    print(f"\n{r['tag']}: load {r['load']}, churn {r['started']} servers started")
    print("| process | CPU % of a core (median; each window) |")
    print("|---|---|")
    for k in rows[0]:
        each = ", ".join(f"{100 * w[k] / s:.2f}" for w in rows)
        print(f"| {k} | {100 * statistics.median(w[k] for w in rows) / s:.2f} ({each}) |")
    for num, den in (("new", "psutil"), ("old", "psutil"), ("new", "old")):
        each = [w[num] / w[den] for w in rows if w[den] > 0]
        total = sum(w[den] for w in rows)
        # psutil's figure in a PID namespace is a few clock ticks a window: the ratio of
        # the sums over all windows is printed beside the median of the windows' ratios.
        print(
            f"- {num}/{den}: {statistics.median(each):.2f}x" if each else f"- {num}/{den}: n/a",
            f"(median of {len(each)} windows), over all windows "
            + (f"{sum(w[num] for w in rows) / total:.2f}x" if total > 0 else "n/a"),
        )
    for k, per in r["threads"].items():
        each = "; ".join(f"{n} {ms:.2f}" for n, ms in sorted(per.items(), key=lambda x: -x[1]))
        print(f"- {k}'s threads, ms CPU/s (median of windows): {each}")
    for k in ("new", "old"):
        print(f"- {k}: {r['counts'][k]}; log, last lines: {r['logs'][k]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup-s", type=float, default=20)
    parser.add_argument("--rate", type=float, default=6.0)
    parser.add_argument("--life-s", type=float, default=0.4)
    parser.add_argument("--conditions", default="busy")
    parser.add_argument("--pid-namespace", action="store_true")
    parser.add_argument("--servers", type=int, default=1, help="long-lived servers (default 1)")
    args = parser.parse_args()
    if args.pid_namespace and os.environ.get("VRAMSCOPE_BENCH_NS") != "1":
        env = {**os.environ, "VRAMSCOPE_BENCH_NS": "1"}
        cmd = ["unshare", "-pf", "--mount-proc", sys.executable, *sys.argv]
        sys.exit(subprocess.run(cmd, env=env, check=False).returncode)
    import tiny_models

    env = dict(os.environ, PYTHONPYCACHEPREFIX=tempfile.gettempdir() + "/bench-churn-pyc")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny_models.write_llama(work / "tiny.gguf")
        (work / "c.toml").write_text("[http]\nenabled = false\n")
        base = ["llama-server", "-m", "tiny.gguf", "-c", "512"]
        long_lived = [
            fake(base + (["--port", str(9100 + i)] if i else []), work) for i in range(args.servers)
        ]
        try:
            for label in args.conditions.split(","):
                results.append(measure(label == "busy", args, work, env))
        finally:
            for p in long_lived:
                end(p)
    print(
        f"\npython {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.pairs} windows of "
        f"{args.seconds:.0f} s, churn {args.rate}/s each {args.life_s} s when busy, "
        f"{args.servers} long-lived server(s)"
        + (", own PID namespace" if args.pid_namespace else ", the box's /proc as it is")
    )
    for r in results:
        report(r, args.seconds)


if __name__ == "__main__":
    main()
