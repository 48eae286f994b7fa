"""The ``vramscope`` command. Each command is thin; the work is in the modules it calls.

Errors the user can fix (a broken config, an unusable database, a second daemon) are
:class:`monitor.errors.VramscopeError`; the group catches them at this one edge and prints
one line, ``vramscope: error: ...``, exiting with the error's code (2) - never a traceback.
An unexpected failure in a command is one line too (``COMMAND failed: Type: message``,
exit 2: exit 1 means OOM to ``predict``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from monitor import config as config_mod
from monitor.errors import EXIT_USAGE, UsageError, VramscopeError, describe
from monitor.textsafe import terminal_safe, terminal_safe_lines

UserError = UsageError  # what a command raises for a bad value; any VramscopeError will do


class _OneLine(click.ClickException):
    """A failure on its way out through click: ``vramscope: error: MESSAGE``, one line."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click: a class default, per error

    def show(self, file: Any = None) -> None:
        click.echo(f"vramscope: error: {terminal_safe(self.message)}", err=True)


class _Vramscope(click.Group):
    """The group that runs every command: the CLI's one edge for failures."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # `vramscope events | head`: the reader has all it wanted
            reader_gone()
        except VramscopeError as exc:
            raise _OneLine(str(exc), exc.exit_code) from None
        except Exception as exc:  # a bug: still one line, and not exit 1 (predict's OOM)
            # the daemon's journal keeps the traceback of a bug; a command's user sees one line
            level = logging.ERROR if ctx.invoked_subcommand == "daemon" else logging.DEBUG
            logging.getLogger("vramscope").log(level, "command failed", exc_info=True)
            raise _OneLine(f"{ctx.invoked_subcommand} failed: {describe(exc)}") from None


EXIT_PIPE = 128 + 13  # 141: as a process killed by SIGPIPE, which Python ignores


def reader_gone() -> NoReturn:
    """Exit quietly (EXIT_PIPE) when whoever reads stdout closed it (``| head``): stdout
    becomes /dev/null so the interpreter's last flush of what is still buffered cannot
    print a BrokenPipeError of its own."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    raise SystemExit(EXIT_PIPE)


class Finite(click.FloatRange):
    """A number in a range, and finite: click's FloatRange lets ``nan`` through."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


PID = click.IntRange(1, 2**31 - 1)  # pid_t: a signed 32-bit integer


def _path(**kwargs: Any) -> click.Path:
    return click.Path(dir_okay=False, path_type=Path, **kwargs)


def common_options(func: Any) -> Any:
    """Options every command shares: where the config, database and roots are."""
    options = [
        click.option(
            "--config",
            "config_path",
            type=_path(),
            help="TOML config file (default: /etc/vramscope/config.toml for root, "
            "else ~/.config/vramscope/config.toml, if present).",
        ),
        click.option(
            "--db",
            type=_path(),
            help="SQLite database (default: ~/.local/state/vramscope/vramscope.db, "
            "or /var/lib/vramscope/vramscope.db for root).",
        ),
        click.option(
            "--proc-root",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Read this tree instead of /proc (a recorded fixture).",
        ),
        click.option(
            "--sys-root",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Read this tree instead of /sys (a recorded fixture).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def load_config(**kwargs: Any) -> config_mod.Config:
    """The config (raises ConfigError, a VramscopeError, for a broken one): the command's
    ``--config``, else the group's (``vramscope --config FILE status``); both given and
    different is a usage error."""
    return config_mod.load(_config_in_force(kwargs.pop("config_path", None)), **kwargs)


def _config_in_force(own: Path | None) -> Path | None:
    """The ``--config`` in force: the command's own, or the one given before the command."""
    ctx = click.get_current_context(silent=True)
    group = ctx.find_root().params.get("config_path") if ctx is not None else None
    if own is None or group is None:
        return own if own is not None else group
    if Path(own).absolute() != Path(group).absolute():
        raise _OneLine(f"--config given twice and different: {group} and {own}; give one")
    return own


