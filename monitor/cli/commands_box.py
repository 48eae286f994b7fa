"""The commands about this box now: ``daemon`` (sample into the database), ``status``,
``doctor`` and ``capture``; registered on the group in main.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from monitor.cli.options import Finite, common_options, load_config, terminal_width


@click.command()
@common_options
@click.option("--interval", type=Finite(0.05, 3600), help="Seconds between samples (default 1).")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="Log verbosity (default info). Logs go to stderr, one line each.",
)
def daemon(interval: float | None, log_level: str | None, **kwargs: Any) -> None:
    """Sample devices and processes into the database until stopped.

    \b
    Runs in the foreground; SIGTERM or Ctrl-C finishes the tick in flight and exits 0.
    Only one daemon may write a database; a second one exits with an error.
    Example: vramscope daemon --interval 0.5 --db /tmp/vs.db
    """
    import logging

    from monitor.daemon import loop as daemon_mod

    cfg = load_config(interval_s=interval, log_level=log_level, **kwargs)
    logging.basicConfig(
        level=cfg.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if cfg.log_level != "debug":
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
    sys.exit(daemon_mod.run(cfg))  # a StoreError (a second daemon): one line at the edge


@click.command()
@common_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (schema vramscope.status/1, docs/status.schema.json).",
)
@click.option(
    "--pss",
    is_flag=True,
    help="Also read PSS (smaps_rollup) of every tracked process. It walks page "
    "tables: up to ~0.5 s for a 70 GB process, competing with it for its "
    "memory map lock.",
)
def status(as_json: bool = False, pss: bool = False, **kwargs: Any) -> None:
    """Show devices and tracked processes, sampled now.

    \b
    Tracked processes are inference servers (llama-server, llama-swap, ollama, vLLM, ...),
    every process holding GPU memory, and the top 5 by memory.
    MEASURED is GPU (VRAM+GTT, its helpers' included) + ANON + FILE, the figure every view
    shows; ANON/FILE are resident anonymous and file-backed memory (an mmap'd GGUF is
    FILE); GPU is VRAM+GTT per device. Unknown values print as '-', never 0.
    """
    from collectors.base import CollectorOptions
    from monitor.analysis.state import Live, box_state
    from monitor.daemon.sampler import Sampler
    from monitor.report import status as status_mod

    cfg = load_config(**kwargs)
    options = CollectorOptions(
        top_n=cfg.options.top_n,
        max_tracked=cfg.options.max_tracked,
        pss_per_tick=cfg.options.max_tracked if pss else 0,
    )
    sampler = Sampler(cfg.roots, options, cfg.collectors)
    try:
        snap = box_state(Live(sampler=sampler)).snapshot
    finally:
        sampler.close()
    if as_json:
        import json  # only for --json: a plain `status` never loads it

        from monitor.servers import read_llama_env

        click.echo(
            json.dumps(
                status_mod.to_json(snap, lambda pid: read_llama_env(cfg.roots.proc, pid)), indent=2
            )
        )
    else:
        click.echo(status_mod.render_text(snap, width=terminal_width()))


@click.command()
@common_options
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def doctor(as_json: bool = False, **kwargs: Any) -> None:
    """Explain what vramscope can see here, what is hidden and why, and how to fix it.

    Exits 1 when a check fails (vramscope cannot do its job), else 0.
    """
    import dataclasses

    from monitor.cli import doctor as doctor_mod

    cfg = load_config(**kwargs)
    checks = doctor_mod.run_checks(cfg)
    if as_json:
        import json

        click.echo(json.dumps([dataclasses.asdict(c) for c in checks], indent=2))
    else:
        click.echo(doctor_mod.render(checks))
    sys.exit(1 if any(c.level == "fail" for c in checks) else 0)


@click.command()
@common_options
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--archive", is_flag=True, help="Also pack the folder as FOLDER.tar.gz.")
@click.option("--no-nvml", is_flag=True, help="Leave out the NVIDIA driver's answers.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def capture(
    folder: Path, archive: bool = False, no_nvml: bool = False, as_json: bool = False, **kwargs: Any
) -> None:
    """Record what vramscope reads on this machine into FOLDER, for a bug report or a test.

    One sample is taken with every read recorded: the /proc and /sys files, listings and
    links the collectors use, in a tree that `--proc-root FOLDER/proc --sys-root FOLDER/sys`
    samples again on any machine; with an NVIDIA driver, its answers go to nvml.json.
    Secrets on command lines are redacted, /proc/PID/environ is never read, and file
    descriptors that are not GPU nodes keep no target. Look before you send it.

    \b
    Examples:
      vramscope capture ./my-box --archive      # then attach my-box.tar.gz
      vramscope status --proc-root ./my-box/proc --sys-root ./my-box/sys
    """
    from monitor.cli.capture import capture as capture_tree
    from monitor.cli.capture import replay_command

    cfg = load_config(**kwargs)
    result = capture_tree(
        cfg.roots, folder, enabled=cfg.collectors, nvml=not no_nvml, archive=archive
    )
    if as_json:
        import json

        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    runs = ", ".join(f"{name} {status}" for name, status in result.collectors.items())
    click.echo(
        f"captured {result.files} files ({result.bytes / 1024:.0f} KiB), "
        f"{result.links} links into {result.out}"
    )
    click.echo(f"collectors: {runs}; NVIDIA: {result.nvml}")
    click.echo(
        f"redacted command lines: {result.redacted_cmdlines}; left out: "
        f"{result.dropped}; unreadable here: {len(result.denied)}"
    )
    if result.archive is not None:
        click.echo(f"archive: {result.archive}")
    click.echo(f"replay: {replay_command(result.out)}")
