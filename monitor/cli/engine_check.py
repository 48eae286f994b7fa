"""``vramscope estimate --engine-check``: llama.cpp's own projection beside the estimate.

``llama-fit-params`` (llama.cpp tools/fit-params) builds the model and its contexts with
``no_alloc``, reserves their graphs and prints the memory breakdown table
(``common_memory_breakdown_print``): per device, model + context + compute MiB, as
llama.cpp itself projects them. When one sits beside the ``llama-server`` being judged,
it is run on the arguments it takes (the target model's memory options) with ``-fit off``
(the table for exactly these arguments, not a fitted variant) and each figure is put
beside vramscope's estimate *of the same arguments*, flagging any difference above 5 %.

It reserves logits for ``n_batch`` outputs, as the library default does; llama-server
reserves ``np x (1 + n_draft)``: the compared estimate uses the library's count (the
estimate printed above it stays llama-server's). Options it refuses (``--port``, ``-kvu``,
``-md``, ``--spec-type``, ...) are not passed and are listed.

The binary is found next to the server's path as given (``/opt/llama/bin/llama-server``
-> ``/opt/llama/bin/llama-fit-params``; a bare name through PATH), never through a link,
and runs only if it is a regular executable file owned by root or by us and writable by
no one else (``estimate --pid`` may run as root on another user's server).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.errors import InputError, SetupError
from monitor.estimate.model import HOST, MemoryEstimate
from monitor.logs.server_log import BreakdownRow, LlamaLogReport, parse_llama_log
from monitor.servers.environ import allowed as env_allowed
from monitor.servers.llamacpp_flags import ENV_KEYS, OPTIONAL, OPTIONS, SWITCH
from monitor.servers.server_help import named_path
from monitor.units import MIB

FIT_PARAMS = "llama-fit-params"
TIMEOUT_S = 180.0
MAX_OUTPUT_BYTES = 4 * 1024 * 1024
TOLERANCE = 0.05
PRINTED_MIB = 1.0  # the table prints whole MiB
# Options llama-fit-params takes (common_params_parse for LLAMA_EXAMPLE_FIT_PARAMS,
# checked one by one on llama.cpp 0c1e57098) that change the target's memory.
PASSED = frozenset(
    {
        "-m", "-c", "-np", "-ctk", "-ctv", "-fa", "-b", "-ub", "-ngl", "-ts", "-sm", "-mg",
        "-dev", "-ot", "-cmoe", "-ncmoe", "-nkvo", "-kvo", "--swa-full", "-lm",
    }
)  # fmt: skip
# ...and those it takes that vramscope replaces: the fit is switched off.
REPLACED = frozenset({"-fit", "-fitt", "-fitc"})
PARTS = (("weights", ("weights",)), ("context", ("kv", "kv_swa", "rs")), ("compute", ("compute",)))
_COLUMN = {"weights": "model", "context": "context", "compute": "compute"}


@dataclass(frozen=True, slots=True)
class CheckRow:
    device: str  # as llama.cpp printed it: "Host", "CUDA0 (RTX 4090)"
    part: str  # weights | context | compute (the table's model | context | compute)
    engine_mib: int
    estimate_mib: float | None  # None: no estimate device matched this row

    @property
    def diff(self) -> float | None:
        if self.estimate_mib is None or not self.engine_mib:
            return None
        return (self.estimate_mib - self.engine_mib) / self.engine_mib

    @property
    def flagged(self) -> bool:
        if self.estimate_mib is None:
            return False
        off = abs(self.estimate_mib - self.engine_mib)
        return off > max(PRINTED_MIB, TOLERANCE * self.engine_mib)


@dataclass(frozen=True, slots=True)
class EngineCheck:
    binary: str
    args: tuple[str, ...]  # what llama-fit-params ran with (after its path)
    not_passed: tuple[str, ...]  # the command's options it does not take
    rows: tuple[CheckRow, ...]
    notes: tuple[str, ...] = ()


def fit_params_beside(server: str, cwd: str | None = None) -> Path:
    """The llama-fit-params next to ``server`` (argv[0] as given); InputError/SetupError
    with the reason when there is none or it is not safe to run (:func:`open_checked`)."""
    path = named_path(server, cwd)
    if path is None:
        raise InputError(f"--engine-check: {server!r} is not on PATH; give the server's path")
    candidate = path.parent / FIT_PARAMS
    os.close(open_checked(candidate))
    return candidate


def _missing(path: Path) -> SetupError:
    return SetupError(
        f"--engine-check: no {FIT_PARAMS} beside the server in {path.parent} (build it "
        f"with llama.cpp's 'cmake --build build --target {FIT_PARAMS}')"
    )


def _refuse_writable(st: os.stat_result, path: Path) -> None:
    """Owned by root or by us, writable by no one else (DESIGN.md, security stance)."""
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SetupError(
            f"--engine-check: {path} is owned by uid {st.st_uid} or writable by others; not run"
        )


def open_checked(path: Path) -> int:
    """An ``O_PATH`` descriptor of ``path``, opened without following a link relative to
    its folder's descriptor, after checking both on the descriptors: a regular executable
    file, and the file and its folder owned by root or by us and writable by no one else.

    The caller runs the binary through ``/proc/self/fd/N`` (:func:`run_fit_params`), so
    what was checked is what runs: a path swapped after the check is not followed (issue
    28; ``estimate --pid`` may run as root)."""
    try:
        dfd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise _missing(path) from None
    try:
        _refuse_writable(os.fstat(dfd), path.parent)
        try:
            fd = os.open(path.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:
            raise _missing(path) from None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            raise SetupError(f"--engine-check: {path} is a symbolic link; not followed")
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IXUSR:
            raise SetupError(f"--engine-check: {path} is not an executable file")
        _refuse_writable(st, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


class ForeignTargetError(SetupError):
    """``--engine-check`` on a process of another user: refused. DESIGN.md (security
    stance): llama-fit-params runs as the target's user or not at all, and a root
    ``vramscope`` does not switch users for it."""


def refuse_foreign(proc_root: Path, pid: int) -> None:
    """Refuse unless every uid of ``pid`` (real, effective, saved, filesystem: the
    ``Uid:`` line of ``/proc/PID/status``) is the caller's effective uid."""
    me = os.geteuid()
    try:
        text = (proc_root / str(int(pid)) / "status").read_text(errors="replace")
        line = next(ln for ln in text.splitlines() if ln.startswith("Uid:"))
        uids = {int(u) for u in line.split()[1:]}
    except (OSError, StopIteration, ValueError):
        raise ForeignTargetError(
            f"--engine-check: cannot tell which user runs pid {pid}; not run"
        ) from None
    if uids != {me}:
        other = sorted(uids - {me})[0] if uids - {me} else me
        raise ForeignTargetError(
            f"--engine-check: pid {pid} runs as uid {other}, not as uid {me}; "
            f"{FIT_PARAMS} is run only on the caller's own servers (run it as that user)"
        )