@click.group(
    cls=_Vramscope,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="vramscope")
@click.option(
    "--config",
    "config_path",
    type=_path(),
    help="TOML config file for the command (the same as the command's own --config).",
)
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None) -> None:
    """vramscope: live GPU and unified-memory monitor for local LLM inference boxes.

    \b
    Quick start:
      vramscope status        what is on each GPU and in host RAM, right now
      vramscope daemon        sample every second into SQLite (Ctrl-C to stop)
      vramscope doctor        what can and cannot be seen here, and how to fix it

    With no command, vramscope opens the TUI in a terminal (`vramscope tui`), else prints
    `status`.
    """
    if ctx.invoked_subcommand is None:
        interactive = sys.stdout.isatty() and sys.stdin.isatty()
        tui = cli.commands.get("tui") if interactive else None
        ctx.invoke(tui or status)


@cli.command()
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


@cli.command()
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
        from monitor.engines import read_llama_env

        click.echo(
            json.dumps(
                status_mod.to_json(snap, lambda pid: read_llama_env(cfg.roots.proc, pid)), indent=2
            )
        )
    else:
        width = status_mod.output_width(
            sys.stdout.isatty(), shutil.get_terminal_size().columns, os.environ
        )
        click.echo(status_mod.render_text(snap, width=width))


@cli.command()
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
        click.echo(json.dumps([dataclasses.asdict(c) for c in checks], indent=2))
    else:
        click.echo(doctor_mod.render(checks))
    sys.exit(1 if any(c.level == "fail" for c in checks) else 0)


@cli.command()
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


@cli.command(context_settings={"ignore_unknown_options": True})
@common_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema vramscope.estimate/1).")
@click.option("--pid", type=PID, help="Estimate a running server from its real arguments.")
@click.option(
    "--cpu-only", is_flag=True, help="Ignore this machine's GPUs: place everything in host memory."
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False),
    help="A llama-server log (-lv 4): show what llama.cpp reported beside each "
    "estimated component.",
)
@click.option(
    "--cpu-features",
    "cpu_features",
    metavar="LIST",
    help="The CPU that will run the server, when not this one: its features of "
    "amx_int8,avx512_vnni,avx512f,avx2 (comma-separated), or none. They decide which weights "
    "llama.cpp repacks into anonymous AMX / CPU_REPACK buffers (default: this box's "
    "/proc/cpuinfo).",
)
@click.option(
    "--engine-check",
    is_flag=True,
    help="Also run the llama-fit-params beside the llama-server and print llama.cpp's own "
    "projection (model, context, compute per device) beside vramscope's, flagging any "
    "difference above 5 %.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def estimate(
    command: tuple[str, ...],
    as_json: bool,
    pid: int | None,
    cpu_only: bool,
    log_path: str | None,
    engine_check: bool,
    cpu_features: str | None,
    **kwargs: Any,
) -> None:
    """Estimate what a server will cost, per component and device, before it starts.

    \b
    Give the command after --, exactly as you would start it:
      vramscope estimate -- llama-server -m model.gguf -c 8192 -np 16 -md draft.gguf
      vramscope estimate --pid 4242          (a running server's own arguments)
    The GPUs of this machine (and their free memory) decide placement; --cpu-only ignores
    them. Each line says the formula behind it; 'grows' lines fill at run time.
    """
    from monitor.cli.estimate import run_estimate

    cfg = load_config(**kwargs)
    try:
        text = run_estimate(
            cfg, list(command), pid, as_json, cpu_only, log_path, engine_check, cpu_features
        )
    except ValueError as exc:  # bad arguments (EstimateError, GgufError: at the edge)
        raise UserError(str(exc)) from None
    click.echo(terminal_safe_lines(text))  # model paths and log lines: hostile


