"""``estimate --pid`` sets what the running server holds now beside each device's
estimate (issue 34: "estimate --pid shows no measured column"): text and JSON, from a
real process's /proc, and nothing of the sort for a typed command."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import cli_runner
import fake_server
import tiny_models

from collectors.base import ProcessMemory
from monitor.analysis.measured import measured_by_device

MIB = 1 << 20


vramscope = functools.partial(cli_runner.vramscope, set_env={"COLUMNS": "200"})


def _resident_bytes(pid: int) -> int:
    """RssAnon + RssFile of /proc/PID/status, as the procfs collector reads them."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return sum(int(fields[k].split()[0]) * 1024 for k in ("RssAnon", "RssFile"))


def test_estimate_pid_shows_what_the_server_holds_now(tmp_path: Path) -> None:
    model = tiny_models.write_llama(tmp_path / "m.gguf").path
    with fake_server.running(["llama-server", "-m", str(model), "-c", "512"], cwd=tmp_path) as s:
        before = _resident_bytes(s.pid)
        doc = json.loads(vramscope("estimate", "--pid", str(s.pid), "--json").stdout)
        text = vramscope("estimate", "--pid", str(s.pid)).stdout
        after = _resident_bytes(s.pid)
    measured = doc["measured_now"]
    assert measured["pid"] == s.pid
    held = measured["by_device"]["host"]  # an idle process: between the two reads here
    assert min(before, after) - MIB <= held <= max(before, after) + MIB
    assert f"measured now (pid {s.pid}):" in text
    (row,) = [x for x in text.splitlines() if x.startswith("host RAM")]
    assert row.split()[-2:] in (  # the MEASURED NOW column, in the unit that fits
        [f"{held / MIB:.0f}", "MiB"],
        [f"{held / (1 << 30):.1f}", "GiB"],
    )


def test_a_typed_command_has_nothing_measured(tmp_path: Path) -> None:
    model = tiny_models.write_llama(tmp_path / "m.gguf").path
    result = vramscope("estimate", "--json", "--", "llama-server", "-m", str(model))
    assert result.returncode == 0, result.stderr
    assert "measured_now" not in json.loads(result.stdout)
    text = vramscope("estimate", "--", "llama-server", "-m", str(model)).stdout
    assert "measured now" not in text


def test_measured_by_device_counts_helpers_on_gpus_and_not_unknown_sizes() -> None:
    rows = [
        ProcessMemory(10, "host", rss_anon_bytes=3 * MIB, rss_file_bytes=5 * MIB),
        ProcessMemory(11, "host", rss_anon_bytes=99 * MIB, rss_file_bytes=0),  # helper: shared
        ProcessMemory(10, "gpu-a", vram_bytes=100 * MIB, gtt_bytes=2 * MIB),
        ProcessMemory(11, "gpu-a", vram_bytes=7 * MIB),  # the helper's own GPU memory
        ProcessMemory(10, "gpu-b"),  # listed without a size
        ProcessMemory(12, "gpu-a", vram_bytes=500 * MIB),  # another process
    ]
    assert measured_by_device(10, rows, helpers=[11]) == {
        "host": 8 * MIB,
        "gpu-a": 109 * MIB,
        "gpu-b": None,
    }
    assert measured_by_device(10, rows) == {"host": 8 * MIB, "gpu-a": 102 * MIB, "gpu-b": None}
