"""The sampling daemon: APScheduler 3.x ``BackgroundScheduler`` with one worker thread.

One worker thread means one SQLite writer: ``tick`` and ``prune`` never overlap. Both are
plain functions of a :class:`DaemonContext`, so tests call them without a scheduler.
SIGTERM/SIGINT only set an event; the main thread, outside the signal handler, shuts the
scheduler down with ``wait=True``: the tick in flight commits, then the process exits 0.
(Shutting down inside the handler raced the scheduler's own loop: a signal landing in
``_process_jobs`` emptied the job store under it, and ``update_job`` raised
``JobLookupError`` — CI, 2026-11-27.) An exclusive ``flock`` on ``<db>.lock`` stops a second daemon
from writing the same database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import IO, TYPE_CHECKING

from collectors.base import CollectorRun, DeviceEvent, Snapshot, now_ms
from monitor.analysis.exits_judged import JUDGE
from monitor.config import Config, require_db_folder
from monitor.daemon.context import PENDING_MAX as PENDING_MAX
from monitor.daemon.context import DaemonContext as DaemonContext
from monitor.daemon.exits import kernel_and_exits
from monitor.daemon.lock import acquire_lock, lock_database_file
from monitor.daemon.sampler import Sampler
from monitor.errors import UsageError, VramscopeError
from monitor.store.database import Store, StoreError

if TYPE_CHECKING:  # the scheduler and the HTTP server are imported when the daemon runs
    from apscheduler.schedulers.base import BaseScheduler

    from monitor.http import HttpServer
    from monitor.http.metrics import Assessments, Counts, Growth
    from monitor.store.database import WriterHealth

log = logging.getLogger(__name__)

POISON_TRIES = 3


def tick(ctx: DaemonContext) -> Snapshot:
    """Sample once and write it (with any ticks the database refused earlier).

    While the database refuses writes (locked, disk full) ticks wait in memory, oldest
    first, and every one dropped past ``PENDING_MAX`` is logged. A tick that fails for any
    other reason ``POISON_TRIES`` times is logged and set aside, so one bad row can never
    block the ticks behind it.
    """
    if ctx.reload_requested:
        ctx.reload_requested = False
        reload_config(ctx)
    snap = ctx.sampler.sample(execs=_execs(ctx))
    ctx.ticks += 1
    _log_collector_changes(ctx, snap)
    snap = kernel_and_exits(ctx, snap)
    if ctx.watch is not None:
        try:
            found = ctx.watch.observe(snap)
        except Exception as exc:  # the watch must never cost a sample
            log.error("load watch failed: %r", exc)
            found = []
        if found:
            snap = dataclasses.replace(snap, events=snap.events + tuple(found))
    if ctx.startup_events:
        snap = dataclasses.replace(snap, events=tuple(ctx.startup_events) + snap.events)
        ctx.startup_events = []
    if ctx.alerts is not None:
        alerted = ctx.alerts.on_tick(snap)
        if alerted:
            snap = dataclasses.replace(snap, events=snap.events + tuple(alerted))
    if len(ctx.pending) == ctx.pending.maxlen:
        lost = ctx.pending.popleft()
        ctx.dropped += 1
        if not ctx.dropped_logged:  # once per refusal; the count is in /metrics and /healthz
            ctx.dropped_logged = True
            log.error(
                "%d ticks wait for the database: dropping the oldest from now on (first: %s)",
                PENDING_MAX,
                datetime.fromtimestamp(lost.ts_ms / 1000, UTC).isoformat(),
            )
    ctx.counts.observe(snap.exited, snap.events, snap.processes, snap.ts_ms)
    try:
        ctx.growth.on_tick(snap)
    except Exception as exc:  # the servers' logs must never cost a sample
        log.error("reading the servers' growth from their logs failed: %r", exc)
    ctx.last_snapshot = snap
    ctx.pending.append(snap)
    _write_pending(ctx)
    if ctx.assessor is not None:
        try:
            ctx.assessor.on_tick(snap, ctx.store if ctx.db_error is None else None)
        except Exception as exc:  # the estimates must never cost a sample
            log.error("assessing servers failed: %r", exc)
    if ctx.notify is not None:
        if ctx.ticks == 1:
            ctx.notify.ready(f"sampling every {ctx.config.interval_s} s")
        ctx.notify.watchdog()
    return snap


def _check_wal(ctx: DaemonContext) -> None:
    """The -wal file deleted under a running daemon: checkpoint what it held and go on
    with a new one, saying so once (issue 14: readers broke and the next start lost it)."""
    try:
        if not ctx.store.wal_lost():
            return
        ctx.store.recover_wal()
    except sqlite3.Error as exc:
        log.error(
            "the -wal file of %s was deleted while running and could not be checkpointed: %s",
            ctx.config.db_path,
            exc,
        )
        return
    log.warning(
        "the -wal file of %s was deleted while running; its ticks were "
        "checkpointed into the database and a new -wal was started",
        ctx.config.db_path,
    )


def _write_pending(ctx: DaemonContext) -> None:
    if not ctx.pending:
        return
    _check_wal(ctx)
    while ctx.pending:
        head = ctx.pending[0]
        try:
            ctx.store.write(head)
        except sqlite3.OperationalError as exc:  # busy, locked, full: wait and retry
            if ctx.db_error is None:  # said once; the event is stored with the tick
                ctx.db_error = str(exc)
                ctx.db_error_since_ms = now_ms()
                log.error(
                    "cannot write to %s (%s); ticks are kept in memory until it "
                    "accepts writes again",
                    ctx.config.db_path,
                    exc,
                )
                ctx.pending[0] = dataclasses.replace(
                    head,
                    events=(
                        *head.events,
                        DeviceEvent(
                            head.ts_ms,
                            "database",
                            "database_unwritable",
                            "critical",
                            f"cannot write to the database {ctx.config.db_path} ({exc}); "
                            "ticks are kept in memory",
                            {"error": str(exc)},
                        ),
                    ),
                )
            break
        except Exception as exc:
            ctx.note_error(exc)
            failures = ctx.failures.get(head.ts_ms, 0) + 1
            ctx.failures[head.ts_ms] = failures
            if failures < POISON_TRIES:
                log.error("writing the tick of %d failed (%r); will retry", head.ts_ms, exc)
                break
            log.error(
                "set aside the tick of %d after %d failed writes: %r", head.ts_ms, failures, exc
            )
            ctx.dropped += 1
        else:
            if ctx.db_error is not None:
                _database_writable(ctx)
        ctx.pending.popleft()
        ctx.failures.pop(head.ts_ms, None)
    if not ctx.pending and ctx.replay_files:
        for path in ctx.replay_files:
            try:
                path.unlink()
                log.info("the backlog of the previous run is in the database; removed %s", path)
            except OSError as exc:
                log.error("cannot remove the written backlog %s: %s", path, exc)
        ctx.replay_files = []


def _database_writable(ctx: DaemonContext) -> None:
    log.info(
        "%s accepts writes again; writing the %d tick(s) kept in memory (%d dropped so far)",
        ctx.config.db_path,
        len(ctx.pending) - 1,
        ctx.dropped,
    )
    try:
        ctx.store.add_event(
            "database_writable",
            "info",
            "database",
            f"the database accepts writes again (it refused: {ctx.db_error})",
            {
                "error": ctx.db_error,
                "queued_ticks": len(ctx.pending) - 1,
                "dropped_ticks": ctx.dropped,
            },
        )
    except sqlite3.Error as exc:
        log.error("could not record that the database recovered: %s", exc)
    ctx.db_error = ctx.db_error_since_ms = None
    ctx.dropped_logged = False


def reload_config(ctx: DaemonContext) -> bool:
    """SIGHUP: re-read the config between two ticks; a broken file keeps the old one."""
    from monitor import config as config_mod

    old = ctx.config
    try:
        new = config_mod.load(
            old.source,
            db=old.db_path,
            interval_s=None,
            proc_root=old.roots.proc,
            sys_root=old.roots.sys,
        )
    except config_mod.ConfigError as exc:
        log.error("reload failed, keeping the running configuration: %s", exc)
        return False
    if new.db_path != old.db_path:
        log.warning(
            "reload: the database path cannot change while running; keeping %s", old.db_path
        )
        new = dataclasses.replace(new, db_path=old.db_path)
    new, http_said = config_mod.keep_running_http(old, new)
    if http_said is not None:
        log.warning("reload: %s", http_said)
    if (new.roots, new.options, new.collectors) != (old.roots, old.options, old.collectors):
        ctx.sampler.close()
        ctx.sampler = Sampler(new.roots, new.options, new.collectors)
    if new.interval_s != old.interval_s and ctx.scheduler is not None:
        ctx.scheduler.reschedule_job("sample", trigger="interval", seconds=new.interval_s)
    if ctx.proc_events is not None:
        from collectors.proc_events import keep_for

        ctx.proc_events.keep_s = keep_for(new.interval_s)
    logs = (new.log_files, new.journal_units, new.swap_url)
    if logs != (old.log_files, old.journal_units, old.swap_url):
        from monitor.logs.follow import open_tails

        tails = open_tails(list(new.log_files), list(new.journal_units), new.swap_url)
        if ctx.log_reader is not None:
            ctx.log_reader.replace(tails)  # closes the old ones between two rounds
        else:
            for tail in ctx.tails:
                tail.close()
        ctx.tails = tails
    if ctx.watch is not None:
        ctx.watch.swap_url, ctx.watch.swap_config = new.swap_url, new.swap_config
    ctx.config = new
    if ctx.alerts is not None:
        ctx.alerts.reconfigure(new)
    log.info("configuration reloaded from %s", new.source or "defaults")
    if ctx.notify is not None:
        ctx.notify.ready(f"reloaded; sampling every {new.interval_s} s")
    return True


def start_line(interval_s: float, db_path: object, runs: Iterable[CollectorRun]) -> str:
    """The daemon's start line, from its first tick: the collectors that apply here.

    A collector whose hardware or library is absent (``nodata``) is not listed; it is
    named at debug level, and ``vramscope doctor`` says why.
    """
    here = [r.collector for r in runs if r.status != "nodata"]
    return (
        f"sampling every {interval_s:g} s into {db_path} "
        f"(collectors: {', '.join(here) or 'none apply here'})"
    )


def _log_collector_changes(ctx: DaemonContext, snap: Snapshot) -> None:
    """Log a collector's failure once, and its recovery, not every tick."""
    if ctx.ticks == 1:
        log.info("%s", start_line(ctx.config.interval_s, ctx.config.db_path, snap.runs))
    for run in snap.runs:
        problem = run.error if run.status == "error" else None
        previous = ctx.last_errors.get(run.collector)
        if problem != previous:
            if problem:
                log.error("collector %s failed: %s", run.collector, problem)
            elif previous:
                log.info("collector %s recovered", run.collector)
        if run.status == "nodata" and run.collector not in ctx.last_errors:
            log.debug("collector %s: no data (%s)", run.collector, run.error)
        ctx.last_errors[run.collector] = problem


