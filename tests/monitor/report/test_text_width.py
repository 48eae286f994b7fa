"""``events`` and ``diagnose`` read whole at 80 and 200 columns (issue 34): lines laid out
for the width the way ``status`` is (monitor/report/status.py ``output_width``), long
messages wrapped at spaces beneath their line, a word longer than a line cut with an
ellipsis; piped without COLUMNS every line whole."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.analysis.diagnose import Diagnosis, Finding
from monitor.cli.diagnose import render as render_diagnose
from monitor.report.events import render as render_events
from monitor.store.database import Store

ROOT = Path(__file__).resolve().parents[3]
LONG = "Qwen3-Coder-30B-A3B-Instruct-UD-Q4_K_XL-with-a-very-long-finetune-suffix.gguf"
GPU0, GPU1 = "nvml:GPU-3f2a9c1e-0000-4000-8000-000000000001", "nvml:GPU-7b-0002"
LABELS = {GPU0: "GPU0 RTX 4090", GPU1: "GPU1 RTX 4060 Ti"}


def fill(db: Path) -> None:
    """Two GPUs' events with long model names, and a crash with its evidence."""
    now = int(time.time() * 1000) - 600_000
    store = Store.open(db)
    for i, dev in enumerate((GPU0, GPU1)):
        store.add_event(
            "load_finished",
            "info",
            f"llama-server[{100 + i}]",
            f"llama-server (pid {100 + i}) loaded {LONG} on {dev}: 17.3 GiB of weights, "
            f"KV 4.0 GiB for 4 slots x 32768 cells, compute 1.2 GiB",
            {"pid": 100 + i},
            now + i,
        )
    data = {"pid": 100, "start_ticks": 1, "cause": "oom_killed", "how": "killed", "comm": "x"}
    store.add_event(
        "crash",
        "critical",
        "srv",
        f"llama-server (pid 100) serving {LONG} on {GPU0} killed by the kernel OOM killer",
        data,
        now + 10,
    )
    store.add_event(
        "oom_kill",
        "critical",
        "host",
        f"Out of memory: Killed process 100 (llama-server) total-vm:64GB anon-rss:40GB {LONG}",
        {"pid": 100},
        now + 11,
    )
    store.add_event("process_exit", "critical", "srv", "llama-server (pid 100) killed", data,
                    now + 12)  # fmt: skip
    store.close()


def events(db: Path, columns: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "events", "--db", str(db), "--since", "1h"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return "\n".join(x for x in done.stdout.splitlines() if "daemon" not in x)


@pytest.mark.parametrize("columns", [80, 200])
def test_events_fit_the_width_and_lose_no_word(tmp_path: Path, columns: int) -> None:
    db = tmp_path / "v.db"
    fill(db)
    whole = events(db, None)
    assert max(len(x) for x in whole.splitlines()) > 200  # piped: every line whole
    text = events(db, str(columns))
    lines = text.splitlines()
    assert all(len(x) <= columns for x in lines), text
    # every word is there, in order, none cut (no word here is longer than a line)
    assert text.split() == whole.split()
    assert "…" not in text
    # a continuation sits under its line's message, never at the left edge
    heads = [x for x in lines if x[:4].isdigit()]
    assert len(heads) == 3 and all(x.startswith(" ") for x in lines if x not in heads)
    if columns == 80:
        assert len(lines) > len(whole.splitlines())


def test_events_labels_name_both_gpus_and_a_huge_word_is_cut_with_an_ellipsis() -> None:
    rows = [
        {"ts_ms": 1_800_000_000_000, "severity": "info", "kind": "load_finished",
         "subject": "x", "message": f"loaded on {GPU1} and {GPU0} " + "x" * 300, "data": {}},
    ]  # fmt: skip
    lines = render_events(rows, LABELS, 80)
    assert all(len(x) <= 80 for x in lines)
    words = " ".join(" ".join(lines).split())
    assert "GPU1 RTX 4060 Ti" in words and "GPU0 RTX 4090" in words
    assert lines[-1].endswith("…") and lines[-1].lstrip().startswith("xxx")
    assert render_events(rows, LABELS, None)[0].endswith("x" * 300)  # whole when piped


def diagnosis(model: str) -> Diagnosis:
    cause = (
        f"llama-server -c 131072 -np 4 on {LABELS[GPU0]} and {LABELS[GPU1]}: 131072 cells "
        "x 48 layers x (K+V) x 8 heads x 128 x 2 B, split by -ts 3,1"
    )
    return Diagnosis(
        pid=4242,
        model=model,
        measured_bytes=30 * 2**30,
        estimated_bytes=29 * 2**30,
        budget_bytes=16 * 2**30,
        findings=(
            Finding("kv", 24 * 2**30, cause, "-ctk q8_0 -ctv q8_0", 12 * 2**30, "slots: " + model),
        ),
        summary=f"{model} holds 30.0 GiB, 14.0 GiB over the budget of 16.0 GiB: {cause}",
    )


@pytest.mark.parametrize("columns", [80, 200])
def test_diagnose_fits_the_width_and_loses_no_word(columns: int) -> None:
    found = [diagnosis(LONG), diagnosis("b" * 120 + ".gguf")]
    whole = render_diagnose(found, False, None)
    text = render_diagnose(found, False, columns)
    assert max(len(x) for x in whole.splitlines()) > 200
    assert all(len(x) <= columns for x in text.splitlines()), text
    if columns == 200:
        assert text.split() == whole.split() and "…" not in text
    else:  # the 125-character name cannot fit 80 columns: cut, with an ellipsis
        cut = [w for w in text.split() if w.endswith("…")]
        assert cut and all(w.startswith("bbbb") for w in cut), text
        assert LONG in text.split()  # 78 characters: whole, on a less indented line
        kept = [w for w in whole.split() if len(w) < 70]
        assert [w for w in text.split() if len(w) < 70 and not w.endswith("…")] == kept
    fix = next(x for x in text.splitlines() if "-ctk" in x or "q8_0" in x)
    assert fix.startswith(" ")


def test_wrapped_keeps_the_lead_once_and_a_long_name_whole() -> None:
    """``wrapped`` (monitor/report/status.py): the line's own leading spaces once (they were
    doubled on its first line), a name that fits the width but not the indented
    continuation kept whole on a less indented line, a word wider than any line cut."""
    from monitor.report.status import wrapped

    assert wrapped("  abc def ghi", 9) == ["  abc def", "      ghi"]
    name = "n" * 75
    lines = wrapped(f"  cause: {name} more words", 80, " " * 26)
    assert lines[0] == "  cause:" and lines[1].strip() == name and len(lines[1]) <= 80
    assert wrapped("x " + "y" * 90, 40)[-1] == "    " + "y" * 35 + "…"
