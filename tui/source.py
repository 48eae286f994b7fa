"""Where the TUI's data comes from: a live sampler or the daemon's database, as Frames.

A :class:`Frame` is everything one screen refresh shows: the snapshot, its memory picture
and one :class:`ModelRow` per inference server (measured vs estimated, KV size, flags and
the diagnosis). Frames are built by :class:`FrameBuilder`; every ``SampleSource`` method
is blocking and is only ever called from worker threads.

- :class:`LiveSource` samples in-process (a :class:`~monitor.daemon.sampler.Sampler`) and
  is the only source that estimates (it reads GGUF headers, once per process);
- :class:`StoreSource` reads the daemon's WAL database read-only (the daemon keeps
  writing while we read), its stored estimates included, through monitor/store/: the
  TUI holds no SQL;
- :class:`RemoteSource` reads a daemon's HTTP API (monitor/http/client.py), its estimates
  from ``/api/v1/estimates`` (the model files need not exist here);
- ``tests/tui/fake_source.py`` replays synthetic snapshots.

Each real source gets the box from :func:`monitor.analysis.state.box_state` (live, a
database moment, a remote daemon), as ``predict``, ``diagnose`` and the HTTP API do.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from collectors.base import CollectorOptions, Roots, Snapshot
from monitor.api import (
    DEFAULT_MARGIN_BYTES,
    Picture,
    classify_legacy,
    model_specific,
    picture_from_snapshot,
    servers_cgroup,
)
from monitor.errors import NotRecorded, VramscopeError
from tui.churn import ChurnGate
from tui.frames import FrameStore
from tui.memo import JudgedMemo, LinksMemo
from tui.series import HISTORY_POINTS, Series, add_point, downsample, ending_at

if TYPE_CHECKING:  # the estimator stack (gguf, numpy) loads in the first worker, not at start
    from monitor.api import (
        Assessment,
        BoxState,
        DeviceInfo,
        Diagnosis,
        Evidence,
        Launch,
        Measured,
        MemoryEstimate,
        Router,
        ServerLogFollower,
    )

MINUTE_MS = 60_000

"""label -> [(ts_ms, bytes)]; labels are ``device:<id>`` and ``model:<name> (pid N)``."""


@dataclass(frozen=True, slots=True)
class EventRow:
    ts_ms: int
    kind: str
    severity: str
    subject: str | None
    message: str
    data: dict[str, Any] | None = field(default=None, compare=False)  # report/events.py joins


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One inference server as the models table shows it."""

    pid: int
    engine: str
    model: str
    ctx_slots: str
    cache_types: str
    measured_bytes: int | None  # monitor/analysis/measured.py; None = unknown, never 0
    estimate_bytes: int | None
    kv_bytes: int | None
    flags: tuple[str, ...] = ()
    launch: Launch | None = None  # what it was asked to do (monitor/analysis/assess.py)
    estimate: MemoryEstimate | None = None
    diagnosis: Diagnosis | None = None
    need_by_device: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    held: Measured | None = None  # the parts of measured_bytes (monitor/analysis/measured.py)
    assessment: Assessment | None = None  # whole, judged for this frame
    # "router": a llama-server router's own row (no model, never estimated); its children's
    # rows follow it, their model cell "└ ID · file" (monitor/servers/router.py)
    role: str = "server"

    @property
    def delta_bytes(self) -> int | None:
        if self.estimate_bytes is None or self.measured_bytes is None:
            return None
        return self.measured_bytes - self.estimate_bytes


@dataclass(frozen=True, slots=True)
class Frame:
    snapshot: Snapshot
    picture: Picture
    models: tuple[ModelRow, ...] = ()
    events: tuple[EventRow, ...] = ()
    live: bool = True

    @property
    def ts_ms(self) -> int:
        return self.snapshot.ts_ms


class SourceError(VramscopeError):
    """The source cannot be read (no database, not a vramscope database, ...)."""