BASE_ENV = ("PATH", "LANG", "LC_ALL", "HOME")


def child_env(words: Mapping[str, str], caller: Mapping[str, str]) -> dict[str, str]:
    """The environment llama-fit-params gets: the caller's PATH, LANG, LC_ALL and HOME,
    plus the ``LLAMA_ARG_*`` keys the estimator reads (``ENV_KEYS``, secrets excluded)
    from ``words``. Nothing else of the target's environment or its ``env K=V`` words
    (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ...) reaches a child (issue 28)."""
    env = {k: caller[k] for k in BASE_ENV if k in caller}
    env.update({k: v for k, v in words.items() if k in ENV_KEYS and env_allowed(k)})
    return env


def fit_params_args(command: Sequence[str], n_parallel: int | None) -> tuple[list[str], list[str]]:
    """(the arguments llama-fit-params takes, the options of ``command`` it does not).

    Values stay as typed. ``-np`` is made explicit (llama-server's automatic 4 is not the
    library default of 1) and ``-fit off`` added."""
    kept: list[str] = []
    dropped: list[str] = []
    args = list(command[1:])
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, _ = token.partition("=")
        opt = OPTIONS.get(name) if token.startswith("-") else None
        take = 1
        if opt is None:
            # unknown to us: drop it and a value that follows (not an option)
            if i + 1 < len(args) and not args[i + 1].startswith("-") and not eq:
                take = 2
        elif not eq and opt.arity != SWITCH:
            nxt = args[i + 1] if i + 1 < len(args) else None
            if opt.arity != OPTIONAL or (nxt is not None and nxt in opt.optional_values):
                take = 2
        group = args[i : i + take]
        names = set(opt.names) if opt else set()
        if names & PASSED:
            kept += group
        elif not names & REPLACED:
            dropped += group
        i += take
    if n_parallel is not None and not any(a in ("-np", "--parallel") for a in kept):
        kept += ["-np", str(n_parallel)]
    return kept + ["-fit", "off"], dropped