def poll_slots(ctx: DaemonContext) -> int:
    """Poll /slots of the llama.cpp servers seen in the last tick (loopback only, each at
    most every 10 s) and store the tokens in use; returns the servers answered."""
    from monitor.integrations.slots import SlotPoller
    from monitor.servers import parse_command
    from monitor.servers.capabilities import SLOTS
    from monitor.servers.recognise import helper_parents

    snap = ctx.last_snapshot
    if snap is None:
        return 0
    if ctx.slot_poller is None:
        ctx.slot_poller = SlotPoller(min_interval_s=10.0, timeout_s=1.0)
    answered = 0
    helpers = helper_parents({p.pid: p for p in snap.processes})
    for info in snap.processes:
        if info.engine not in SLOTS or info.pid in helpers:
            continue  # a forked helper answers on its server's port: polled once
        spec = parse_command(list(info.argv), cwd=info.cwd)
        if spec is None or not spec.model_path or spec.role == "proxy":
            continue
        host = spec.host if spec.host not in (None, "0.0.0.0", "::", "") else "127.0.0.1"
        url = f"http://{host}:{spec.port or 8080}"
        try:
            slots = ctx.slot_poller.poll(url, spec.model_path, snap.ts_ms / 1000)
        except UsageError:  # not loopback: never polled
            continue
        if slots and ctx.db_error is None:  # refused: the tick's log line said why
            try:
                ctx.store.add_slot_usage(snap.ts_ms, spec.model_path, slots)
                answered += 1
            except sqlite3.Error as exc:
                log.error("cannot store slot usage: %s", exc)
    return answered


