"""Real-world tier: a box of default-flag llama-servers raises nothing.

Every llama-server carries llama.cpp's default ``--cache-ram 8192`` MiB prompt cache, so
four tiny servers have growth ceilings past this whole box's RAM, while what they hold at
load is a few hundred MiB. A real daemon watches them: its own alert rules record no
alert and no ``oom_predicted``; its /metrics shows the case (estimates at load far below
host RAM, ceilings above it), which the shipped rules judge by the estimates at load
(promtool cases in docs/prometheus/vramscope-rules.test.yml).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import daemon_harness
import pytest

pytestmark = pytest.mark.slow


def _sum(metrics: str, name: str, device: str = "host", pids: set[int] | None = None) -> float:
    """The sum of a family's host series (of these pids only, when given)."""
    pattern = re.compile(rf"^{name}{{([^}}]*)}} ([0-9.e+]+)$", re.M)
    total = 0.0
    for labels, value in pattern.findall(metrics):
        if f'device="{device}"' not in labels:
            continue
        if pids is not None and not any(f'pid="{p}"' in labels for p in pids):
            continue
        total += float(value)
    return total


def test_four_default_servers_raise_nothing(
    llama_server_bin: Path, tiny: dict, tmp_path: Path
) -> None:
    servers = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    try:
        for _ in range(4):
            servers.append(
                subprocess.Popen(
                    [
                        str(llama_server_bin),
                        "-m",
                        str(tiny["llama"].path),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(daemon_harness.free_port()),
                        "-t",
                        "1",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                )  # fmt: skip
            )
        with daemon_harness.running(tmp_path, interval_s=0.5) as d:

            def assessed() -> str | None:
                text = d.metrics()
                seen = {p.pid for p in servers if f'pid="{p.pid}"' in text}
                return text if len(seen) == len(servers) else None

            d.poll("the four servers assessed", assessed, timeout_s=120)
            time.sleep(5)  # some more ticks for any rule to hold
            metrics = d.metrics()
            total = _sum(metrics, "vramscope_device_memory_total_bytes")
            ours = {p.pid for p in servers}
            at_load = _sum(metrics, "vramscope_process_estimate_bytes", pids=ours)
            ceiling = _sum(metrics, "vramscope_process_estimate_ceiling_bytes", pids=ours)
            assert 0 < at_load < 0.1 * total < total < ceiling, (at_load, total, ceiling)
            conn = sqlite3.connect(d.db)
            try:  # only our servers: other tests on this box may run servers of their own
                mine = [
                    (kind, data)
                    for kind, x in conn.execute("SELECT kind, data FROM events")
                    if (data := json.loads(x or "{}")).get("pid") in ours
                ]
            finally:
                conn.close()
        assert {k for k, _ in mine} <= {"load_started", "load_finished"}, mine
    finally:
        for p in servers:
            p.send_signal(signal.SIGTERM)
        for p in servers:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
