"""One bad followed log must blind neither the others nor the kernel log (issue 28, item 5).

A real daemon follows ``[logs] files`` = a FIFO, a log in a folder its user then swaps for
a plain file (every read of it fails: ``NotADirectoryError``), and a plain engine log. Its
kernel log is a file of ours (``daemon_harness.KMSG_FROM_FILE``). An Xid record appended to
that kernel log and an engine out-of-memory line appended to the plain log must both become
events: before the fix, the failing tail raised out of the tick after ``kmsg.read()`` had
consumed the tick's kernel records, which were dropped, and the tails after it were never
read.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import daemon_harness

OOM = "ggml_backend_cuda_buffer_type_alloc_buffer: cudaMalloc failed: out of memory"


def _events(db: Path, kind: str) -> list[tuple[str, dict[str, object]]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute("SELECT message, data FROM events WHERE kind = ?", (kind,)).fetchall()
    finally:
        conn.close()
    return [(m, json.loads(d or "{}")) for m, d in rows]


def _ticks(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return int(conn.execute("SELECT count(DISTINCT ts_ms) FROM collector_runs").fetchone()[0])
    finally:
        conn.close()


def _kmsg_record(text: str) -> str:
    usec = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1_000_000)
    return f"2,900001,{usec},-;{text}\n"


def test_a_fifo_and_a_failing_log_blind_neither_the_kernel_log_nor_other_logs(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo, 0o666)
    folder = tmp_path / "user-logs"
    folder.mkdir()
    swapped = folder / "engine.log"
    swapped.write_text("started\n")
    plain = tmp_path / "llama-server.log"
    plain.write_text("started\n")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(_kmsg_record("Linux version 6.8.0 (a record from before the start)"))
    files = json.dumps([str(fifo), str(swapped), str(plain)])
    with daemon_harness.running(
        tmp_path,
        f"[logs]\nfiles = {files}\n",
        python_args=daemon_harness.kmsg_daemon_args(kmsg),
    ) as d:
        start = _ticks(d.db)
        d.poll("the logs opened on a tick", lambda: _ticks(d.db) >= start + 3)
        folder.rename(tmp_path / "user-logs.old")  # what the folder's owner can do
        folder.write_text("not a folder any more\n")
        d.poll("a tick after the swap", lambda: _ticks(d.db) >= start + 6)
        marker = f"NVRM: Xid (PCI:0000:7f:00): 79, pid=4242, name=isolated-{os.getpid()}, GPU"
        with kmsg.open("a") as f:
            f.write(_kmsg_record(f"{marker} has fallen off the bus."))
        with plain.open("a") as f:
            f.write(f"{OOM}\n")
        got = d.poll(
            "the engine OOM line",
            lambda: [e for e in _events(d.db, "engine_oom") if e[1].get("source") == str(plain)],
            timeout_s=30,
        )
        xids = d.poll(
            "the kernel's Xid record",
            lambda: [e for e in _events(d.db, "xid") if marker in e[0]],
            timeout_s=30,
        )
        assert len(got) == 1 and "cudaMalloc failed" in got[0][0]
        assert len(xids) == 1
        d.poll("more ticks", lambda: _ticks(d.db) >= start + 12)
    # the FIFO refused and the failing log named once each, not once per tick
    fifo_lines = [x for x in d.stderr.splitlines() if str(fifo) in x]
    swapped_lines = [x for x in d.stderr.splitlines() if str(swapped) in x]
    assert len(fifo_lines) == 1 and "not a regular file" in fifo_lines[0], d.stderr[-3000:]
    assert len(swapped_lines) == 1 and "NotADirectoryError" in swapped_lines[0], d.stderr[-3000:]