def prune(ctx: DaemonContext) -> None:
    """Roll up and apply retention; waits while ticks are still queued for the database."""
    if ctx.pending:
        log.info("prune postponed: %d tick(s) still waiting to be written", len(ctx.pending))
        return
    try:
        counts = ctx.store.prune(now_ms(), ctx.config.retention)
        log.debug("prune: %s", counts)
    except sqlite3.Error as exc:
        ctx.note_error(exc)
        log.error("prune failed: %s", exc)


def _previous_run_unclean(store: Store) -> bool:
    """The last daemon_started has no daemon_stopped after it: killed or crashed."""
    from monitor.store.reads import last_daemon_mark

    return last_daemon_mark(store.db) == "daemon_started"


class RepeatedWarnings(logging.Filter):
    """A warning that can come every tick (a skipped or missed tick, from APScheduler or
    from us) is logged the first time; repeats of the same message go to debug level,
    counted, with one line saying how many every ``every_s``."""

    def __init__(self, every_s: float = 600.0) -> None:
        super().__init__()
        self.every_s = every_s
        self.counts: dict[tuple[str, str], int] = {}
        self._said_at: dict[tuple[str, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        key = (record.name, str(record.msg))
        n = self.counts[key] = self.counts.get(key, 0) + 1
        now = time.monotonic()
        if n == 1:
            record.msg = (
                f"{record.msg} (repeats are counted, one line every "
                f"{self.every_s / 60:.0f} minutes)"
            )
        elif now - self._said_at[key] >= self.every_s:
            record.msg = f"{record.msg} ({n} times so far)"
        else:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return True
        self._said_at[key] = now
        return True


JOB_LOGGERS = ("apscheduler.scheduler", "apscheduler.executors.default", f"{__name__}.jobs")


def quiet_repeated_warnings(every_s: float = 600.0) -> RepeatedWarnings:
    """Install one :class:`RepeatedWarnings` on the loggers that speak once per tick."""
    shared = RepeatedWarnings(every_s)
    for name in JOB_LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, RepeatedWarnings)]:
            logger.removeFilter(old)
        logger.addFilter(shared)
    return shared