def _refuse_local_options(local: dict[str, Any]) -> None:
    """With --remote each box's daemon judges against its own state: an option that names
    this box's state is a one-line error."""
    given = [flag for flag, value in local.items() if value]
    if given:
        raise UserError(
            f"{given[0]} judges on this box; with --remote each box's daemon judges "
            "against its own state (leave it out)"
        )


def _device_figures(
    flag: str, items: tuple[str, ...], unit: str, example: str, what: str
) -> dict[str, float]:
    """``DEVICE=NUMBER`` pairs (--bw, --flops) -> {device: number}; one line on bad input."""
    out: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = float(value)
        except ValueError:
            raise UserError(f"{flag} {item}: expected DEVICE={unit}, e.g. {example}") from None
        if not (math.isfinite(out[key]) and out[key] > 0):
            raise UserError(f"{flag} {item}: the {what} must be a positive number of {unit}")
    return out


PREDICT_HELP = """Will this load fit? Exit 0: fits at load and once its caches fill; 1: OOM at
load (what the kernel cannot evict - anonymous memory, VRAM, GTT, locked or repacked
weights - passes the room); 3: fits at load, OOM once the prompt cache / checkpoints
fill (bound them with the --cache-ram N / -ctxcp N it names); 4: it loads, but its
mmap'd weights cannot all stay resident: the kernel evicts their page cache instead of
killing, and every token re-reads them from disk (slow, not dead); 2: error (a bad
launch value, or no device with a known free figure to judge against).

The room is the smallest of device free memory, host MemAvailable and the memory
cgroup's room (this shell's, llama-swap's for a MODEL_ID, or --cgroup/--unit). With no
-c, the load is judged at the context llama.cpp's fit will choose.

With -md (or --bw/--flops/--accept) it also gives the expected tokens/s, a roofline
per device (bytes / bandwidth vs FLOPs / peak), and says whether the draft wins
against the model alone at the most layers that fit without it.

\b
  vramscope predict -- llama-server -m big.gguf -c 32768 -md draft.gguf
  vramscope predict --swap-config /etc/llama-swap.yaml qwen3-122b
  vramscope predict qwen3-122b     ([llama_swap] config in the config file)
  vramscope predict qwen3-8b       (the llama-server router on this box serving it)
  vramscope predict --router http://127.0.0.1:8080 qwen3-8b
  vramscope predict --state box.json --fit-ctx -- llama-server -m m.gguf
Usable as systemd ExecStartPre= or in scripts. Each fix says what it frees.

With --remote (repeated), each box's daemon judges the launch against its own latest
tick and model files, and the boxes are listed best first: the verdict, the headroom
left on the tightest device, what llama-swap would unload there. Exit 0: it fits on
a box; 3: only at load; 1: on no box; 2: no box answered.

\b
  vramscope predict --remote http://box-a:9835 --remote http://box-b:9835 \\
      -- llama-server -m /models/glm-4.5-air.gguf -c 32768
"""