def run_fit_params(
    binary: Path, args: Sequence[str], env: Mapping[str, str], cwd: str | None = None
) -> LlamaLogReport:
    """Run it (bounded in time and output) where the server's relative paths resolve, and
    parse its breakdown table. It runs through the checked descriptor
    (:func:`open_checked`), with ``env`` only (see :func:`child_env`)."""
    fd = open_checked(binary)
    try:
        proc = subprocess.run(
            [str(binary), *args, "-lv", "4"],
            executable=f"/proc/self/fd/{fd}",
            pass_fds=(fd,),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_S,
            env=dict(env),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SetupError(f"--engine-check: {binary} ran past {TIMEOUT_S:.0f} s; stopped") from None
    except OSError as exc:
        raise SetupError(f"--engine-check: cannot run {binary}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    text = (proc.stdout[:MAX_OUTPUT_BYTES] + b"\n" + proc.stderr[:MAX_OUTPUT_BYTES]).decode(
        "utf-8", "replace"
    )
    report = parse_llama_log(text.splitlines())
    if not report.breakdown:
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "no output")
        raise SetupError(
            f"--engine-check: {binary.name} printed no memory breakdown "
            f"(exit {proc.returncode}): {last[:200]}"
        )
    return report


def compare(report: LlamaLogReport, est: MemoryEstimate) -> tuple[tuple[CheckRow, ...], str | None]:
    """Each device's model/context/compute beside the estimate's figure on it. Rows that
    print no total (``Host`` and extra host buffer types such as ``CPU_REPACK``, where
    repacked expert weights go) are the host, summed; GPU rows (with a total) pair with
    the estimate's GPUs in order."""
    gpus = [d for d in est.devices if d != HOST]
    host_rows = [r for r in report.breakdown if r.total is None]
    gpu_rows = [r for r in report.breakdown if r.total is not None]
    note = None
    if len(gpu_rows) != len(gpus):
        note = (
            f"llama.cpp lists {len(gpu_rows)} GPU(s), vramscope {len(gpus)}: "
            "GPU rows are not compared"
        )
    groups: list[tuple[str, list[BreakdownRow], str | None]] = []
    if host_rows:
        groups.append((" + ".join(r.name for r in host_rows), host_rows, HOST))
    for i, row in enumerate(gpu_rows):
        groups.append((row.device, [row], gpus[i] if note is None else None))
    rows: list[CheckRow] = []
    for label, members, device in groups:
        for part, names in PARTS:
            values = [getattr(m, _COLUMN[part]) for m in members]
            if all(v is None for v in values):
                continue
            engine = sum(v or 0 for v in values)
            mine = None
            if device is not None:
                mine = sum(est.total_bytes(n, device) for n in names) / MIB
            rows.append(CheckRow(label, part, engine, mine))
    return tuple(rows), note


def render(check: EngineCheck) -> str:
    lines = [
        "",
        f"llama.cpp's own projection ({check.binary}), MiB:",
        f"  {'device':<24} {'part':<8} {'llama.cpp':>10} {'vramscope':>10} {'diff':>7}",
    ]
    for r in check.rows:
        mine = "unknown" if r.estimate_mib is None else f"{r.estimate_mib:.2f}"
        diff = "" if r.diff is None else f"{r.diff:+.1%}"
        flag = "  ! over 5 %" if r.flagged else ""
        lines.append(
            f"  {r.device[:24]:<24} {r.part:<8} {r.engine_mib:>10} {mine:>10} {diff:>7}{flag}"
        )
    flagged = sum(r.flagged for r in check.rows)
    lines.append(
        f"  {flagged} figure(s) more than 5 % apart"
        if flagged
        else "  every figure within 5 % (or the 1 MiB the table rounds to)"
    )
    lines.append("  compared for: " + " ".join(check.args))
    if check.not_passed:
        lines.append(
            "  not passed (llama-fit-params does not take them): " + " ".join(check.not_passed)
        )
    lines += [f"  note: {n}" for n in check.notes]
    return "\n".join(lines) + "\n"


def to_json(check: EngineCheck) -> dict[str, object]:
    return {
        "binary": check.binary,
        "args": list(check.args),
        "not_passed": list(check.not_passed),
        "rows": [
            {
                "device": r.device,
                "part": r.part,
                "llama_cpp_mib": r.engine_mib,
                "vramscope_mib": None if r.estimate_mib is None else round(r.estimate_mib, 2),
                "diff": None if r.diff is None else round(r.diff, 4),
                "over_5pct": r.flagged,
            }
            for r in check.rows
        ],
        "notes": list(check.notes),
    }


@dataclass(frozen=True, slots=True)
class PredictCheck:
    """``predict --engine-check`` (monitor/cli/estimate.py check_predicted_launch): whether
    llama-fit-params checked the estimate the verdict rests on (``line``, said with the
    verdict), and its table when it ran. Here, so that a predict without the option does
    not build it (issue 32 item 4)."""

    checked: bool
    line: str
    check: EngineCheck | None = None

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"checked": self.checked, "line": self.line}
        if self.check is not None:
            doc.update(to_json(self.check))
            doc["over_5pct"] = sum(r.flagged for r in self.check.rows)
        return doc
