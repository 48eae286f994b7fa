"""The commands that judge a launch: ``estimate`` (what it should cost) and ``predict`` (will it
fit here, or on every box of the fleet); registered on the group in main.py. The work is in
estimate.py and predict.py beside them."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from monitor.cli.options import PID, Finite, UserError, common_options, load_config
from monitor.textsafe import terminal_safe_lines

if TYPE_CHECKING:
    from monitor.analysis.predict_request import PredictRequest
    from monitor.cli.engine_check import PredictCheck
    from monitor.config import Config


@click.command(context_settings={"ignore_unknown_options": True})
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
    text = run_estimate(  # bad arguments: EstimateError, GgufError (one line at the edge)
        cfg, list(command), pid, as_json, cpu_only, log_path, engine_check, cpu_features
    )
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
launch value, or no device with a known free figure to judge against); 70: a bug in
vramscope (no verdict).

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


@click.command(context_settings={"ignore_unknown_options": True}, help=PREDICT_HELP)
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
        cpu_features=None if cpu_features is None else _cpu_features(cpu_features),
    )
    result = run_predict(cfg, req)  # a bad state file, --at, /running: typed errors
    checked = _check_launch(cfg, req, cpu_features) if engine_check else None
    if checked is not None:  # said with the verdict: a note, and its own JSON key
        result = dataclasses.replace(result, notes=(*result.notes, checked.line))
    text = to_json(result) if as_json else render_text(result)
    if checked is not None and as_json:
        text = json.dumps({**json.loads(text), "engine_check": checked.to_json()}, indent=2)
    click.echo(text if as_json else terminal_safe_lines(text))
    sys.exit(result.exit_code)


def _cpu_features(given: str) -> tuple[str, ...]:
    """--cpu-features parsed by estimate's parser; monitor/cli/estimate.py (with the
    collectors' procfs and the estimate's renderer) loads only when the option is given."""
    from monitor.cli.estimate import parse_cpu_features

    return parse_cpu_features(given)


def _check_launch(cfg: Config, req: PredictRequest, cpu_features: str | None) -> PredictCheck:
    """--engine-check: llama-fit-params beside the verdict (monitor/cli/estimate.py,
    loaded only with the option)."""
    from monitor.cli.estimate import check_predicted_launch

    return check_predicted_launch(cfg, req, cpu_features)


def _names_a_program(word: str) -> bool:
    """``predict -- ls`` reaches us as ``ls`` (click drops the ``--``): a word that is a
    program on PATH or an existing path is a command, not a model id."""
    import shutil  # with bz2 and lzma: only where used

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