class SampleSource(Protocol):
    """What the TUI renders. Every method may block: call them from worker threads."""

    live: bool

    def latest(self) -> Frame: ...

    def history(self, device_id: str | None, since_ms: int, until_ms: int) -> Series: ...

    def events(self, since_ms: int) -> list[EventRow]: ...

    def at(self, ts_ms: int) -> Frame: ...

    def ticks(self, since_ms: int, until_ms: int) -> list[int]: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- frame building


HeaderReader = Callable[[str], Any]
Assessments = Mapping[tuple[int, int], "Assessment"]
"""(pid, start_ticks) -> the daemon's stored assessment (monitor/analysis/assess.py)."""


class FrameBuilder:
    """Snapshot -> Frame. Live, each server is assessed here once per launch, however many
    processes run it (monitor/analysis/assess_cache.py: keyed by the parsed launch, the
    model files' identity and the devices; monitor/analysis/assess.py reads its GGUF
    headers, each file once); the database and
    remote sources hand ``build`` the daemon's stored assessments instead and nothing is
    estimated. The verdict is judged for every frame (again only when a server's memory
    rows change: tui/memo.py) from the assessment and the frame's
    measured memory (pure)."""

    def __init__(
        self,
        margin_bytes: int = DEFAULT_MARGIN_BYTES,
        overhead_bytes: int = 300 * 1024 * 1024,
        read_header: HeaderReader | None = None,
        p99_tokens: Callable[[str], int | None] | None = None,
        env_for: Callable[[int], Mapping[str, str]] | None = None,
    ) -> None:
        self.margin_bytes = margin_bytes
        # a live process's allow-listed LLAMA_ARG_* etc. (monitor/servers/environ.py), as
        # the daemon's assessor reads it; LiveSource sets it from its /proc root
        self.env_for = env_for
        self.overhead_bytes = overhead_bytes
        self.p99_tokens = p99_tokens or (lambda _path: None)
        self.has_usage = p99_tokens is not None
        self._headers: dict[str, Any] = {}
        self._reader = read_header
        self._lock = threading.Lock()
        self._assessed: dict[tuple[int, int, tuple[str, ...], str | None], Assessment | None] = {}
        self._launches: Any = None  # monitor.analysis.assess_cache.AssessCache, made on use
        self._logs: dict[tuple[int, int], ServerLogFollower | None] = {}
        self.links = LinksMemo()  # router links, parsed again only for a new process table
        self.judge = JudgedMemo()  # each server's verdict, judged again when its rows change

    def read_header(self, path: str) -> Any:
        with self._lock:
            if path in self._headers:
                cached = self._headers[path]
                if isinstance(cached, Exception):
                    raise cached
                return cached
        reader: HeaderReader
        if self._reader is not None:
            reader = self._reader
        else:
            from monitor.api import read_header as reader
        try:
            header = reader(path)
        except Exception as exc:  # unreadable file: remembered, so not re-read each tick
            with self._lock:
                self._headers[path] = exc
            raise
        with self._lock:
            self._headers[path] = header
        return header

    def devices(self, snap: Snapshot) -> list[DeviceInfo]:
        from monitor.api import devices_from_samples

        return devices_from_samples(snap.devices, self.overhead_bytes)

    def build_state(
        self,
        state: BoxState,
        events: Sequence[EventRow] = (),
        live: bool = True,
        assessments: Assessments | None = None,
        missing: str | None = None,
    ) -> Frame:
        """The frame of one box state (monitor/analysis/state.py), its picture reused."""
        return self.build(
            state.snapshot, events, live, assessments, missing, state.picture_for(self.margin_bytes)
        )

    def build(
        self,
        snap: Snapshot,
        events: Sequence[EventRow] = (),
        live: bool = True,
        assessments: Assessments | None = None,
        missing: str | None = None,
        picture: Picture | None = None,
    ) -> Frame:
        """``assessments``: the daemon's, for a database or remote frame (None: assess
        here, live); a server without one shows ``missing`` as its reason, unestimated."""
        from monitor.api import ESTIMATED, helper_parents

        if picture is None:  # the servers' cgroup room binds where it is the smaller
            picture = picture_from_snapshot(snap, self.margin_bytes, servers_cgroup(snap))
        devices = self.devices(snap)
        helpers = helper_parents({p.pid: p for p in snap.processes})
        built = [
            self._row(
                snap,
                picture,
                devices,
                info,
                [h for h, owner in helpers.items() if owner == info.pid],
                assessments,
                missing,
            )
            for info in snap.processes
            if info.engine in ESTIMATED and info.pid not in helpers
        ]
        if assessments is None:
            self._forget_logs({(p.pid, p.start_ticks) for p in snap.processes})
        rows = [r for r in built if r is not None]
        self.judge.keep({p.pid for p in snap.processes})
        rows.sort(key=lambda r: -(r.measured_bytes if r.measured_bytes is not None else -1))
        grouped = grouped_by_router(rows, snap, self.links)
        return Frame(snap, picture, tuple(grouped), tuple(events), live)

    def assess(
        self,
        info: Any,
        devices: list[DeviceInfo],
        ts_ms: int,
        cpu_features: tuple[str, ...] | None = None,
    ) -> Assessment | None:
        """Live only: the one assessment of this process and launch (cached per process,
        and per launch across processes)."""
        key = (info.pid, info.start_ticks, tuple(info.argv), info.cwd)
        if key in self._assessed:
            return self._assessed[key]
        if self._launches is None:
            from monitor.api import AssessCache

            self._launches = AssessCache(self.read_header)
        env = self.env_for(info.pid) if self.env_for is not None else None
        result = self._launches.assess(info, devices, ts_ms, env=env, cpu_features=cpu_features)
        if len(self._assessed) > 512:
            self._assessed.clear()
        self._assessed[key] = result
        return result

    def growth_evidence(self, info: Any) -> tuple[list[Evidence], list[str]]:
        """Live only: what the server's own ``--log-file`` says grew (prompt cache,
        checkpoints), followed from frame to frame rather than re-read."""
        from monitor.api import ServerLogFollower, evidence_from_log, log_file_of, log_source

        key = (info.pid, info.start_ticks)
        with self._lock:
            if key not in self._logs:
                path = log_file_of(info.argv, info.cwd)
                self._logs[key] = ServerLogFollower(path) if path is not None else None
            follower = self._logs[key]
        if follower is None:
            return [], ["no llama.cpp log known (start llama-server with --log-file)"]
        source = log_source(follower.path)
        report = follower.read()
        if report is None:
            return [], [f"{source}: not readable ({follower.error})"]
        return evidence_from_log(report, source)

    def _forget_logs(self, alive: set[tuple[int, int]]) -> None:
        with self._lock:
            for key in [k for k in self._logs if k not in alive]:
                follower = self._logs.pop(key)
                if follower is not None:
                    follower.close()

    @staticmethod
    def unassessed(info: Any, ts_ms: int, reason: str) -> Assessment | None:
        """A server the daemon has no assessment of: its launch from its argv (parsing
        only, no file is read), no estimate, ``reason`` as its error."""
        from monitor.api import Assessment, Launch, launch_key, parse_command

        spec = parse_command(list(info.argv), cwd=info.cwd)
        if spec is None or spec.role in ("proxy", "worker", "router"):
            return None
        return Assessment(
            info.pid,
            info.start_ticks,
            ts_ms,
            launch_key(info),
            Launch.from_spec(spec),
            None,
            (),
            reason,
        )

    def _row(
        self,
        snap: Snapshot,
        picture: Picture,
        devices: list[DeviceInfo],
        info: Any,
        helpers: Sequence[int] = (),
        stored: Assessments | None = None,
        missing: str | None = None,
    ) -> ModelRow | None:
        from monitor.api import LLAMACPP_ESTIMATED, judged, kv_over_p99, need_by_device, times

        if stored is None:
            found = self.assess(info, devices, snap.ts_ms, snap.cpu_features)
        else:
            found = stored.get((info.pid, info.start_ticks)) or self.unassessed(
                info, snap.ts_ms, missing or "not assessed by the daemon yet"
            )
        if found is None:
            return None
        a = self.judge(found, snap.memory, helpers)
        grew = a.diagnosis is not None and any(
            f.component == "unaccounted" for f in a.diagnosis.findings
        )
        if stored is None and grew and found.launch.engine == "llama.cpp":
            evidence, checked = self.growth_evidence(info)  # what its own log says grew
            a = judged(found, snap.memory, helpers, evidence=evidence, checked=checked)
        launch, est = a.launch, a.estimate
        measured = a.measured.total_bytes if a.measured is not None else None
        flags: list[str] = []
        p99 = self.p99_tokens(launch.model_path) if launch.model_path else None
        ratio = kv_over_p99(est, p99) if est is not None else None
        if ratio is not None and ratio >= 2:  # the figure diagnose gives (one source)
            flags.append(f"KV {times(ratio)} the p99 context in use")
        if launch.draft_model and launch.draft_cache_type_k == "f16":
            flags.append("draft KV in f16")
        if launch.engine == "llama.cpp" and launch.ctx_size is None:
            flags.append("no -c: fit will grow the context")
        if est is None and launch.engine in LLAMACPP_ESTIMATED:
            flags.append("unknown model")
        if est is not None and model_specific(est.approximate):
            flags.append("≈ estimate approximate")
        slots = launch.n_parallel or (est.n_seq_max if est else None)
        ctx = est.n_ctx if est and est.n_ctx else launch.ctx_size or launch.max_model_len
        ctx_slots = f"{ctx or '?'}×{slots or '?'}"
        caches = f"{launch.cache_type_k}/{launch.cache_type_v}"
        kv = est.total_bytes("kv") + est.total_bytes("kv_swa") if est else None
        return ModelRow(
            pid=info.pid,
            engine=launch.engine,
            model=launch.model,
            ctx_slots=ctx_slots,
            cache_types=caches,
            measured_bytes=measured,
            estimate_bytes=est.total_bytes() if est else None,
            kv_bytes=kv or None,
            flags=tuple(flags),
            launch=launch,
            estimate=est,
            diagnosis=a.diagnosis,
            need_by_device=need_by_device(est, picture) if est else {},
            error=a.error,
            held=a.measured,
            assessment=a,
        )


