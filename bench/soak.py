"""One-hour soak of the daemon (issue 9): 0.25 s ticks with processes coming and going.

Pass criteria (exit 0 / 1): after a warm-up, RSS grows < 5 MiB, and the number of open file
descriptors and of threads does not grow; the daemon is alive to the end and really sampled
(>= 90 % of the expected ticks are in its database, and every `llama-server` it was shown
was recorded and its exit noted). The daemon runs with its defaults (HTTP on a free
loopback port, alerts off); a sleeper is started and killed every second, and a
`llama-server`-named one every 30 s (tracked, judged by the load watch, then exits).
The daemon's RSS, fds and threads are printed every minute, warm-up included; on failure
the tail of its log follows.

It runs in a PID namespace of its own (``unshare -pf --mount-proc``; ``-r`` too when not
root), so the daemon sees only the soak's processes: its RSS follows the busiest the box
has been (its process table, the process-event connector's pids, each capped), so another
job's bursts on a shared box moved the box-wide run's RSS in steps that did not come back
(58.7 -> 75.8 MiB over an hour, each step at a burst; bench/RESULTS.md "One-hour soak").
Inside the namespace the kernel's process-event connector sends nothing (the daemon says
so and takes exits from zombies and /proc, as without it). ``--box`` runs it on the box's
/proc as it is; where no namespace can be made it says so and does that.

Run: .venv/bin/python bench/soak.py [--minutes 60] [--warmup-minutes 5] [--box]
`bash scripts/soak` runs the hour; `tests/soak/test_soak.py` runs 10 minutes of it in CI
(VRAMSCOPE_SOAK_MINUTES changes that).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fd_targets(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed between the listing and the readlink
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return sorted(out)


def probe(pid: int) -> tuple[float, int, int]:
    """RSS MiB, open fds and threads. The fd count is the least of five looks 0.1 s apart:
    a file the daemon has open for a moment (a /proc read, SQLite's statement journal) is
    not a leak; a leaked descriptor is there in every look."""
    status = {
        line.split(":")[0]: line.split(":")[1].strip()
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    }
    fds = []
    for _ in range(5):
        fds.append(len(os.listdir(f"/proc/{pid}/fd")))
        time.sleep(0.1)
    return float(status["VmRSS"].split()[0]) / 1024, min(fds), int(status["Threads"])


def recorded(db: Path, since_ms: int, exe: Path) -> tuple[int, int, int]:
    """Distinct ticks since ``since_ms``; our llama-server processes seen, and seen exited."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        ticks = con.execute(
            "SELECT COUNT(DISTINCT ts_ms) FROM device_samples WHERE ts_ms >= ?", (since_ms,)
        ).fetchone()[0]
        seen, exited = con.execute(
            "SELECT COUNT(*), COUNT(exited_ms) FROM processes WHERE instr(argv, ?) > 0", (str(exe),)
        ).fetchone()
    return ticks, seen, exited


