"""What the daemon's jobs share: the :class:`DaemonContext` its composition root
(monitor/daemon/loop.py ``run``) builds, and tests build with only what they need.

Every collaborator is typed; the ones ``run`` starts (log followers, the exit-status
connector, the observers, the integrity watch) are None until started, and a test's
context leaves them None. The types are imported for the checker only: building a
context loads none of them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from collectors.base import DeviceEvent, Snapshot
from monitor.analysis.exits_judged import JUDGE
from monitor.config import Config
from monitor.daemon.counters import EventCounts
from monitor.daemon.growth_logs import GrowthLogs
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store, WriterHealth

if TYPE_CHECKING:
    from collectors.proc_events import ProcEventListener
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.daemon.assessor import Assessor
    from monitor.daemon.sd_notify import SdNotifier
    from monitor.daemon.watch import LoadWatch
    from monitor.integrations.slots import SlotPoller
    from monitor.logs.follow import FileTail, JournalTail, SwapLogTail
    from monitor.logs.kmsg import KmsgFollower
    from monitor.logs.reader import LogMerger, LogReader
    from monitor.store.integrity import IntegrityWatch

    Tail = FileTail | JournalTail | SwapLogTail

# Ticks kept in memory while the database refuses writes (locked, disk full); written
# in order when it accepts them again. One hour at 1 s; the oldest go first past that.
PENDING_MAX = 3600


class Rescheduler(Protocol):
    """The one thing a reload asks of the scheduler (APScheduler's ``BaseScheduler``)."""

    def reschedule_job(self, job_id: str, *, trigger: str, seconds: float) -> object: ...


@dataclass
class DaemonContext:
    config: Config
    store: Store
    sampler: Sampler
    pending: deque[Snapshot] = field(default_factory=lambda: deque(maxlen=PENDING_MAX))
    last_errors: dict[str, str | None] = field(default_factory=dict)
    failures: dict[int, int] = field(default_factory=dict)  # ts_ms -> failed writes
    watch: LoadWatch | None = None  # judges new servers on the tick they appear
    assessor: Assessor | None = None  # each server estimated once per launch
    slot_poller: SlotPoller | None = None  # made by the first /slots poll
    last_snapshot: Snapshot | None = None
    kmsg: KmsgFollower | None = None  # the kernel log, when readable
    notify: SdNotifier | None = None  # systemd's sd_notify
    reload_requested: bool = False  # set by SIGHUP, acted on by the next tick
    scheduler: Rescheduler | None = None
    tails: list[Tail] = field(default_factory=list)  # engine logs (monitor/logs/follow.py)
    log_reader: LogReader | None = None  # reads the tails off the tick
    log_merger: LogMerger | None = None  # for tails read on the tick (no reader)
    recent_kills: dict[int, tuple[int, str, str | None]] = field(
        default_factory=dict
    )  # pid -> (kill time ms, "oom_kill"/"oomd_kill", constraint)
    last_app_oom_ms: int | None = None  # an engine log's out-of-memory line
    proc_events: ProcEventListener | None = None  # the kernel connector: exit statuses
    alerts: AlertEvaluator | None = None  # rules + delivery
    startup_events: list[DeviceEvent] = field(default_factory=list)  # for the first tick
    ticks: int = 0
    dropped: int = 0
    db_error: str | None = None  # why the database refuses writes now (locked, disk full)
    db_error_since_ms: int | None = None
    dropped_logged: bool = False  # the first drop of a refusal is logged, the rest counted
    replay_files: list[Path] = field(default_factory=list)  # backlog files queued, unwritten
    counts: EventCounts = field(default_factory=EventCounts)  # exits and log records, /metrics
    growth: GrowthLogs = field(default_factory=GrowthLogs)  # servers' own growth, /metrics
    integrity: IntegrityWatch | None = None  # quick_check, hourly

    def __post_init__(self) -> None:
        # the daemon judges exits (monitor/analysis/exits_judged.py); its store writes them
        if self.store.exit_judge is None:
            self.store.exit_judge = JUDGE

    def health(self) -> WriterHealth:
        """Safe from any thread: reads a few fields the worker thread swaps."""
        checked = self.integrity.result() if self.integrity is not None else None
        return WriterHealth(
            self.db_error is None,
            self.db_error,
            self.db_error_since_ms,
            len(self.pending),
            self.dropped,
            None if checked is None else checked.ok,
            None if checked is None else checked.problem,
            None if checked is None else checked.checked_ms,
        )

    def note_error(self, exc: BaseException) -> None:
        """SQLITE_CORRUPT from a write or a prune: check the whole file now."""
        from monitor.store.integrity import is_corrupt_error

        if self.integrity is not None and is_corrupt_error(exc):
            self.integrity.request()
