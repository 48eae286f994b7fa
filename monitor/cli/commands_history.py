"""The commands that read what happened: ``diagnose`` (now or a moment in the database),
``postmortem`` (one crash, from the database) and ``events``; registered on the group in main.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from monitor.cli.options import PID, UserError, common_options, load_config, terminal_width
from monitor.textsafe import terminal_safe_lines


@click.command()
@common_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--state",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Diagnose a recorded `vramscope status --json` file instead of this box.",
)
@click.option("--at", "at_time", help="Diagnose a moment in the database.")
@click.option("--pid", type=PID, help="Only this process.")
@click.option(
    "--log",
    "log_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The llama-server log of --pid (its --log-file is read by itself): its prompt "
    "cache and checkpoint lines name what grew.",
)
def diagnose(
    as_json: bool,
    state: Path | None,
    at_time: str | None,
    pid: int | None,
    log_path: Path | None,
    **kwargs: Any,
) -> None:
    """Explain why running models hold more memory than expected.

    \b
    For each llama.cpp / ollama server: measured vs estimated vs your budget
    ([budgets] in the config: "model.gguf" = GiB), the difference split by component
    (KV cells x bytes, SWA, compute from -ub or -fa off, the draft's KV, host buffers,
    unaccounted), the cause in one sentence and the fixes with the GiB they free.
    Growth over the estimate is named from the server's own log (prompt cache,
    context checkpoints) and /slots, with the line each figure comes from.
    """
    from monitor.cli.diagnose import render, run_diagnose

    if log_path is not None and pid is None:
        raise UserError("--log needs --pid: the server that wrote the log")
    cfg = load_config(**kwargs)
    found = run_diagnose(cfg, state, at_time, pid, log_path)
    click.echo(terminal_safe_lines(render(found, as_json, terminal_width())))


@click.command()
@common_options
@click.option("--last", "last", is_flag=True, help="The most recent crash (the default).")
@click.option("--pid", type=PID, help="The crash of this process.")
@click.option("--at", "at_time", help="The crash nearest this time ('YYYY-MM-DD HH:MM').")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (vramscope.postmortem/1).")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write one self-contained HTML report (inline SVG chart) here.",
)
def postmortem(
    last: bool,
    pid: int | None,
    at_time: str | None,
    as_json: bool,
    html_path: Path | None,
    **kwargs: Any,
) -> None:
    """What died, when and how: the evidence around an OOM kill or a crashed load.

    \b
    Reads the daemon's database: the kernel's record, every tracked process's and
    device's memory from 10 minutes before to 1 minute after, what was loading, the
    estimate vs what was measured at death, the ceiling, the likely cause and the fix.
      vramscope postmortem --last --html crash.html
    """
    from monitor.analysis.postmortem import build_model
    from monitor.report.postmortem import render_html, render_text
    from monitor.store.moment import parse_time

    cfg = load_config(**kwargs)
    doc = build_model(cfg.db_path, pid, parse_time(at_time) if at_time else None)
    if html_path is not None:
        try:
            html_path.write_text(render_html(doc), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {html_path}: {exc.strerror}") from None
    import shutil  # with bz2 and lzma: only where used

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 100
    click.echo(json.dumps(doc.to_json(), indent=2) if as_json else render_text(doc, width))


@click.command()
@common_options
@click.option(
    "--since",
    default="24h",
    show_default=True,
    help="How far back: 30m, 6h, 2d, 1w, today, yesterday, a time of day (14:30, its "
    "latest) or 'YYYY-MM-DD HH:MM' (local time).",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    help="Only these kinds (repeatable): oom_kill, crash, process_exit, "
    "oom_predicted, load_started, load_finished, xid, ...",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def events(since: str, kinds: tuple[str, ...], as_json: bool, **kwargs: Any) -> None:
    """List what the daemon recorded: kills, crashes, loads, alerts, Xids."""
    from monitor.analysis.postmortem import list_device_labels, list_events
    from monitor.store.moment import parse_since

    cfg = load_config(**kwargs)
    rows = list_events(cfg.db_path, parse_since(since), kinds)
    labels = {} if as_json else list_device_labels(cfg.db_path)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from monitor.report.events import render

    for line in render(rows, labels, terminal_width()):  # a crash: one line, evidence beneath
        click.echo(line)
    if not rows:
        click.echo("no events in that period")