def own_pid_namespace() -> int | None:
    """This soak's exit status, run again in a PID namespace of its own; None when none
    can be made here (no ``unshare``, or not permitted), after saying so."""
    unshare = shutil.which("unshare")
    flags = ["-pf", "--mount-proc"] + ([] if os.geteuid() == 0 else ["-r"])
    if (
        unshare is None
        or subprocess.run([unshare, *flags, "true"], capture_output=True, check=False).returncode
    ):
        print("no PID namespace here (unshare): the daemon sees the box's /proc as it is")
        return None
    env = {**os.environ, "VRAMSCOPE_SOAK_NS": "1"}
    cmd = [unshare, *flags, sys.executable, *sys.argv]
    return subprocess.run(cmd, env=env, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--warmup-minutes", type=float, default=5)
    parser.add_argument("--box", action="store_true", help="the box's /proc as it is")
    args = parser.parse_args()
    if not args.box and os.environ.get("VRAMSCOPE_SOAK_NS") != "1":
        status = own_pid_namespace()
        if status is not None:
            return status
    where = "the box's /proc" if os.environ.get("VRAMSCOPE_SOAK_NS") != "1" else "own PID ns"
    print(f"soak: {args.minutes:g} min, warm-up {args.warmup_minutes:g} min, {where}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        cfg = Path(tmp) / "c.toml"
        cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
        exe = Path(tmp) / "llama-server"
        shutil.copy(sys.executable, exe)  # a real process that looks like llama-server
        log = (Path(tmp) / "daemon.log").open("w+")
        db = Path(tmp) / "v.db"
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "monitor",
                "daemon",
                "--db",
                str(db),
                "--interval",
                "0.25",
                "--config",
                str(cfg),
            ],
            cwd=ROOT,
            stderr=log,
        )
        started_ms = int(time.time() * 1000)
        start = time.monotonic()
        end = start + args.minutes * 60
        warm_at = start + args.warmup_minutes * 60
        first = None
        first_fds: list[str] = []
        last_fds: list[str] = []
        samples = []
        servers = 0
        n = 0
        died = None
        try:
            while time.monotonic() < end:
                churn = subprocess.Popen(["sleep", "30"])
                if n % 30 == 0:
                    server = subprocess.Popen(
                        [str(exe), "-c", "import time; time.sleep(40)", "-m", "/models/none.gguf"]
                    )
                    servers += 1
                time.sleep(1)
                churn.kill()
                churn.wait()
                if n % 30 == 29:
                    server.kill()
                    server.wait()
                n += 1
                if daemon.poll() is not None:
                    died = daemon.returncode
                    break
                if n % 60 == 0:
                    now = probe(daemon.pid)
                    warm = time.monotonic() >= warm_at
                    if warm:
                        if first is None:
                            first, first_fds = now, fd_targets(daemon.pid)
                        samples.append(now)
                        last_fds = fd_targets(daemon.pid)
                    label = "" if warm else " (warm-up)"
                    print(
                        f"{(time.monotonic() - start) / 60:5.1f} min{label}: RSS {now[0]:.1f}"
                        f" MiB, fds {now[1]}, threads {now[2]}",
                        flush=True,
                    )
        finally:
            if n % 30 != 0:
                server.kill()
                server.wait()
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
        elapsed_s = time.monotonic() - start
        ticks, seen, exited = recorded(db, started_ms, exe)
        log.seek(0)
        log_tail = log.readlines()[-20:]
        log.close()
    problems = []
    if died is not None:
        problems.append(f"the daemon died (exit {died})")
    elif first is None:
        problems.append("too short to judge (no sample after the warm-up)")
    else:
        last = samples[-1]
        print(
            f"RSS {first[0]:.1f} -> {last[0]:.1f} MiB, fds {first[1]} -> {last[1]}, threads "
            f"{first[2]} -> {last[2]} after the warm-up"
        )
        if last[0] - first[0] >= 5:
            problems.append(f"RSS grew {last[0] - first[0]:.1f} MiB (limit 5)")
        if last[1] > first[1]:
            problems.append(
                "file descriptors grew: " + ", ".join(first_fds) + " -> " + ", ".join(last_fds)
            )
        if last[2] > first[2]:
            problems.append("threads grew")
    expected = elapsed_s / 0.25
    print(
        f"{ticks} ticks recorded of ~{expected:.0f} expected; llama-server: {servers} started,"
        f" {seen} recorded, {exited} recorded as exited"
    )
    if ticks < 0.9 * expected:
        problems.append(f"only {ticks} ticks recorded of ~{expected:.0f}")
    if seen < servers or exited < servers - 1:  # the last one may outlive the daemon
        problems.append("llama-server processes were missed")
    if problems:
        print("FAIL: " + "; ".join(problems))
        print("daemon log (last lines):\n" + "".join(log_tail), end="")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