@cli.command(context_settings={"ignore_unknown_options": True}, help=PREDICT_HELP)
@common_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema vramscope.predict/1).")
@click.option(
    "--state",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Judge against a recorded `vramscope status --json` file, not this box now.",
)
@click.option(
    "--at",
    "at_time",
    help="Judge against a moment in the database ('YYYY-MM-DD HH:MM', local time).",
)
@click.option(
    "--swap-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="llama-swap config: predict a model by its id, counting what it unloads.",
)
@click.option("--swap-url", help="llama-swap on loopback (http://127.0.0.1:PORT) for /running.")
@click.option(
    "--router",
    "router_url",
    metavar="URL",
    help="A llama-server router on loopback (http://127.0.0.1:PORT): predict MODEL_ID from "
    "its GET /models, counting the model its --models-max unloads.",
)
@click.option(
    "--router-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A llama-server router's --models-preset FILE.ini: predict MODEL_ID from it.",
)
@click.option(
    "--margin-gib",
    type=Finite(0, 1_000_000),
    default=0.5,
    show_default=True,
    help="Safety margin kept free on every device.",
)
@click.option(
    "--fit-ctx",
    "want_fit_ctx",
    is_flag=True,
    help="Also find the largest -c that fits on this box state.",
)
@click.option(
    "--bw",
    "bandwidths",
    multiple=True,
    metavar="DEVICE=GB/s",
    help="Memory bandwidth for the tokens/s roofline, e.g. --bw gpu=272 --bw "
    "host=76.8 (gpu = every GPU; default: a table of GPUs by name, none for host); "
    "--bw disk=2 bounds a THRASH verdict's tokens/s by what it re-reads from disk.",
)
@click.option(
    "--flops",
    "flops",
    multiple=True,
    metavar="DEVICE=TFLOPS",
    help="Peak compute for the roofline, e.g. --flops host=0.4 (default: a table of "
    "GPUs by name; host: physical cores x 50 GFLOP/s).",
)
@click.option(
    "--accept",
    type=Finite(0, 1),
    default=None,
    metavar="RATE",
    help="Acceptance rate per drafted token for the draft's verdict (default 0.7).",
)
@click.option(
    "--cgroup",
    "cgroup_path",
    metavar="PATH",
    help="The memory cgroup the launch will run in (/sys/fs/cgroup/...); default: "
    "this shell's, or llama-swap's for a MODEL_ID.",
)
@click.option(
    "--unit",
    metavar="NAME",
    help="The systemd unit the launch will run in "
    "(its cgroup system.slice/NAME bounds it: MemoryMax=).",
)
@click.option(
    "--cpu-features",
    "cpu_features",
    metavar="LIST",
    help="The CPU that will run the server, when not the judged box's: amx_int8,avx512_vnni,"
    "avx512f,avx2 (comma-separated) or none (which weights llama.cpp repacks into anonymous "
    "memory).",
)
@click.option(
    "--growth-horizon",
    "growth_horizon",
    type=click.IntRange(0),
    metavar="TOKENS",
    help="A prompt cache that passes the room only after more distinct prompt tokens than "
    "this is a note, not exit 3/4 (default [predict] growth_horizon_tokens, 1000000).",
)
@click.option(
    "--engine-check",
    "engine_check",
    is_flag=True,
    help="Check the estimate the verdict rests on with llama.cpp's llama-fit-params beside "
    "the llama-server (as estimate --engine-check); the verdict says whether it did, or why "
    "not.",
)
@click.option(
    "--remote",
    "remotes",
    multiple=True,
    metavar="URL",
    help="Judge the launch on each of these boxes instead (their daemons' HTTP API, "
    "http://HOST:9835; repeat for a fleet) and name where it fits.",
)
@click.option(
    "--token",
    envvar="VRAMSCOPE_TOKEN",
    help="The daemon's [http] token (or $VRAMSCOPE_TOKEN), for one box; a fleet's boxes "
    "take theirs from [fleet] boxes in the config (a token file each).",
)
@click.argument("target", nargs=-1, type=click.UNPROCESSED)
def predict(
    target: tuple[str, ...],
    remotes: tuple[str, ...],
    token: str | None,
    as_json: bool,
    state: Path | None,
    at_time: str | None,
    swap_config: Path | None,
    swap_url: str | None,
    router_url: str | None,
    router_config: Path | None,
    margin_gib: float,
    want_fit_ctx: bool,
    bandwidths: tuple[str, ...],
    flops: tuple[str, ...],
    accept: float | None,
    cgroup_path: str | None,
    unit: str | None,
    growth_horizon: int | None,
    cpu_features: str | None,
    engine_check: bool = False,
    **kwargs: Any,
) -> None:
    """Will this load fit? (help: PREDICT_HELP)"""
    from monitor.cli.estimate import check_predicted_launch, parse_cpu_features
    from monitor.cli.predict import PredictRequest, run_predict
    from monitor.report.predict import render_text, to_json

    if remotes:
        _refuse_local_options(
            {
                "--state": state,
                "--at": at_time,
                "--swap-config": swap_config,
                "--router": router_url,
                "--router-config": router_config,
                "--fit-ctx": want_fit_ctx,
                "--bw": bandwidths,
                "--flops": flops,
                "--accept": accept,
                "--cgroup": cgroup_path,
                "--unit": unit,
                "--cpu-features": cpu_features,
                "--engine-check": engine_check,
            }
        )
        from monitor.http.tokens import tokens_for

        tokens = tokens_for(remotes, load_config(**kwargs), token)
        _predict_on_fleet(list(remotes), tokens, target, margin_gib, as_json)
        return
    cfg = load_config(**kwargs)
    bw = _device_figures("--bw", bandwidths, "GB/s", "gpu=272", "bandwidth")
    peak = _device_figures("--flops", flops, "TFLOPS", "host=0.4", "peak")
    if swap_config is None and router_url is None and router_config is None:
        swap_config = cfg.swap_config  # [llama_swap] config
    # one word: a model id (llama-swap's with --swap-config, a llama-server router's with
    # --router/--router-config, or the router on this box's unless it names a program)
    model_id = target[0] if len(target) == 1 and target[0] != "--" else None
    if model_id is not None and swap_config is None and router_url is None and not router_config:
        model_id = None if _names_a_program(model_id) else model_id
    req = PredictRequest(
        [] if model_id is not None else list(target),
        model_id=model_id,
        state=state,
        at=at_time,
        swap_config=swap_config,
        swap_url=swap_url,
        router_url=router_url,
        router_config=router_config,
        margin_gib=margin_gib,
        want_fit_ctx=want_fit_ctx,
        bandwidth_gbs=bw,
        flops_tflops=peak,
        accept=accept,
        cgroup=cgroup_path,
        unit=unit,
        growth_horizon_tokens=(
            growth_horizon if growth_horizon is not None else cfg.growth_horizon_tokens
        ),
        check_engine_flags=True,
        cpu_features=None if cpu_features is None else parse_cpu_features(cpu_features),
    )
    try:
        result = run_predict(cfg, req)
        checked = check_predicted_launch(cfg, req, cpu_features) if engine_check else None
        if checked is not None:  # said with the verdict: a note, and its own JSON key
            result = dataclasses.replace(result, notes=(*result.notes, checked.line))
        text = to_json(result) if as_json else render_text(result)
        if checked is not None and as_json:
            text = json.dumps({**json.loads(text), "engine_check": checked.to_json()}, indent=2)
    except (ValueError, OSError) as exc:  # a bad state file, --at, llama-swap's /running
        raise UserError(str(exc)) from None
    click.echo(text if as_json else terminal_safe_lines(text))
    sys.exit(result.exit_code)


