"""One-hour soak of the daemon (issue 9): 0.25 s ticks with processes coming and going.

Pass criteria (exit 0 / 1): after a warm-up, RSS grows < 5 MiB, and the number of open file
descriptors and of threads does not grow. The daemon runs with its defaults (HTTP on a
free loopback port, alerts off); a sleeper is started and killed every second, and a
`llama-server`-named one every 30 s (tracked, judged by the load watch, then exits).

Run: .venv/bin/python bench/soak.py [--minutes 60] [--warmup-minutes 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def probe(pid: int) -> tuple[float, int, int]:
    status = {line.split(":")[0]: line.split(":")[1].strip()
              for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line}
    return (float(status["VmRSS"].split()[0]) / 1024, len(os.listdir(f"/proc/{pid}/fd")),
            int(status["Threads"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--warmup-minutes", type=float, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        cfg = Path(tmp) / "c.toml"
        cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
        exe = Path(tmp) / "llama-server"
        shutil.copy(sys.executable, exe)  # a real process that looks like llama-server
        daemon = subprocess.Popen([sys.executable, "-m", "monitor", "daemon", "--db",
                                   f"{tmp}/v.db", "--interval", "0.25", "--config", str(cfg)],
                                  cwd=ROOT, stderr=subprocess.DEVNULL)
        end = time.monotonic() + args.minutes * 60
        warm_at = time.monotonic() + args.warmup_minutes * 60
        first = None
        samples = []
        n = 0
        try:
            while time.monotonic() < end:
                churn = subprocess.Popen(["sleep", "30"])
                if n % 30 == 0:
                    server = subprocess.Popen([str(exe), "-c", "import time; time.sleep(40)",
                                               "-m", "/models/none.gguf"])
                time.sleep(1)
                churn.kill()
                churn.wait()
                if n % 30 == 29:
                    server.kill()
                    server.wait()
                n += 1
                if time.monotonic() >= warm_at and n % 60 == 0:
                    now = probe(daemon.pid)
                    first = first or now
                    samples.append(now)
                    print(f"{(time.monotonic() - warm_at) / 60:5.1f} min: RSS {now[0]:.1f} MiB,"
                          f" fds {now[1]}, threads {now[2]}", flush=True)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
    if first is None:
        print("too short to judge")
        return 1
    last = samples[-1]
    ok = last[0] - first[0] < 5 and last[1] <= first[1] and last[2] <= first[2]
    print(f"RSS {first[0]:.1f} -> {last[0]:.1f} MiB, fds {first[1]} -> {last[1]}, threads "
          f"{first[2]} -> {last[2]}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
