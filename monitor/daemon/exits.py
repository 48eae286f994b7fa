"""The tick's exits phase: kernel log records of this tick as events, and how each
tracked exit happened, classified by monitor/exits.py.

The exit status comes from the process-event connector (collectors/proc_events.py), else
from a zombie's ``/proc/PID/stat``; a kernel OOM kill record naming the pid says who sent
a SIGKILL; an engine's out-of-memory line (its log, read here) and the load watch say
more. What each exit becomes (events, alerts) is judged by
monitor/analysis/exits_judged.py when the store writes the tick.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from typing import TYPE_CHECKING

from collectors.base import DeviceEvent, ExitedProcess, Snapshot, now_ms
from monitor.daemon.context import DaemonContext

if TYPE_CHECKING:
    from monitor.logs.kernel_records import KernelEvent

log = logging.getLogger(__name__)

LOG_WAIT_S = 0.1
"""The most a tick waits for the engine-log round it starts (at most a quarter of the
interval): a round within budget ends in a few ms, so an engine's out-of-memory line is
on the tick after it was written; a flood's round goes on, taken by the next tick."""
EXIT_LOG_WAIT_S = 1.0
"""A tick that sees a process exit waits for its log round up to this: the engine's
out-of-memory line written just before it died explains the exit (a round is bounded by
its budget; this only matters on a box too busy to run it in ``LOG_WAIT_S``)."""


def kernel_and_exits(ctx: DaemonContext, snap: Snapshot) -> Snapshot:
    """Kernel log records of this tick as events, and how each tracked exit happened,
    classified by monitor/exits.py from its exit status (the process-event connector,
    else the zombie's /proc/PID/stat), a kernel OOM kill record naming its pid, an
    engine's out-of-memory line and the load watch."""
    gone_all = (*snap.exited, *_early_exits(ctx, snap))
    found = _log_events(ctx, snap, EXIT_LOG_WAIT_S if gone_all else LOG_WAIT_S)
    for ev in found:
        pid = ev.data.get("pid")
        if ev.kind in ("oom_kill", "oomd_kill") and isinstance(pid, int):
            constraint = ev.data.get("constraint")
            ctx.recent_kills[pid] = (
                ev.ts_ms,
                ev.kind,
                constraint if isinstance(constraint, str) else None,
            )
        elif ev.kind in ("app_oom", "engine_oom"):  # an engine log's out-of-memory line
            ctx.last_app_oom_ms = ev.ts_ms
    ctx.recent_kills = {p: k for p, k in ctx.recent_kills.items() if snap.ts_ms - k[0] < 120_000}
    wait_until = time.monotonic() + 0.2  # for exit datagrams not read yet, per tick
    exited = [_classify_exit(ctx, snap, gone, wait_until) for gone in gone_all]
    if not found and not exited:
        return snap
    return dataclasses.replace(snap, events=snap.events + tuple(found), exited=tuple(exited))


def _log_events(ctx: DaemonContext, snap: Snapshot, wait_s: float) -> list[DeviceEvent]:
    """This tick's kernel records, converted and kept before any engine log is read (a
    log that fails can never cost them: issue 28 item 5), then the engine logs' events."""
    from monitor.logs.kmsg import to_device_events

    found: list[DeviceEvent] = []
    if ctx.kmsg is not None:
        try:
            found = to_device_events(ctx.kmsg.read(), snap.ts_ms, snap.devices)
        except Exception as exc:  # the logs must never cost a sample
            log.error("kernel log: %r", exc)
    try:
        found += to_device_events(_engine_log_events(ctx, wait_s), snap.ts_ms, snap.devices)
    except Exception as exc:  # the logs must never cost a sample
        log.error("engine logs: %r", exc)
    return found


