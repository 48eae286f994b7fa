"""CPU of the process-event connector's listener, this tree beside the code before the
change (issue 32 item 1: the in-kernel filter of collectors/proc_filter.py), on the box as
it is.

Method (results in bench/RESULTS.md, "Churn"): fresh interpreters at the same time, each
opening one ``ProcEventListener`` and sleeping ``--seconds``: "new" from this tree, "old"
from ``--baseline DIR`` (``git archive main | tar -x -C DIR``), and "unfiltered": this tree
with ``proc_filter.attach`` replaced by a function that attaches nothing. Each
reports its own CPU (user + system, ``RUSAGE_SELF``, all threads) over the window, less
what it used before the window, and how many events it kept. Both see the same events
(the box's own, plus whatever churn runs beside them, e.g. bench/bench_churn.py).
``--pairs`` windows; medians.

Run: .venv/bin/python bench/bench_proc_events.py --baseline DIR [--pairs 5] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, sys, time
from collectors import proc_events
if sys.argv[1] == "unfiltered":
    from collectors import proc_filter
    proc_filter.attach = lambda sock: False
listener = proc_events.ProcEventListener(max_kept=1 << 30)
assert listener.open(), listener.error
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
time.sleep(1.0)
before, kept = cpu(), len(listener._events)
time.sleep(float(sys.argv[2]))
print(json.dumps({"cpu_s": cpu() - before, "filtered": getattr(listener, "filtered", False),
                  "pids": len(listener._events) - kept}))
listener.close()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    rows = []
    for _ in range(args.pairs):
        procs = {
            name: subprocess.Popen(
                [sys.executable, "-c", CHILD, name, str(args.seconds)],
                cwd=ROOT if name != "old" else args.baseline.resolve(),
                stdout=subprocess.PIPE,
                text=True,
            )
            for name in ("new", "old", "unfiltered")
        }
        row = {
            name: json.loads(p.communicate(timeout=args.seconds + 60)[0])
            for name, p in procs.items()
        }
        rows.append(row)
        print({k: (round(v["cpu_s"], 3), v["filtered"], v["pids"]) for k, v in row.items()})
    med = {k: statistics.median(r[k]["cpu_s"] for r in rows) for k in rows[0]}
    for name, v in med.items():
        print(f"| {name} | {1000 * v / args.seconds:.2f} ms CPU per s |")
    for num, den in (("new", "old"), ("unfiltered", "old")):
        ratio = statistics.median(
            r[num]["cpu_s"] / r[den]["cpu_s"] for r in rows if r[den]["cpu_s"]
        )
        print(f"- {num}/{den}: {ratio:.2f}x (median of {len(rows)} windows)")


if __name__ == "__main__":
    main()
