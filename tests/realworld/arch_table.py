"""Print the table of the real-architecture fixtures: logged buffers, estimate, difference.

    .venv/bin/python tests/realworld/arch_table.py [--save rows.json] [--before rows.json]

``--save`` writes this code's rows as JSON; ``--before`` adds a column from such a file
(made with an older checkout first on PYTHONPATH, e.g. ``git archive`` of main).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT))  # an older checkout given on PYTHONPATH comes first
sys.path.insert(0, str(ROOT / "tests" / "fakes"))

from arch_compare import argv_for, fixture_paths, load, rows  # noqa: E402

from monitor.estimate import estimate_command  # noqa: E402
from monitor.logs.server_log import parse_llama_log  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--save")
    ap.add_argument("--before")
    ap.add_argument("--models", default=None)
    opts = ap.parse_args()
    models = Path(opts.models or tempfile.mkdtemp(prefix="arch-models-"))
    models.mkdir(parents=True, exist_ok=True)
    before = json.loads(Path(opts.before).read_text()) if opts.before else {}
    saved: dict[str, list] = {}
    print("| case | context | buffer | llama.cpp MiB | before MiB | after MiB | diff |")
    print("|---|---|---|---:|---:|---:|---:|")
    for path in fixture_paths():
        doc = load(path)
        report = parse_llama_log(doc["log_lines"])
        try:
            est = estimate_command(argv_for(doc, models), env={}, devices=())
            got = rows(doc, est, report)
        except Exception as exc:  # noqa: BLE001 - an older estimator may refuse a case
            print(f"| {doc['id']} | error: {exc} |")
            continue
        saved[doc["id"]] = [[r.context, r.kind, r.logged_mib, r.estimate_mib] for r in got]
        old = {(c, k): e for c, k, _, e in before.get(doc["id"], [])}
        for r in got:
            prev = old.get((r.context, r.kind))
            prev_s = "" if prev is None else f"{prev:.2f}"
            print(
                f"| {doc['id']} | {r.context} | {r.kind} | {r.logged_mib:.2f} | {prev_s} | "
                f"{r.estimate_mib:.2f} | {r.diff:+.1%} |"
            )
    if opts.save:
        Path(opts.save).write_text(json.dumps(saved, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