def _http_server(
    config: Config,
    latest: Callable[[], Snapshot | None],
    health: Callable[[], WriterHealth | None] | None = None,
    assessments: Assessments | None = None,
    counts: Counts | None = None,
    growth: Growth | None = None,
) -> HttpServer | None:
    """The HTTP server of [http] (loopback 9835 by default), not started yet: a config
    error (off loopback without a token) stops the daemon before anything is written."""
    if not config.http_listen:
        return None
    from monitor.http import HttpConfigError, HttpServer

    try:
        return HttpServer(
            config.http_listen,
            config.http_token,
            latest,
            config.db_path,
            config,
            health=health,
            assessments=assessments,
            counts=counts,
            growth=growth,
        )
    except HttpConfigError as exc:
        raise StoreError(str(exc)) from None


def _execs(ctx: DaemonContext) -> frozenset[int] | None:
    """The pids that exec'd since the last tick, from the process-event connector; None
    (every young process is checked) without it, or when the collectors read another
    /proc than this kernel's (a recorded or injected tree: the connector's pids are not
    its pids)."""
    if ctx.proc_events is None or str(ctx.config.roots.proc) != "/proc":
        return None
    return ctx.proc_events.take_execs()


def _start_watchers(ctx: DaemonContext) -> None:
    """The database's periodic integrity check and the process-event connector (exit
    statuses), each in a thread of its own."""
    from collectors.proc_events import ProcEventListener, keep_for
    from monitor.store.integrity import IntegrityWatch

    ctx.integrity = IntegrityWatch(ctx.config.db_path, ctx.config.integrity_check_s)
    ctx.integrity.start()
    ctx.proc_events = ProcEventListener(keep_s=keep_for(ctx.config.interval_s))
    if not ctx.proc_events.open() or not ctx.proc_events.verify():
        ctx.proc_events.close()
        log.warning(
            "exit statuses from zombies and kernel records only (%s)", ctx.proc_events.error
        )
        ctx.proc_events = None