def _names_a_program(word: str) -> bool:
    """``predict -- ls`` reaches us as ``ls`` (click drops the ``--``): a word that is a
    program on PATH or an existing path is a command, not a model id."""
    return shutil.which(word) is not None or os.path.exists(word)


def _predict_on_fleet(
    urls: list[str],
    tokens: dict[str, str | None],
    target: tuple[str, ...],
    margin_gib: float,
    as_json: bool,
) -> None:
    from monitor.analysis.fleet import exit_code
    from monitor.cli.predict import predict_on_fleet
    from monitor.report.predict import fleet_json, fleet_text

    command = list(target[1:]) if target and target[0] == "--" else list(target)
    if not command:
        raise UserError(
            "--remote needs a launch: vramscope predict --remote URL -- llama-server -m M.gguf"
        )
    # one word: a llama-server router's model id, judged on each box by its own router
    model_id = command[0] if len(command) == 1 else None
    answers = predict_on_fleet(urls, tokens, command, margin_gib, model_id)
    click.echo(fleet_json(answers) if as_json else terminal_safe_lines(fleet_text(answers)))
    sys.exit(exit_code(answers))


@cli.command()
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
    try:
        found = run_diagnose(cfg, state, at_time, pid, log_path)
    except (ValueError, OSError) as exc:
        raise UserError(str(exc)) from None
    click.echo(terminal_safe_lines(render(found, as_json)))