def grouped_by_router(
    rows: list[ModelRow], snap: Snapshot, links: Callable[[Snapshot], Any] | None = None
) -> list[ModelRow]:
    """``rows`` (biggest first) with each llama-server router as a row of its own, its
    children's rows right under it (``└ ID · file``, ID their ``--alias``): the group
    sits where its biggest child does; a router with no child shown comes last. The
    router's row holds its own measured memory, ``--models-max`` and how many are loaded
    (monitor/servers/router.py); it has no estimate (it loads no model). ``links``: what
    gives the snapshot's links (a :class:`tui.memo.LinksMemo`; default computed here)."""
    from monitor.api import snapshot_links

    # a remote frame: as its daemon recorded
    routers, children = (links or snapshot_links)(snap)
    if not routers and not children:
        return rows
    out: list[ModelRow] = []
    done: set[int] = set()
    for row in rows:
        link = children.get(row.pid)
        router = routers.get(link.router_pid) if link and link.router_pid is not None else None
        if link is None or router is None:  # no env read here: a child is known by its parent
            out.append(row)
            continue
        if router.pid in done:
            continue
        done.add(router.pid)
        out.append(_router_row(router, snap))
        for child in rows:
            own = children.get(child.pid)
            if own is not None and own.router_pid == router.pid:
                out.append(replace(child, model=f"└ {own.model_id or '?'} · {child.model}"))
    out += [_router_row(r, snap) for pid, r in sorted(routers.items()) if pid not in done]
    return out