def run(config: Config) -> int:
    """Run until SIGTERM/SIGINT; return the exit code. The composition root: it opens the
    store, builds the tick's collaborators, schedules the jobs and closes all at the end."""
    holder: list[DaemonContext] = []  # the HTTP threads read the latest tick through it
    # first of all: a SIGHUP (systemd's reload) or SIGTERM while starting must not take
    # the signal's default action, which ends the process
    stop, reload_early = _handle_signals(holder)
    require_db_folder(config)  # a named path in a missing folder: one line, nothing made
    lock = acquire_lock(config.db_path)
    http = _http_server(
        config,
        lambda: holder[0].last_snapshot if holder else None,
        lambda: holder[0].health() if holder else None,
        lambda: holder[0].assessor.current() if holder and holder[0].assessor else {},
        lambda: holder[0].counts.totals() if holder else None,
        lambda: holder[0].growth.rows() if holder else {},
    )
    file_lock, store = _open_store(config)
    sampler = Sampler(config.roots, config.options, config.collectors)
    ctx = DaemonContext(config, store, sampler)
    _start_watchers(ctx)
    _queue_backlog(ctx)
    _start_log_followers(ctx)
    _start_observers(ctx)
    _record_start(ctx)
    sched = _scheduler(ctx)
    from monitor.daemon.sd_notify import SdNotifier

    ctx.notify = SdNotifier()
    holder.append(ctx)  # from here the handlers reach the context itself
    if reload_early.is_set():  # a SIGHUP while starting: reload at the first tick
        ctx.reload_requested = True
    http = _start_http(http)
    try:
        if not stop.is_set():  # a signal before the scheduler ran: do not start it at all
            sched.start()
            stop.wait()  # the handler sets it; lock waits are interrupted by signals
            sched.shutdown(wait=True)
    finally:
        _final_flush(ctx)
        _close(ctx, http)
        file_lock.close()
        lock.close()
    return 0


def _open_store(config: Config) -> tuple[IO[bytes], Store]:
    """The database, locked (a file moved aside at open leaves the new one locked)."""
    file_lock = lock_database_file(config.db_path)
    store = Store.open(config.db_path, exit_judge=JUDGE)
    if store.recovered_from:  # a new file now: lock it, not the one moved aside
        file_lock.close()
        file_lock = lock_database_file(config.db_path)
    store.set_busy_timeout(min(2.0, max(0.05, config.interval_s / 4)))
    return file_lock, store


def _start_log_followers(ctx: DaemonContext) -> None:
    """The kernel log (when readable) and the engine logs, read off the tick."""
    from monitor.logs.follow import open_tails
    from monitor.logs.kmsg import KmsgFollower
    from monitor.logs.reader import LogReader

    config = ctx.config
    ctx.kmsg = KmsgFollower()
    if not ctx.kmsg.open():
        log.warning(
            "kernel log not followed (%s): OOM kills will not be recorded; run as "
            "root or with CAP_SYSLOG",
            ctx.kmsg.error,
        )
        ctx.kmsg = None
    ctx.tails = open_tails(list(config.log_files), list(config.journal_units), config.swap_url)
    ctx.log_reader = LogReader(ctx.tails)
    ctx.log_reader.start()


def _start_observers(ctx: DaemonContext) -> None:
    """What judges each tick: the load watch, the assessor and the alert engine."""
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.daemon.assessor import Assessor
    from monitor.daemon.watch import LoadWatch

    config = ctx.config
    overhead = config.gpu_overhead_mib * 1024 * 1024
    ctx.watch = LoadWatch(
        config.roots.proc,
        gpu_overhead_bytes=overhead,
        swap_url=config.swap_url,
        swap_config=config.swap_config,
    )
    ctx.assessor = Assessor(config.roots.proc, gpu_overhead_bytes=overhead)
    ctx.alerts = AlertEvaluator(config)