@cli.command()
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
    from monitor.analysis.postmortem import build
    from monitor.report.postmortem import render_html, render_text
    from monitor.store.history import parse_time

    cfg = load_config(**kwargs)
    try:
        doc = build(cfg.db_path, pid, parse_time(at_time) if at_time else None)
    except (ValueError, OSError) as exc:
        raise UserError(str(exc)) from None
    if html_path is not None:
        try:
            html_path.write_text(render_html(doc), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {html_path}: {exc.strerror}") from None
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 100
    click.echo(json.dumps(doc, indent=2) if as_json else render_text(doc, width))


@cli.command()
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
    from monitor.store.history import parse_since

    cfg = load_config(**kwargs)
    try:
        rows = list_events(cfg.db_path, parse_since(since), kinds)
        labels = {} if as_json else list_device_labels(cfg.db_path)
    except (ValueError, OSError) as exc:
        raise UserError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from monitor.report.events import render

    for line in render(rows, labels):  # a crash: one line, its evidence indented (--json: all)
        click.echo(line)
    if not rows:
        click.echo("no events in that period")


@cli.group()
def service() -> None:
    """Install vramscope as a systemd service (system-wide, or --user)."""


@service.command("install")
@click.option("--user", "user", is_flag=True, help="Your user's systemd (no root needed).")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default="/",
    hidden=True,
    help="Write under this directory instead of / (for packaging).",
)
@click.option(
    "--allow-user-venv",
    is_flag=True,
    help="Install even though a non-root user can change the code the service "
    "runs with CAP_SYS_PTRACE (see docs/service.md).",
)
def service_install(user: bool, root: Path, allow_user_venv: bool) -> None:
    """Write the unit and an example config (0600), then print the next steps."""
    from monitor.service.install import install

    click.echo("\n".join(install(user, root, allow_user_venv=allow_user_venv)))


@service.command("uninstall")
@click.option("--user", "user", is_flag=True, help="The --user unit.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default="/", hidden=True)
def service_uninstall(user: bool, root: Path) -> None:
    """Remove the unit (the config and the data stay)."""
    from monitor.service.install import uninstall

    click.echo("\n".join(uninstall(user, root)))


@cli.group()
def alerts() -> None:
    """Alert channels: apprise URLs and a command hook ([alerts] in the config)."""


@alerts.command("test")
@common_options
def alerts_test(**kwargs: Any) -> None:
    """Send a test notification to every configured channel; exit 1 if any failed."""
    from monitor.alerts import Notifier

    cfg = load_config(**kwargs)
    if not cfg.alert_urls and not cfg.alert_command:
        raise UserError(
            'no alert channels: add [alerts] urls = [...] or command = "..." to the config'
        )
    notifier = Notifier(list(cfg.alert_urls), cfg.alert_command, cfg.alert_cooldown_s)
    try:
        results = notifier.send_test()
    finally:
        notifier.close()
    for channel, outcome in results.items():
        click.echo(f"{channel}: {outcome}")
    sys.exit(0 if all(v == "ok" for v in results.values()) else 1)


def main() -> None:
    """Entry point: click's usage errors become one line too (no usage dump)."""
    try:
        code = cli.main(prog_name="vramscope", standalone_mode=False)
    except BrokenPipeError:  # --help into a closed pipe, say; a command's own is in invoke
        reader_gone()
    except click.exceptions.Abort:
        click.echo("vramscope: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"vramscope: error: {terminal_safe(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