def _router_row(router: Router, snap: Snapshot) -> ModelRow:
    from monitor.api import measure

    held = measure(router.pid, snap.memory)
    top = "unlimited" if router.models_max == 0 else str(router.models_max)
    return ModelRow(
        pid=router.pid,
        engine="llama.cpp",
        model=f"router :{router.port}",
        ctx_slots="-",
        cache_types="-",
        measured_bytes=held.total_bytes,
        estimate_bytes=None,
        kv_bytes=None,
        flags=(f"{len(router.children)} loaded, max {top}",),
        held=held,
        role="router",
    )


def events_from_snapshot(snap: Snapshot) -> list[EventRow]:
    """What one live tick reports: device events and process exits."""
    out = [EventRow(e.ts_ms, e.kind, e.severity, e.device_id, e.message) for e in snap.events]
    for x in snap.exited:
        _cause, severity, text = classify_legacy(x)
        name = f"{x.comm} " if x.comm else ""
        out.append(
            EventRow(snap.ts_ms, "exit", severity, f"pid {x.pid}", f"{name}pid {x.pid} {text}")
        )
    return out


# --------------------------------------------------------------------------- live


class LiveSource:
    """Samples in-process. ``latest`` is only called from the poll worker thread."""

    live = True

    def __init__(
        self,
        roots: Roots | None = None,
        enabled: Iterable[str] | None = None,
        builder: FrameBuilder | None = None,
        keep: int = 3600,
        keep_frames: int = 60,
    ) -> None:
        self.roots = roots or Roots()
        self.enabled = enabled
        self.builder = builder or FrameBuilder()
        if self.builder.env_for is None:  # the environment the daemon's assessor reads too
            self.builder.env_for = self._env_for
        self._sampler: Any = None
        self._lock = threading.Lock()
        # compact ticks for history, a minute of whole frames for replay (tui/frames.py)
        self._frames = FrameStore(keep, keep_frames)
        self._events: deque[EventRow] = deque(maxlen=500)
        self._gate = ChurnGate()  # one-tick servers wait a tick (tui/churn.py)

    def describe(self) -> str:
        """Where the frames come from, for the header."""
        return "live (sampled by this process)"

    def _env_for(self, pid: int) -> Mapping[str, str]:
        from monitor.api import read_llama_env

        return read_llama_env(self.roots.proc, pid)

    def latest(self) -> Frame:
        from monitor.api import Live, box_state

        with self._lock:
            if self._sampler is None:
                from monitor.api import Sampler

                self._sampler = Sampler(self.roots, CollectorOptions(pss_per_tick=0), self.enabled)
            state = self._gate.tick(
                box_state(Live(self.roots, self.enabled, self._sampler), self.builder.margin_bytes)
            )
            self._events.extend(events_from_snapshot(state.snapshot))
            frame = self.builder.build_state(state, list(self._events)[-100:], live=True)
            self._frames.add(frame)
            return frame

    def history(self, device_id: str | None, since_ms: int, until_ms: int) -> Series:
        with self._lock:
            out: Series = self._frames.series(device_id, since_ms, until_ms)
        # each bucket keeps its peak; the newest frame's own value ends every series it
        # is in, so the history screen's "now" is now, not the last bucket's peak
        return {k: ending_at(downsample(v, HISTORY_POINTS - 1), v[-1]) for k, v in out.items()}

    def events(self, since_ms: int) -> list[EventRow]:
        with self._lock:
            return [e for e in self._events if e.ts_ms >= since_ms]

    def at(self, ts_ms: int) -> Frame:
        with self._lock:
            frame = self._frames.at(ts_ms)
        if frame is None:
            raise SourceError("nothing sampled yet")
        return frame

    def ticks(self, since_ms: int, until_ms: int) -> list[int]:
        with self._lock:
            return self._frames.ticks(since_ms, until_ms)

    def close(self) -> None:
        with self._lock:
            if self._sampler is not None:
                self._sampler.close()
                self._sampler = None


