"""``service install --root DIR`` stages files under DIR for another box (a package, an
image): the unit it writes must name the config where it will be installed, never the
staging folder (issue 28, item 14). The real CLI, a real folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_staged_unit_names_the_final_config_path(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "monitor", "service", "install", "--root", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    unit = (tmp_path / "etc/systemd/system/vramscope.service").read_text()
    exec_line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    assert exec_line.endswith(" daemon --config /etc/vramscope/config.toml"), exec_line
    assert str(tmp_path) not in unit
    assert (tmp_path / "etc/vramscope/config.toml").is_file()  # the config itself is staged
    assert "RuntimeDirectory=vramscope" in unit and "RuntimeDirectoryMode=0700" in unit
