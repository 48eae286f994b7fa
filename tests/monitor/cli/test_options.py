"""Every numeric option is checked when the command line is parsed: a value out of range,
nan or inf is one line ``vramscope: error: ...`` and exit 2, before anything starts (a
negative --refresh used to spin the TUI at 60% CPU, deaf to q and Ctrl-C)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# The console script (tui.entry:main): the CLI with the `tui` command.
ENTRY = "import sys; from tui.entry import main; sys.argv[0] = 'vramscope'; main()"
X = "/nonexistent/x.gguf"


def vramscope(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-c", ENTRY, *args],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:  # the TUI started (and spun) instead of refusing
        pytest.fail(f"vramscope {' '.join(args)} did not exit")


BAD = [
    (["tui", "--refresh", "-1"], "--refresh"),
    (["tui", "--refresh", "0"], "--refresh"),
    (["tui", "--refresh", "nan"], "--refresh"),
    (["tui", "--refresh", "inf"], "--refresh"),
    (["tui", "--refresh", "1e9"], "--refresh"),
    (["daemon", "--interval", "0"], "--interval"),
    (["daemon", "--interval", "nan"], "--interval"),
    (["daemon", "--interval", "-inf"], "--interval"),
    (["estimate", "--pid", "0"], "--pid"),
    (["estimate", "--pid", "-3"], "--pid"),
    (["estimate", "--pid", "99999999999999999999999"], "--pid"),
    (["diagnose", "--pid", "-1"], "--pid"),
    (["postmortem", "--pid", "0"], "--pid"),
    (["predict", "--margin-gib", "-1", "--", "llama-server", "-m", X], "--margin-gib"),
    (["predict", "--margin-gib", "nan", "--", "llama-server", "-m", X], "--margin-gib"),
    (["predict", "--margin-gib", "inf", "--", "llama-server", "-m", X], "--margin-gib"),
    (["predict", "--bw", "gpu=-5", "--", "llama-server", "-m", X], "--bw gpu=-5"),
    (["predict", "--bw", "gpu=nan", "--", "llama-server", "-m", X], "--bw gpu=nan"),
    (["predict", "--bw", "gpu=0", "--", "llama-server", "-m", X], "--bw gpu=0"),
    (["predict", "--flops", "host=-1", "--", "llama-server", "-m", X], "--flops host=-1"),
    (["predict", "--flops", "host:4", "--", "llama-server", "-m", X], "--flops host:4"),
    (["predict", "--accept", "1.5", "--", "llama-server", "-m", X], "--accept"),
    (["predict", "--accept", "nan", "--", "llama-server", "-m", X], "--accept"),
    (["events", "--since", "9" * 400 + "w"], "--since"),
]


@pytest.mark.parametrize(("args", "names"), BAD, ids=[" ".join(a[:3])[:40] for a, _ in BAD])
def test_a_bad_number_is_one_line_and_exit_2(tmp_path: Path, args: list[str], names: str) -> None:
    db = tmp_path / "v.db"
    cut = args.index("--") if "--" in args else len(args)
    result = vramscope(*args[:cut], "--db", str(db), *args[cut:])
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("vramscope: error: "), result.stderr
    assert names in lines[0]
    assert not db.exists()  # refused before anything opened the database


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[budgets]\n'm.gguf' = nan\n", "must be a positive number"),
        ("[budgets]\n'm.gguf' = inf\n", "must be a positive number"),
        ("[daemon]\ninterval_s = nan\n", "interval_s = nan is outside"),
        ("[collectors]\nrescan_s = -inf\n", "rescan_s = -inf is outside"),
    ],
)
def test_a_bad_number_in_the_config_is_one_line_and_exit_2(
    tmp_path: Path, text: str, message: str
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    result = vramscope("status", "--config", str(cfg))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("vramscope: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_tui_help_names_the_ranges() -> None:
    out = vramscope("tui", "--help").stdout
    assert "0.1<=x<=3600" in out