# --------------------------------------------------------------------------- database


class StoreSource:
    """Reads the daemon's database read-only; every call opens nothing new after the
    first (one read-only connection, used from worker threads under a lock)."""

    live = False

    def __init__(self, db_path: Path, builder: FrameBuilder | None = None) -> None:
        self.db_path = Path(db_path)
        self.builder = builder or FrameBuilder()
        if not self.builder.has_usage:  # p99 tokens in use, from the daemon's /slots polls
            self.builder.p99_tokens = self._p99
            self.builder.has_usage = True
        self._db: Any = None
        self._lock = threading.RLock()
        self._p99_cache: dict[str, tuple[float, int | None]] = {}

    def describe(self) -> str:
        """The database and who writes it (the daemon holding ``<db>.lock``), for the header:
        a root TUI may be reading another daemon's database than the one meant."""
        from monitor.api import lock_holder

        holder = lock_holder(self.db_path)
        who = (
            "no daemon writing it"
            if holder is None
            else "a daemon is writing it"
            if holder < 0
            else f"daemon pid {holder}"
        )
        return f"database {self.db_path} ({who})"

    def _conn(self) -> Any:
        if self._db is None:
            from monitor.api import StoreError, open_readonly

            try:
                self._db = open_readonly(self.db_path)
            except StoreError as exc:
                raise SourceError(str(exc)) from None
        return self._db

    def check(self, at_ms: int | None = None) -> None:
        """Raise SourceError unless the file is a vramscope database (store.open_readonly
        says why) and, for a replay, covers ``at_ms``."""
        with self._lock:
            self._conn()
        if at_ms is not None:
            from monitor.api import check_moment, sample_span

            first, last = self._read(sample_span)
            try:
                check_moment(self.db_path, at_ms, first, last)
            except NotRecorded as exc:
                raise SourceError(str(exc)) from None

    def _read(self, query: Callable[..., Any], *args: Any) -> Any:
        """One read function of monitor/store/reads.py on this source's connection."""
        from monitor.api import StoreError, reading

        with self._lock:
            try:
                with reading(self.db_path):
                    return query(self._conn(), *args)
            except StoreError as exc:
                raise SourceError(str(exc)) from None

    def _p99(self, model_path: str) -> int | None:
        now = time.monotonic()
        cached = self._p99_cache.get(model_path)
        if cached and now - cached[0] < 60:
            return cached[1]
        from monitor.api import usage_p99

        value = usage_p99(self.db_path, model_path)
        self._p99_cache[model_path] = (now, value)
        return value

    def latest(self) -> Frame:
        from monitor.api import latest_tick

        tick = self._read(latest_tick)
        if tick is None:
            raise SourceError(f"{self.db_path} holds no samples yet (is the daemon running?)")
        return self.at(tick)

    def at(self, ts_ms: int) -> Frame:
        from monitor.api import DatabaseMoment, StoreError, box_state

        try:
            state = box_state(DatabaseMoment(self.db_path, ts_ms), self.builder.margin_bytes)
        except (NotRecorded, StoreError) as exc:
            raise SourceError(str(exc)) from None
        events = self.events(state.ts_ms - 24 * 3600_000, until_ms=state.ts_ms)
        stored, missing = self._assessments(state.ts_ms)
        return self.builder.build_state(
            state, events[-100:], live=False, assessments=stored, missing=missing
        )

    def _assessments(self, ts_ms: int) -> tuple[Assessments, str]:
        """The daemon's stored assessments at ``ts_ms`` (monitor/analysis/stored.py), and
        what a server without one shows."""
        from monitor.api import assessments_at, has_estimates_table

        if not self._read(has_estimates_table):
            return {}, "no estimates in this database (an older vramscope wrote it)"
        return self._read(assessments_at, ts_ms), "not assessed by the daemon yet"

    def ticks(self, since_ms: int, until_ms: int) -> list[int]:
        from monitor.api import ticks_between

        return self._read(ticks_between, since_ms, until_ms)

    def events(self, since_ms: int, until_ms: int | None = None) -> list[EventRow]:
        from monitor.api import events_between

        rows = self._read(events_between, since_ms, until_ms if until_ms is not None else 2**62)
        return [EventRow(e.ts_ms, e.kind, e.severity, e.subject, e.message, e.data) for e in rows]

    def history(self, device_id: str | None, since_ms: int, until_ms: int) -> Series:
        """Used memory per device and per model (its measured total), at most
        ``HISTORY_POINTS`` points each (monitor/store/reads.py: each bucket keeps its peak,
        in SQL, so 30 days of rollups never reach Python row by row). Raw samples up to
        2 h, per-minute rollups beyond."""
        from monitor.api import device_peaks, last_tick_ms, server_peaks

        minutes = until_ms - since_ms > 2 * 3600_000
        out: Series = {}
        names: dict[tuple[str, ...], str] = {}

        def add(
            since: int, until: int, buckets: int, by_minute: bool, ending: bool = False
        ) -> None:
            for dev, peaks in self._read(
                device_peaks, device_id, since, until, buckets, by_minute
            ).items():
                for p in peaks:
                    add_point(out, f"device:{dev}", (p.ts_ms, p.used_bytes), ending)
            for peak in self._read(server_peaks, device_id, since, until, buckets, by_minute):
                if peak.argv not in names:
                    model = next((a for a in peak.argv if a.endswith(".gguf")), None)
                    names[peak.argv] = Path(model).name if model else peak.comm
                label = f"model:{names[peak.argv]} (pid {peak.pid})"
                add_point(out, label, (peak.ts_ms, peak.used_bytes), ending)

        add(since_ms, until_ms, HISTORY_POINTS - 1, minutes)
        # the newest tick's own values end the series alive then: "now" is now
        last = self._read(last_tick_ms, until_ms)
        if last is not None and last >= since_ms:
            add(last, last, 1, False, ending=True)
        return out

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def being_written(db_path: Path, within_s: float = 30.0) -> bool:
    """Is a daemon writing this database now? (its WAL file changed recently)"""
    for candidate in (Path(f"{db_path}-wal"), db_path):
        try:
            if time.time() - candidate.stat().st_mtime < within_s:
                return True
        except OSError:
            continue
    return False


