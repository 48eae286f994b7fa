"""Engine logs: a tailed file (with rotation) and a followed journald unit (a real
`journalctl` stand-in process), feeding app OOM and systemd-oomd events to the daemon."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from collectors.base import Roots
from monitor.config import Config
from monitor.daemon import DaemonContext, tick
from monitor.logtail import FileTail, JournalTail
from monitor.sampler import Sampler
from monitor.store import Store

OOM = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 10956.01 MiB on device 0: "
       "cudaMalloc failed: out of memory")
TORCH = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
         "total capacity of 23.64 GiB of which 1.02 GiB is free.")


def test_file_tail_reads_new_lines_only_and_follows_rotation(tmp_path: Path) -> None:
    log = tmp_path / "llama-server.log"
    log.write_text(f"old line\n{OOM}\n")  # before the tail started: not reported
    tail = FileTail(log)
    assert tail.read() == []
    with log.open("a") as f:
        f.write("srv  update_slots: all slots are idle\n")
        f.write(f"0.12.345.678 E {OOM}\n")
        f.write("partial line without newline")
    events = tail.read()
    assert [e.kind for e in events] == ["app_oom"] and "cudaMalloc failed" in events[0].message
    with log.open("a") as f:
        f.write(" ... completed\n")
    assert tail.read() == []
    log.rename(tmp_path / "llama-server.log.1")  # rotation: a new file, read from its start
    log.write_text(f"{TORCH}\n")
    (torch,) = tail.read()
    assert torch.kind == "app_oom" and "Tried to allocate 2.00 GiB" in torch.message
    tail.close()


def test_journal_tail_follows_a_unit(tmp_path: Path) -> None:
    fake = tmp_path / "journalctl"
    lines = [
        {"__REALTIME_TIMESTAMP": "1718000200000000", "_TRANSPORT": "stdout", "_PID": "4001",
         "_COMM": "llama-server", "_SYSTEMD_UNIT": "llama.service", "MESSAGE": OOM},
        {"__REALTIME_TIMESTAMP": "1718000100000100", "_TRANSPORT": "journal",
         "_COMM": "systemd-oomd", "MESSAGE": "Killed /system.slice/ollama.service due to swap "
         "used (8589934592) / total (9663676416) being more than 90.00%"},
    ]
    body = "\n".join(f"echo '{json.dumps(x)}'" for x in lines)
    fake.write_text(f"#!/bin/sh\n{body}\nexec sleep 30\n")
    fake.chmod(0o755)
    tail = JournalTail("llama.service", journalctl=str(fake))
    assert tail.start()
    try:
        events = []
        deadline = time.monotonic() + 5
        while len(events) < 2 and time.monotonic() < deadline:
            events += tail.read()
            time.sleep(0.05)
    finally:
        tail.close()
    assert sorted(e.kind for e in events) == ["app_oom", "oomd_kill"]
    missing = JournalTail("x.service", journalctl=str(tmp_path / "no-such-journalctl"))
    assert not missing.start() and "cannot run" in (missing.error or "")


def test_daemon_records_engine_oom_lines_as_events(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    store = Store.open(tmp_path / "v.db")
    ctx = DaemonContext(Config(db_path=tmp_path / "v.db"), store, Sampler(Roots()))
    ctx.tails = [FileTail(log)]
    tick(ctx)
    with log.open("a") as f:
        f.write(f"{OOM}\n")
    time.sleep(0.002)
    tick(ctx)
    rows = store.db.execute("SELECT kind, severity, message FROM events").fetchall()
    assert rows[-1][:2] == ("app_oom", "critical") and "cudaMalloc" in rows[-1][2]
    store.close()
    os.remove(log)
