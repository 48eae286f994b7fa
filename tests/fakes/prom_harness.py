"""A real Prometheus (Debian's ``prometheus`` package, ``/usr/bin/prometheus``) on a free
loopback port, scraping the given targets every second, with its own config, rules and
TSDB in a temporary folder; stopped with SIGTERM at the end."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from daemon_harness import OPENER, free_port

ALWAYS_FIRING = """groups:
  - name: test
    interval: 1s
    rules:
      - alert: TestBoxAlive
        expr: vramscope_last_tick_timestamp_seconds > 0
        annotations:
          summary: "test alert on {{ $labels.instance }}"
"""
"""A rule that fires at once for every daemon scraped (with its job and instance)."""


def prometheus_binary() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )


def api(url: str, path: str) -> Any:
    with OPENER.open(urllib.request.Request(url + path), timeout=10) as resp:
        return json.loads(resp.read())


@contextlib.contextmanager
def prometheus(
    tmp_path: Path, targets: list[str], rules: str = ALWAYS_FIRING, job: str = "vramscope"
) -> Iterator[str]:
    """Its URL, once it answers; ``targets``: HOST:PORT of each daemon."""
    binary = prometheus_binary()
    assert binary is not None, "prometheus not installed (Debian's prometheus package)"
    port = free_port()
    (tmp_path / "rules.yml").write_text(rules)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "rules.yml")],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(process, lambda: _ready(url), 60.0)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        finally:
            process.kill()


def _ready(url: str) -> bool:
    with OPENER.open(url + "/-/ready", timeout=5) as resp:
        return resp.status == 200


def wait_for(process: subprocess.Popen[bytes], check: Callable[[], Any], timeout_s: float) -> Any:
    """``check()`` until true (OSError and ValueError count as not yet); a hang guard."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, "prometheus exited"
        try:
            got = check()
        except (OSError, ValueError):
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, "timed out waiting for prometheus"
        time.sleep(0.2)