class RemoteSource(LiveSource):
    """A daemon's HTTP API (``--remote http://box:9835``): its latest tick and events;
    history and replay cover what this TUI has seen since it started. No proxies are used;
    a token (``--token`` or ``$VRAMSCOPE_TOKEN``) is sent as a bearer token.

    The answers are untrusted: each is at most ``REMOTE_MAX_BYTES`` and must have the
    shape of ``vramscope.status/1`` (docs/status.schema.json) and of the events page, or
    ``latest`` raises SourceError saying what is wrong (shown on the status line); the
    client and the shape checks are monitor/http/client.py's."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        builder: FrameBuilder | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        super().__init__(builder=builder)
        from monitor.api import DaemonClient, RemoteError

        try:
            self._client = DaemonClient(url, token, timeout_s)
        except RemoteError as exc:
            raise SourceError(str(exc)) from None
        self.url = self._client.url
        self.token = token
        self.timeout_s = timeout_s
        self._since_ms = 0

    def describe(self) -> str:
        return f"remote {self.url}"

    def latest(self) -> Frame:
        from monitor.api import Remote, RemoteError, box_state, events_doc_problem

        try:
            state = box_state(Remote(self._client), self.builder.margin_bytes)
            stored, missing = self._assessments()
            page = self._client.get(f"/api/v1/events?since_ms={self._since_ms}")
        except RemoteError as exc:
            raise SourceError(str(exc)) from None
        problem = events_doc_problem(page)
        if problem is not None:
            raise SourceError(f"{self.url}/api/v1/events: not a vramscope events page: {problem}")
        with self._lock:
            for e in page["events"]:
                row = (e["ts_ms"], e["kind"], e["severity"], e.get("subject"), e["message"])
                self._events.append(EventRow(*row, e.get("data")))  # checked where read
                self._since_ms = max(self._since_ms, int(e["ts_ms"]) + 1)
            frame = self.builder.build_state(
                state, list(self._events)[-100:], live=True, assessments=stored, missing=missing
            )
            self._frames.add(frame)
            return frame

    def _assessments(self) -> tuple[Assessments, str]:
        """The daemon's assessments (``vramscope.estimates/1``): estimated over there, from
        its model files; a daemon without the endpoint gives none (never estimated here)."""
        from monitor.api import RemoteError, assessments_from_document

        try:
            doc = self._client.get("/api/v1/estimates")
        except RemoteError as exc:
            if "HTTP 404" in str(exc):
                return {}, "the daemon serves no estimates (an older vramscope)"
            raise
        try:
            return assessments_from_document(doc), "not assessed by the daemon yet"
        except ValueError as exc:
            raise SourceError(
                f"{self.url}/api/v1/estimates: not a vramscope estimates document: {str(exc)[:200]}"
            ) from None
