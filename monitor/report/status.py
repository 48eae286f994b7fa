"""``vramscope status``: one snapshot as a readable table, or as JSON.

The JSON shape is ``vramscope.status/1``, specified by ``docs/status.schema.json``; a
change to it is a new schema version. Sizes are bytes, times epoch milliseconds (UTC).
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from collectors.base import (
    DeviceSample,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
)
from monitor.analysis.measured import Measured, measure
from monitor.device_names import device_labels, device_tag, display_order
from monitor.servers.recognise import helper_parents
from monitor.servers.router import snapshot_links

if TYPE_CHECKING:
    from collectors.base_rare import ExitedProcess, OomForecast
    from monitor.servers.router_types import Router, RouterChild
    from monitor.servers.spec import LaunchSpec
from monitor.textsafe import terminal_safe
from monitor.units import human_bytes

SCHEMA_ID = "vramscope.status/1"
_MEMORY_FIELDS = [
    f.name for f in dataclasses.fields(ProcessMemory) if f.name not in ("pid", "device_id")
]


def _exit_json(x: ExitedProcess) -> dict[str, Any]:
    """The exit record with its classification (monitor/exits.py) filled in:
    ``cause`` and ``how`` say what the exit status shows, not only what the collector saw."""
    from monitor.exits import classify_legacy  # only with an exit to show (issue 32)

    cause, _severity, how = classify_legacy(x)
    return dataclasses.asdict(x) | {"cause": cause, "how": how}


def model_path_of(info: ProcessInfo, env: Mapping[str, str] | None = None) -> str | None:
    """The model file an inference process serves, relative paths resolved against its
    cwd (``-m x.gguf`` started in ``~/models``); None for other processes."""
    spec = _launch_of(info, env)
    return spec.model_path if spec is not None else None


def _launch_of(info: ProcessInfo, env: Mapping[str, str] | None = None) -> LaunchSpec | None:
    """The inference process's LaunchSpec, or None (not one, or an odd command line: never
    a failed status)."""
    if info.engine is None or not info.argv:
        return None
    from monitor.servers import parse_command

    try:
        return parse_command(list(info.argv), env, cwd=info.cwd)
    except Exception:  # hostile command lines: a status never fails on one
        return None


def server_summary(info: ProcessInfo) -> str | None:
    """A recognised server in a few words instead of its raw command line: the model's
    file (or name), context x slots, draft, port (``qwen3-8b.gguf -c 32768x4 :8080``).
    None for anything not recognised (the command line is shown then)."""
    spec = _launch_of(info)
    if spec is None or spec.role != "server":
        return None
    model = os.path.basename(spec.model_path) if spec.model_path else spec.model_name
    if not model:
        return None
    parts = [model]
    if spec.ctx_size is not None or spec.n_parallel is not None:
        ctx = "auto" if spec.ctx_size is None else str(spec.ctx_size)
        parts.append(f"-c {ctx}x{spec.n_parallel or 'auto'}")
    if spec.draft_model:
        parts.append(f"draft {os.path.basename(spec.draft_model)}")
    if spec.port is not None:
        parts.append(f":{spec.port}")
    return terminal_safe(" ".join(parts))


def router_links(
    snap: Snapshot, env_for: Callable[[int], Mapping[str, str]] | None = None
) -> tuple[dict[int, Router], dict[int, RouterChild]]:
    """The llama-server routers among the snapshot's processes and their children
    (monitor/servers/router.py): a child by its parent, or by ``LLAMA_SERVER_ROUTER_PORT``
    in its environment when ``env_for`` may read it (else as a recorded document said)."""
    return snapshot_links(snap, env_for)


def _router_json(router: Router | None) -> dict[str, Any] | None:
    if router is None:
        return None
    return {
        "port": router.port,
        "models_dir": router.models_dir,
        "models_preset": router.models_preset,
        "models_max": router.models_max,
        "children": list(router.children),
        "loaded": len(router.children),
    }


def _router_summary(router: Router) -> str:
    """``router :8080 models-dir /m, max 1, 1 loaded`` (max 0 = unlimited)."""
    parts = [f"router :{router.port}"]
    if router.models_dir:
        parts.append(f"models-dir {router.models_dir}")
    if router.models_preset:
        parts.append(f"preset {router.models_preset}")
    top = "unlimited" if router.models_max == 0 else str(router.models_max)
    return terminal_safe(f"{' '.join(parts)}, max {top}, {len(router.children)} loaded")


def _grouped(order: list[ProcessInfo], routers: Mapping[int, Router]) -> list[ProcessInfo]:
    """``order`` with each router's children moved right under their router (in their
    own order: the biggest first)."""
    shown = {p.pid for p in order}
    under = {c: r.pid for r in routers.values() if r.pid in shown for c in r.children}
    out: list[ProcessInfo] = []
    for p in order:
        if p.pid in under:
            continue
        out.append(p)
        if p.pid in routers:
            out += [c for c in order if under.get(c.pid) == p.pid]
    return out


def _measured_of(snap: Snapshot, helpers: Mapping[int, int]) -> dict[int, Measured]:
    """Every tracked process's :class:`Measured`; a server's helpers count in it."""
    return {
        p.pid: measure(p.pid, snap.memory, [h for h, owner in helpers.items() if owner == p.pid])
        for p in snap.processes
    }


def to_json(
    snap: Snapshot, env_for: Callable[[int], Mapping[str, str]] | None = None
) -> dict[str, Any]:
    """``env_for(pid)``: a process's allow-listed environment (``LLAMA_ARG_MODEL``), when
    the caller may read it."""
    by_pid: dict[int, dict[str, dict[str, int | None]]] = defaultdict(dict)
    for m in snap.memory:
        by_pid[m.pid][m.device_id] = {
            f: v for f in _MEMORY_FIELDS if (v := getattr(m, f)) is not None
        }
    helpers = helper_parents({p.pid: p for p in snap.processes})
    held = _measured_of(snap, helpers)
    limits = {c.pid: c.cgroup for c in snap.cgroups}
    routers, children = router_links(snap, env_for)
    processes = []
    for p in sorted(snap.processes, key=lambda p: p.pid):
        row = dataclasses.asdict(p)
        row["argv"] = list(p.argv)
        row["reasons"] = list(p.reasons)
        row["memory"] = by_pid.get(p.pid, {})
        row["model_path"] = model_path_of(p, env_for(p.pid) if env_for and p.engine else None)
        row["helper_of"] = helpers.get(p.pid)
        row["measured"] = held[p.pid].as_dict()
        limit = limits.get(p.pid)
        row["cgroup"] = dataclasses.asdict(limit) if limit is not None else None
        row["router"] = _router_json(routers.get(p.pid))
        link = children.get(p.pid)
        row["router_child"] = dataclasses.asdict(link) if link is not None else None
        processes.append(row)
    return {
        "schema": SCHEMA_ID,
        "ts_ms": snap.ts_ms,
        "devices": [dataclasses.asdict(d) for d in snap.devices],
        "processes": processes,
        "hidden": [dataclasses.asdict(h) for h in snap.hidden],
        "exited": [_exit_json(x) for x in snap.exited],
        "cpu_features": list(snap.cpu_features) if snap.cpu_features is not None else None,
        "time_to_oom": [dataclasses.asdict(f) for f in snap.time_to_oom],
        "untracked": dataclasses.asdict(snap.untracked) if snap.untracked is not None else None,
        "collectors": [
            {
                "collector": r.collector,
                "status": r.status,
                "error": r.error,
                "duration_s": round(r.duration_s, 6),
                "cpu_s": round(r.cpu_s, 6),
            }
            for r in snap.runs
        ],
    }


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = _widths(headers, rows)

    def fmt(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [fmt(headers), *(fmt(r) for r in rows)]


def _device_details(d: DeviceSample) -> list[str]:
    """The DETAIL column of a device: pools, swap, GPU processes, sensors."""
    parts: list[str] = []
    if d.memory_kind == "unified" and d.gtt_total_bytes is not None:
        parts.append(f"VRAM {human_bytes(d.vram_used_bytes)}/{human_bytes(d.vram_total_bytes)}")
        parts.append(f"GTT {human_bytes(d.gtt_used_bytes)}/{human_bytes(d.gtt_total_bytes)}")
    if d.memory_kind == "host":
        parts.append(f"available {human_bytes(d.available_bytes)}")
        if d.swap_total_bytes:
            used_swap = d.swap_total_bytes - (d.swap_free_bytes or 0)
            parts.append(f"swap {human_bytes(used_swap)}/{human_bytes(d.swap_total_bytes)}")
    if d.shares_pool_with:
        parts.append(f"shares the {d.shares_pool_with} pool")
    if d.processes_used_bytes is not None:
        over = d.total_bytes is not None and d.processes_used_bytes > d.total_bytes
        parts.append(
            f"GPU processes {human_bytes(d.processes_used_bytes)}"
            + (" (more than the pool!)" if over else "")
        )
    if d.util_pct is not None:
        parts.append(f"busy {d.util_pct:.0f}%")
    if d.temp_c is not None:
        parts.append(f"{d.temp_c:.0f}°C")
    if d.power_w is not None:
        parts.append(f"{d.power_w:.0f} W")
    if d.mem_clock_mhz is not None:
        parts.append(f"mem {d.mem_clock_mhz:.0f} MHz")
    return parts


def output_width(is_tty: bool, columns: int, env: Mapping[str, str]) -> int | None:
    """The width ``status`` lays its tables out for: the terminal's (``columns``, from
    ``shutil.get_terminal_size``, which reads ``COLUMNS`` first); when piped, ``COLUMNS``
    if set (as ``ps`` does), else None: a pipe gets every line whole."""
    if is_tty:
        return max(columns, 20)
    value = env.get("COLUMNS", "")
    return max(int(value), 20) if value.isdigit() else None


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in an ellipsis where it was cut."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)].rstrip() + "…"


def wrapped(line: str, width: int | None, indent: str = "    ") -> list[str]:
    """``line`` wrapped at spaces to ``width`` (continuations indented by ``indent`` past
    the line's own leading spaces); a word longer than a line is cut with an ellipsis, and
    one that fits the width but not the indented continuation gets a smaller indent (a
    long model name stays whole). ``width`` None: the line whole."""
    if width is None or len(line) <= width:
        return [line]
    text = line.lstrip()
    lead = line[: len(line) - len(text)]
    longest = max(map(len, text.split()), default=0)
    after = lead + indent
    if longest <= width:  # a word longer than any line is cut however it is indented
        after = after[: max(width - longest, 1)]
    lines = textwrap.wrap(
        text,
        width,
        initial_indent=lead,
        subsequent_indent=after,
        break_long_words=False,
        break_on_hyphens=False,
        drop_whitespace=True,
    )
    return [fit(x, width) for x in lines]


def _device_lines(snap: Snapshot, labels: Mapping[str, str], width: int | None) -> list[str]:
    """The devices in display order (monitor/device_names.py): one row each, its DETAIL
    on the row, or on lines of its own under it when the row would pass ``width``."""
    by_id = {d.device_id: d for d in snap.devices}
    rows, details = [], []
    for device_id in display_order(by_id):
        d = by_id[device_id]
        used, total = d.used_bytes, d.total_bytes
        pct = f"{100 * used / total:.0f}%" if used is not None and total else "-"
        rows.append([labels[device_id], d.memory_kind, human_bytes(used), human_bytes(total), pct])
        details.append(", ".join(_device_details(d)))
    head = ["DEVICE", "KIND", "USED", "TOTAL", "USE"]
    wide = _table(
        [*head, "DETAIL"], [[*r, x] for r, x in zip(rows, details, strict=True)], {2, 3, 4}
    )
    if width is None or max(map(len, wide)) <= width:
        return wide
    table = _table(head, rows, {2, 3, 4})
    out = [fit(table[0], width)]
    for line, detail in zip(table[1:], details, strict=True):
        out.append(fit(line, width))
        if detail:
            out += wrapped("    " + detail, width, indent="")
    return out


def render_text(snap: Snapshot, width: int | None = None) -> str:
    """Devices, then tracked processes with their memory per device, then what is hidden.
    ``width``: the columns to fit (see :func:`output_width`); None: every line whole."""
    labels = device_labels((d.device_id, d.name) for d in snap.devices)
    out = _device_lines(snap, labels, width)
    out.append("")
    out += _process_lines(snap, labels, width)
    tail = _hidden_lines(snap) + _left_out_and_filling(snap) + _exited_and_failed(snap)
    out += [x for line in tail for x in wrapped(line, width)]
    return "\n".join(out)


def _process_rows(snap: Snapshot, labels: Mapping[str, str]) -> list[list[str]]:
    """PID, ENGINE, MEASURED, ANON, FILE, PSS, GPU, WHY, COMMAND for each tracked
    process (biggest first, a router's children under it) and each hidden one."""
    gpu_devices = [d for d in display_order(labels) if d != "host"]
    mem = {(m.pid, m.device_id): m for m in snap.memory}
    helpers = helper_parents({p.pid: p for p in snap.processes})
    held = _measured_of(snap, helpers)
    routers, children = router_links(snap)
    rows = []
    order = sorted(snap.processes, key=lambda p: _sort_key(p.pid, mem, gpu_devices))
    for p in _grouped(order, routers):
        host = mem.get((p.pid, "host"))
        gpu = []
        for dev in gpu_devices:
            m = mem.get((p.pid, dev))
            if m is not None:
                on_gpu = (
                    None
                    if m.vram_bytes is None and m.gtt_bytes is None
                    else (m.vram_bytes or 0) + (m.gtt_bytes or 0)
                )  # None: not reported
                gpu.append(f"{device_tag(labels[dev])} {human_bytes(on_gpu)}")
        rows.append(
            [
                str(p.pid),
                (f"helper of {helpers[p.pid]}" if p.pid in helpers else p.engine or "-"),
                human_bytes(held[p.pid].total_bytes),
                human_bytes(host.rss_anon_bytes if host else None),
                human_bytes(host.rss_file_bytes if host else None),
                human_bytes(host.pss_bytes if host else None),
                ", ".join(gpu) or "-",
                ",".join(p.reasons),
                _command_cell(p, routers.get(p.pid), children.get(p.pid)),
            ]
        )
    for h in snap.hidden:  # NVML still reports its memory: a row with its size
        if h.used_bytes is not None and h.device_id is not None:
            tag = device_tag(labels.get(h.device_id, terminal_safe(h.device_id)))
            where = f"{tag} {human_bytes(h.used_bytes)}"
            row = [str(h.pid), "-", human_bytes(h.used_bytes), "-", "-", "-", where, "hidden"]
            rows.append([*row, "[not visible in this PID namespace]"])
    return rows


_PROCESS_HEAD = ["PID", "ENGINE", "MEASURED", "ANON", "FILE", "PSS", "GPU", "WHY", "COMMAND"]
_DROP_ORDER = ("PSS", "FILE", "ANON", "WHY", "ENGINE")
"""What a narrow terminal loses first (as nvitop and htop choose): the host RSS parts,
then the reasons, then the engine; PID, MEASURED, GPU and COMMAND always stay."""
_COMMAND_MIN = 40


def _process_lines(snap: Snapshot, labels: Mapping[str, str], width: int | None) -> list[str]:
    """The process table; at ``width``, columns dropped in :data:`_DROP_ORDER` until the
    command has room, and the command cut with an ellipsis after that. The GPU column
    only where the box has a GPU."""
    rows = _process_rows(snap, labels)
    keep = list(_PROCESS_HEAD)
    if all(d == "host" for d in labels):
        keep.remove("GPU")
    drops = list(_DROP_ORDER)
    while True:
        idx = [_PROCESS_HEAD.index(c) for c in keep]
        cut = [[r[i] for i in idx] for r in rows]
        if width is None:
            break
        room = width - sum(_widths(keep[:-1], [r[:-1] for r in cut])) - 2 * (len(keep) - 1)
        longest = max((len(r[-1]) for r in cut), default=0)
        if room >= min(longest, _COMMAND_MIN) or not drops:
            cut = [[*r[:-1], fit(r[-1], max(room, 8))] for r in cut]
            break
        keep.remove(drops.pop(0))
    right = {i for i, c in enumerate(keep) if c in ("MEASURED", "ANON", "FILE", "PSS")}
    lines = _table(keep, cut, right)
    return [fit(line, width) for line in lines] if width else lines


def _widths(headers: list[str], rows: list[list[str]]) -> list[int]:
    return [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]


def _command_cell(p: ProcessInfo, router: Router | None, child: RouterChild | None) -> str:
    """The COMMAND column: a router in words, a router's child as ``└ model ID: ...``
    (with its router's pid when that is not the row above), a server's summary, else
    the raw command line."""
    if router is not None:
        return _router_summary(router)
    command = server_summary(p) or (
        " ".join(map(terminal_safe, [os.path.basename(p.argv[0]), *p.argv[1:]]))
        if p.argv
        else f"[{terminal_safe(p.comm)}]"
    )
    if child is None:
        return command
    head = f"└ model {terminal_safe(child.model_id or '?')}: "
    if child.router_pid is None:
        return f"{head}{command} (router :{child.router_port}, not visible)"
    return f"{head}{command} (router {child.router_pid})"


def _hidden_lines(snap: Snapshot) -> list[str]:
    """The processes whose /proc entry this view cannot read, with why."""
    if not snap.hidden:
        return []
    out = ["", "Hidden from this view (their /proc entry cannot be read here):"]
    for h in snap.hidden:
        name = f"{terminal_safe(h.comm)} " if h.comm else ""
        out.append(
            f"  {name}pid {h.pid}: {terminal_safe(h.reason)}"
            + (f" - {terminal_safe(h.hint)}" if h.hint else "")
        )
    return out


def _exited_and_failed(snap: Snapshot) -> list[str]:
    """How the processes that ended this tick ended, and the collectors that failed."""
    out = []
    if snap.exited:
        from monitor.exits import classify_legacy

        out += ["", "Exited:"]
        out += [
            f"  {terminal_safe(x.comm) + ' ' if x.comm else ''}pid {x.pid}: "
            + terminal_safe(classify_legacy(x)[2])
            for x in snap.exited
        ]
    failed = [r for r in snap.runs if r.status == "error"]
    if failed:
        out.append("")
        out += [f"collector {r.collector} failed: {terminal_safe(r.error)}" for r in failed]
    return out


def _left_out_and_filling(snap: Snapshot) -> list[str]:
    """The untracked processes' count and bytes, and the pools filling steadily."""
    out = []
    if snap.untracked is not None and snap.untracked.processes:
        out.append("")
        out.append(
            f"Untracked: {snap.untracked.processes} processes of the top-memory list hold "
            f"{human_bytes(snap.untracked.bytes)} ([collectors] max_tracked is full; "
            "servers and GPU holders are always tracked)"
        )
    if snap.time_to_oom:
        out.append("")
        out.append("Filling steadily (time to OOM at this rate):")
        out += [f"  {time_to_oom_line(f)}" for f in snap.time_to_oom]
    return out


def time_to_oom_line(f: OomForecast) -> str:
    """``cgroup /x: full in ~14 min (+12.0 MiB/s; 2.1 of 3.0 GiB it cannot reclaim)``."""
    minutes = f.seconds / 60
    when = f"~{minutes:.0f} min" if minutes < 120 else f"~{minutes / 60:.1f} h"
    return (
        f"{terminal_safe(f.pool)}: full in {when} (+{f.rate_bytes_per_s / 2**20:.1f} MiB/s; "
        f"{human_bytes(f.held_bytes)} of {human_bytes(f.limit_bytes)})"
    )


def _sort_key(pid: int, mem: dict[tuple[int, str], ProcessMemory], gpus: list[str]) -> int:
    """Biggest GPU holders first, then by host RSS."""
    gpu = sum(
        (m.vram_bytes or 0) + (m.gtt_bytes or 0)
        for d in gpus
        if (m := mem.get((pid, d))) is not None
    )
    host = mem.get((pid, "host"))
    rss = (host.rss_anon_bytes or 0) + (host.rss_file_bytes or 0) if host else 0
    return -(gpu * 4 + rss)