def _record_start(ctx: DaemonContext) -> None:
    """``daemon_started`` (and a warning when the last run did not stop cleanly); kept
    for the first tick when the database cannot take it now."""
    store, config = ctx.store, ctx.config
    if _previous_run_unclean(store):
        ctx.startup_events.append(
            DeviceEvent(
                now_ms(),
                "host",
                "daemon_started",
                "warning",
                "vramscope restarted after an unclean stop (no daemon_stopped was recorded)",
                {"unclean": True, "pid": os.getpid()},
            )
        )
    started = DeviceEvent(
        now_ms(),
        "daemon",
        "daemon_started",
        "info",
        f"vramscope daemon started (pid {os.getpid()}, every {config.interval_s} s)",
        {
            "pid": os.getpid(),
            "interval_s": config.interval_s,
            "collectors": [c.name for c in ctx.sampler.collectors],
        },
    )
    try:
        store.add_event(
            started.kind,
            started.severity,
            started.device_id,
            started.message,
            dict(started.data),
            ts_ms=started.ts_ms,
        )
    except sqlite3.OperationalError:  # locked, full: it waits with the first tick instead
        ctx.startup_events.insert(0, started)


def _scheduler(ctx: DaemonContext) -> BaseScheduler:
    """APScheduler with one worker: the tick, the /slots poll and the prune."""
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED, JobExecutionEvent
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler

    config = ctx.config
    sched = BackgroundScheduler(
        timezone=UTC,
        executors={"default": ThreadPoolExecutor(max_workers=1)},
        job_defaults={
            "coalesce": True,
            "max_instances": 1,
            "misfire_grace_time": max(1, int(config.interval_s)),
        },
    )
    now = datetime.now(UTC)
    sched.add_job(
        tick, "interval", seconds=config.interval_s, id="sample", next_run_time=now, args=(ctx,)
    )
    sched.add_job(
        poll_slots,
        "interval",
        seconds=10,
        id="slots",
        args=(ctx,),
        next_run_time=now + timedelta(seconds=5),
    )
    sched.add_job(
        prune,
        "interval",
        seconds=config.prune_interval_s,
        id="prune",
        next_run_time=now + timedelta(seconds=min(60.0, config.prune_interval_s)),
        args=(ctx,),
    )
    quiet_repeated_warnings()
    jobs_log = logging.getLogger(f"{__name__}.jobs")

    def on_job_event(event: JobExecutionEvent) -> None:
        if event.exception is not None:
            log.error("job %s raised %r", event.job_id, event.exception)
        else:
            jobs_log.warning(
                "job %s missed its time (the previous run was still going)", event.job_id
            )

    sched.add_listener(on_job_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    ctx.scheduler = sched
    return sched


def _start_http(http: HttpServer | None) -> HttpServer | None:
    """Start the HTTP server; a port taken is a warning and sampling goes on without it."""
    if http is None:
        return None
    try:
        http.start()
        log.info("HTTP on http://%s:%d (/metrics, /api/v1/...)", *http.address[:2])
    except VramscopeError as exc:  # port taken: keep sampling, say why
        log.warning("HTTP server not started: %s", exc)
        return None
    return http


def _handle_signals(holder: list[DaemonContext]) -> tuple[threading.Event, threading.Event]:
    """Installed before anything is opened. SIGTERM/SIGINT set the first event (the main
    thread then finishes the tick in flight and stops); SIGHUP reloads the config before
    the next tick, or sets the second event while the context (``holder``) is not made
    yet. The handlers only set flags: they run in the main thread, wherever it is."""
    stopping, reload_early = threading.Event(), threading.Event()

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s; finishing the tick in flight", signal.Signals(signum).name)
        notify = holder[0].notify if holder else None
        if notify is not None and not stopping.is_set():
            notify.stopping()
        stopping.set()

    def hangup(_signum: int, _frame: FrameType | None) -> None:
        log.info("received SIGHUP: the configuration is reloaded before the next tick")
        if holder:
            holder[0].reload_requested = True
        else:
            reload_early.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hangup)
    return stopping, reload_early