def _engine_log_events(ctx: DaemonContext, wait_s: float) -> list[KernelEvent]:
    """What the log reader thread found, in the round this starts (waited for at most
    ``wait_s``, and a quarter of the interval but for an exit) and earlier ones; without
    one (a test's context), one round read here. Either way each tail is read on its own,
    within its budget, and floods are merged (monitor/logs/reader.py)."""
    from monitor.logs.reader import LogMerger, read_round

    if ctx.log_reader is not None:  # kicked after the sample: a line an exit left is read
        if ctx.log_reader.idle():  # no log followed (the default): no round to wait for
            return []
        ctx.log_reader.kick()
        if wait_s < EXIT_LOG_WAIT_S:
            wait_s = min(wait_s, ctx.config.interval_s / 4)
        got: list[KernelEvent] = ctx.log_reader.take(wait_s)
        return got
    if not ctx.tails:
        return []
    if ctx.log_merger is None:
        ctx.log_merger = LogMerger()
    return read_round(ctx.tails, ctx.log_merger, now_ms())


def _early_exits(ctx: DaemonContext, snap: Snapshot) -> list[ExitedProcess]:
    """Servers the connector saw exec and exit that no sample ever tracked (a launch
    llama-server refused dies in half a second): exits of their own, so they leave a record."""
    if ctx.proc_events is None:
        return []
    seen = {(p.pid, p.start_ticks) for p in snap.processes}
    seen |= {(g.pid, g.start_ticks) for g in snap.exited}
    if ctx.last_snapshot is not None:
        seen |= {(p.pid, p.start_ticks) for p in ctx.last_snapshot.processes}
    return [
        ExitedProcess(
            young.pid,
            young.start_ticks,
            young.exec_ms,
            comm=young.comm,
            exit_code=status.exit_code,
            exit_signal=status.exit_signal,
            core_dumped=status.core_dumped,
            exit_source="connector",
        )
        for young, status in ctx.proc_events.take_early_exits()
        if (young.pid, young.start_ticks) not in seen
    ]


def _classify_exit(
    ctx: DaemonContext, snap: Snapshot, gone: ExitedProcess, wait_until: float
) -> ExitedProcess:
    from monitor.exits import ExitFacts, classify

    code, sig, core, source = gone.exit_code, gone.exit_signal, gone.core_dumped, None
    if code is not None or sig is not None:
        source = "zombie"
    if ctx.proc_events is not None:
        # the exit datagram comes before the process is reaped; the reader thread may
        # not have read it yet: wait for it a little. The pid may have been reused since:
        # the exit picked is the one after this process's start (and fork)
        status = ctx.proc_events.exit_of(
            gone.pid,
            wait_s=max(0.0, wait_until - time.monotonic()),
            since_ms=gone.last_seen_ms - 1000,
            start_ticks=gone.start_ticks,
        )
        if status is not None:
            code, sig, core = status.exit_code, status.exit_signal, status.core_dumped
            source = "connector"
    kill = ctx.recent_kills.get(gone.pid)
    if source is None and kill is not None:
        sig, source = signal.SIGKILL.value, "kernel log"
    previous = {p.pid: p for p in ctx.last_snapshot.processes} if ctx.last_snapshot else {}
    info = previous.get(gone.pid)
    engine_oom = (
        info is not None
        and info.engine is not None
        and ctx.last_app_oom_ms is not None
        and snap.ts_ms - ctx.last_app_oom_ms < 120_000
    )
    loading = ctx.watch is not None and ctx.watch.is_loading(gone.pid, gone.start_ticks)
    verdict = classify(
        ExitFacts(
            code,
            sig,
            core,
            loading=loading,
            kernel_kill=kill[1] if kill is not None else None,
            constraint=kill[2] if kill is not None else None,
            engine_oom=engine_oom,
        )
    )
    how = verdict.text
    if gone.state == "Z":
        how += "; not reaped by its parent (state Z)"
    return dataclasses.replace(
        gone,
        how=how,
        exit_code=code,
        exit_signal=sig,
        core_dumped=core,
        exit_source=source,
        cause=verdict.cause,
        comm=gone.comm or (info.comm if info is not None else None),
    )
