"""Real-world tier: a server growing in a real memory cgroup is forecast, and alerted on,
before the kernel kills it there.

A compiled ``llama-server`` (a small C program under that name, so the collectors track it
as a llama.cpp server) grows its anonymous memory at 8 MiB/s, as a filling prompt cache
does, inside a 1 GiB memory cgroup. The daemon's own sampler (real /proc, the real memcg
files) ticks; its time-to-OOM forecast and the alert rules run on each tick. The alert must
fire while the process is alive and the cgroup well below its limit, and the kernel's
memcg OOM killer must then end the process: the lead time is real.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from memcg import make_cgroup

from collectors.base import Roots
from monitor.alerts.rules import AlertSettings, AlertState, evaluate
from monitor.daemon.sampler import Sampler

pytestmark = pytest.mark.slow
MIB = 1024 * 1024
LIMIT = 1024 * MIB

GROW_C = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(void) {            /* 8 MiB every second, touched: anonymous, not reclaimable */
    for (;;) {
        for (int i = 0; i < 8; i++) { char *p = malloc(1 << 20); memset(p, 1, 1 << 20); }
        usleep(1000 * 1000);
    }
}
"""


def test_a_steady_grower_is_alerted_before_its_cgroup_kills_it(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "grow.c").write_text(GROW_C)
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    subprocess.run([cc, "-O1", "-o", str(binary), str(tmp_path / "grow.c")], check=True)
    group, procs = make_cgroup(LIMIT)
    proc = subprocess.Popen(
        ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", str(binary), "-m", "x.gguf"]
    )
    sampler = Sampler(Roots(), enabled=["procfs"])
    state, fired, ticks = AlertState.empty(), None, 0
    try:
        deadline = time.monotonic() + 400
        while proc.poll() is None and time.monotonic() < deadline:
            snap = sampler.sample()
            ticks += 1
            state, changes = evaluate(AlertSettings(), snap, state, snap.ts_ms)
            for c in changes:
                if c.alert.rule == "oom_soon" and c.kind == "fired" and fired is None:
                    fired = c.alert
                    alive_at_fire = proc.poll() is None
            time.sleep(0.5)
        rc = proc.wait(timeout=30)
        kills = _oom_kills(group)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sampler.close()
        time.sleep(0.5)
        group.rmdir()
    assert fired is not None, f"no time-to-OOM alert in {ticks} ticks (rc {rc})"
    assert alive_at_fire and fired.data["pool"] == f"cgroup /{group.name}"
    assert fired.data["held_bytes"] < 0.75 * LIMIT  # ahead of the kill, not at 92 %
    assert 0 < fired.data["seconds"] < 120
    assert abs(fired.data["rate_bytes_per_s"] - 8 * MIB) < 2 * MIB
    assert rc == -signal.SIGKILL and kills >= 1  # the memcg OOM killer ended it, as forecast


def _oom_kills(group: Path) -> int:
    for name in ("memory.oom_control", "memory.events"):
        path = group / name
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0