def _close(ctx: DaemonContext, http: HttpServer | None) -> None:
    """Everything the run opened, the sampler and the store first."""
    ctx.sampler.close()
    ctx.store.close()
    if http is not None:
        http.stop()
    if ctx.alerts is not None:
        ctx.alerts.close()
    if ctx.assessor is not None:
        ctx.assessor.close()
    ctx.growth.close()
    if ctx.kmsg is not None:
        ctx.kmsg.close()
    if ctx.proc_events is not None:
        ctx.proc_events.close()
    if ctx.integrity is not None:
        ctx.integrity.close()
    if ctx.log_reader is not None:
        ctx.log_reader.close()  # and its tails


FINAL_FLUSH_WAIT_S = 2.0


def _queue_backlog(ctx: DaemonContext) -> None:
    """Queue the ticks a previous run saved beside the database, ahead of the first
    sample; the file is removed once they are all written (see _write_pending). A
    backlog file that is refused (a link, a FIFO, not ours) is named in one line and left
    alone; the read is bounded (monitor/store/backlog.py)."""
    from monitor.store import backlog

    try:
        got = backlog.load(ctx.config.db_path)
    except OSError as exc:  # the database's folder itself cannot be opened
        log.error("cannot read the backlog: %s; it is left as it is", exc)
        return
    for line in got.refused:
        log.error("%s; it is left as it is", line)
    if not got.files:
        return
    ctx.pending.extend(got.snaps)  # past PENDING_MAX the oldest go, counted
    ctx.dropped += max(0, len(got.snaps) - len(ctx.pending))
    ctx.replay_files = [] if got.truncated else list(got.files)  # kept when not all read
    log.info(
        "queued %d tick(s) the previous run could not write, from %s%s%s",
        len(got.snaps),
        ", ".join(map(str, got.files)),
        f" ({got.bad} unreadable or oversized line(s) skipped)" if got.bad else "",
        f"; stopped after {backlog.MAX_READ_BYTES} bytes" if got.truncated else "",
    )


def _last_log_events(ctx: DaemonContext, ts_ms: int) -> list[DeviceEvent]:
    """On stop: what the log reader found since the last tick, and the lines it merged
    in windows not ended yet (their count is recorded, not lost)."""
    if ctx.log_reader is None:
        return []
    from monitor.logs.kmsg import to_device_events

    try:
        ctx.log_reader.close()
        return to_device_events(ctx.log_reader.take(), ts_ms)
    except Exception as exc:  # stopping must never fail on a log
        log.error("engine logs at stop: %r", exc)
        return []


def _final_flush(ctx: DaemonContext) -> None:
    """On stop: record daemon_stopped and try once more to write everything queued; what
    the database still refuses goes to the backlog file for the next start."""
    from monitor.store import backlog

    stopped = DeviceEvent(
        now_ms(),
        "daemon",
        "daemon_stopped",
        "info",
        f"vramscope daemon stopped after {ctx.ticks} ticks",
        {"ticks": ctx.ticks, "unwritten_ticks": len(ctx.pending), "dropped_ticks": ctx.dropped},
    )
    last = _last_log_events(ctx, stopped.ts_ms)
    ctx.pending.append(Snapshot(stopped.ts_ms, (), (), (), (), (), (), (*last, stopped)))
    try:
        ctx.store.set_busy_timeout(FINAL_FLUSH_WAIT_S)
        _write_pending(ctx)
    except sqlite3.Error as exc:
        log.error("final write failed: %s", exc)
    if not ctx.pending:
        return
    try:
        path = backlog.save(ctx.config.db_path, list(ctx.pending))
    except OSError as exc:
        log.error(
            "the database still refuses writes (%s) and the backlog cannot be saved "
            "(%s): %d tick(s) lost",
            ctx.db_error,
            exc,
            len(ctx.pending),
        )
        return
    for older in ctx.replay_files:  # their ticks were queued: now in the new file
        if older != path:
            with contextlib.suppress(OSError):
                older.unlink()
    log.error(
        "the database still refuses writes (%s): saved %d tick(s) to %s; the next "
        "daemon start writes them",
        ctx.db_error,
        len(ctx.pending),
        path,
    )
