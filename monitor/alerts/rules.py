"""Alert rules: a pure function of one tick's :class:`Snapshot` and the previous state.

``evaluate(settings, snap, state, now_ms) -> (state, changes)`` reads nothing, writes
nothing and keeps no globals, so a table of synthetic snapshots and times tests it
(style-anchors.md section 11). Delivery (apprise, a command hook) is ``delivery.py``.

Two shapes of alert:

* **conditions** (memory pressure, a failing collector) fire after the condition has held
  for a hold time and resolve when it is gone; pressure resolves only below
  ``threshold - clear_drop_pct`` (hysteresis) so a value near a threshold never flaps.
  A pressure warning that reaches critical is ``escalated``; a critical one that falls
  below ``critical - clear_drop_pct`` (but not below the warning clear line) quietly
  becomes a warning again, so a later rise escalates (and is notified) again.
* **events** (OOM predicted, a kill, a crash, a memory surprise, an unclean restart) fire
  on the tick they arrive and resolve ``EVENT_TTL_MS`` later (an OOM prediction earlier:
  when its process finishes loading, crashes or exits). Each event fires once: its key is
  remembered for ``SEEN_TTL_MS`` after it fired.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from collectors.base import DeviceEvent, DeviceSample, Snapshot
from monitor.analysis.judge import Tolerance, is_over
from monitor.exits import ALERT_CAUSES, classify_legacy
from monitor.units import GIB, gib

EVENT_TTL_MS = 10 * 60 * 1000  # an event-like alert resolves itself this long after it fired
SEEN_TTL_MS = 60 * 60 * 1000  # fired event keys are remembered this long (never re-fired)
KILL_MATCH_MS = 120 * 1000  # a crash this close to a kill of its pid is that kill, not a 2nd
KILL_KINDS = ("oom_kill", "oomd_kill")
EVENT_KINDS = ("crash", "oom_kill", "oomd_kill", "app_oom", "engine_oom")

Level = Literal["warning", "critical"]
ChangeKind = Literal["fired", "resolved", "escalated"]

# Short human names of the rules, used in notification titles.
RULE_LABELS = {
    "pressure": "memory pressure",
    "oom_predicted": "OOM predicted",
    "crash": "process crashed",
    "oom_kill": "killed by the kernel OOM killer",
    "oomd_kill": "killed by systemd-oomd",
    "app_oom": "out of memory",
    "engine_oom": "the engine ran out of memory",
    "surprise": "memory surprise",
    "collector": "collector failing",
    "unclean_restart": "daemon restarted after an unclean stop",
    "oom_soon": "OOM ahead at this rate",
}
LEVEL_RANK = {"warning": 1, "critical": 2}


@dataclass(frozen=True, slots=True)
class AlertSettings:
    """Thresholds in percent, times in seconds; the defaults are the zero-config ones."""

    pressure_warning_pct: float = 90.0
    pressure_critical_pct: float = 97.0
    clear_drop_pct: float = 5.0
    hold_s: float = 30.0
    collector_hold_s: float = 60.0
    surprise_pct: float = 20.0
    surprise_min_mib: float = 128.0
    # a pool filling steadily toward its limit alerts this long before it gets there
    # (monitor/analysis/time_to_oom.py), critical at a tenth of it
    oom_lead_s: float = 1800.0


@dataclass(frozen=True, slots=True)
class Alert:
    """One active (or just resolved) alert. ``key`` is stable across ticks for a condition
    (``pressure:<device>``, ``collector:<name>``) and unique per event for event alerts."""

    key: str
    rule: str
    level: Level
    subject: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return RULE_LABELS.get(self.rule, self.rule)


@dataclass(frozen=True, slots=True)
class AlertChange:
    kind: ChangeKind
    alert: Alert
    ts_ms: int


@dataclass(frozen=True)
class AlertState:
    """What carries from one tick to the next. Treat as immutable: ``evaluate`` returns a
    new one. ``pending``: condition key (``<alert key>@<level>``) -> first time it held;
    ``since``: alert key -> when it fired; ``seen``: event key -> when it fired."""

    active: dict[str, Alert] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    since: dict[str, int] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> AlertState:
        return cls()


def one_line(text: str) -> str:
    return " ".join(text.split())


class _Eval:
    """The mutable scratch of one ``evaluate`` call (copies of the state's dicts)."""

    def __init__(self, settings: AlertSettings, state: AlertState, now_ms: int) -> None:
        self.s = settings
        self.now = now_ms
        self.active = dict(state.active)
        self.pending = dict(state.pending)
        self.since = dict(state.since)
        self.seen = {k: t for k, t in state.seen.items() if now_ms - t < SEEN_TTL_MS}
        self.changes: list[AlertChange] = []

    def fire(self, alert: Alert, event: bool = False) -> None:
        if event:
            if alert.key in self.seen or alert.key in self.active:
                return
            self.seen[alert.key] = self.now
        self.active[alert.key] = alert
        self.since[alert.key] = self.now
        self.changes.append(AlertChange("fired", alert, self.now))

    def resolve(self, key: str, message: str | None = None) -> None:
        alert = self.active.pop(key, None)
        self.since.pop(key, None)
        if alert is None:
            return
        if message is not None:
            alert = dataclasses.replace(alert, message=message)
        self.changes.append(AlertChange("resolved", alert, self.now))

    def held(self, cond: str, holds: bool, hold_s: float) -> bool:
        """Track a condition; True once it has held for ``hold_s``."""
        if not holds:
            self.pending.pop(cond, None)
            return False
        first = self.pending.setdefault(cond, self.now)
        return self.now - first >= hold_s * 1000

    def state(self) -> AlertState:
        return AlertState(self.active, self.pending, self.since, self.seen)


def evaluate(
    settings: AlertSettings, snap: Snapshot, state: AlertState, now_ms: int
) -> tuple[AlertState, list[AlertChange]]:
    """The alerts after this tick, and what changed (fired, escalated, resolved)."""
    ev = _Eval(settings, state, now_ms)
    _pressure(ev, snap)
    _oom_soon(ev, snap)
    _collectors(ev, snap)
    _events(ev, snap)
    _expire(ev)
    return ev.state(), ev.changes


# -- memory pressure ----------------------------------------------------------------------


def device_usage(dev: DeviceSample) -> tuple[int, int] | None:
    """(used, total) bytes of a pool; host used is ``total - available``; None if unknown."""
    total = dev.total_bytes
    if not total or total <= 0:
        return None
    is_host = dev.memory_kind == "host" or dev.device_id == "host"
    if is_host and dev.available_bytes is not None:
        return max(0, total - dev.available_bytes), total
    if dev.used_bytes is None:
        return None
    return dev.used_bytes, total


def _describe(dev: DeviceSample, used: int, total: int) -> str:
    pct = 100.0 * used / total
    if dev.memory_kind == "host" or dev.device_id == "host":
        where = "host RAM"
        tail = f" ({gib(total - used)} available)"
    else:
        kind = "unified memory" if dev.memory_kind == "unified" else "GPU memory"
        name = f"{dev.name} " if dev.name else ""
        where = f"{kind} of {name}({dev.device_id})"
        tail = ""
    return f"{where} at {pct:.1f}%: {used / GIB:.1f} of {gib(total)} used{tail}"


def _pressure(ev: _Eval, snap: Snapshot) -> None:
    s = ev.s
    seen_devices = set()
    for dev in snap.devices:
        usage = device_usage(dev)
        if usage is None or dev.device_id in seen_devices:
            continue  # unknown: an active alert stays as it is, a pending hold restarts
        seen_devices.add(dev.device_id)
        used, total = usage
        pct = 100.0 * used / total
        key = f"pressure:{dev.device_id}"
        warn = ev.held(f"{key}@warning", pct >= s.pressure_warning_pct, s.hold_s)
        crit = ev.held(f"{key}@critical", pct >= s.pressure_critical_pct, s.hold_s)
        text = _describe(dev, used, total)
        data = {
            "device_id": dev.device_id,
            "used_bytes": used,
            "total_bytes": total,
            "pct": round(pct, 2),
        }
        current = ev.active.get(key)
        if current is None:
            if crit or warn:
                level: Level = "critical" if crit else "warning"
                ev.fire(Alert(key, "pressure", level, dev.device_id, text, data))
            continue
        if pct < s.pressure_warning_pct - s.clear_drop_pct:
            ev.resolve(key, text)
        elif current.level == "warning" and crit:
            alert = Alert(key, "pressure", "critical", dev.device_id, text, data)
            ev.active[key] = alert
            ev.changes.append(AlertChange("escalated", alert, ev.now))
        elif current.level == "critical" and pct < s.pressure_critical_pct - s.clear_drop_pct:
            # quietly back to warning: no notice, but a new rise escalates again
            ev.active[key] = Alert(key, "pressure", "warning", dev.device_id, text, data)
        else:
            ev.active[key] = dataclasses.replace(current, message=text, data=data)
    # conditions of devices absent this tick restart their hold when they come back
    for cond in [c for c in ev.pending if c.startswith("pressure:")]:
        device_id = cond[len("pressure:") :].rsplit("@", 1)[0]
        if device_id not in seen_devices:
            del ev.pending[cond]


# -- time to OOM --------------------------------------------------------------------------


def _oom_soon(ev: _Eval, snap: Snapshot) -> None:
    """A pool whose steady fill reaches its limit within ``oom_lead_s``: a warning (critical
    within a tenth of it), raised on the tick the rate says so; resolved once the pool stops
    filling steadily or its forecast passes twice the lead."""
    lead = ev.s.oom_lead_s
    now = {f"oom_soon:{f.pool}": f for f in snap.time_to_oom}
    for key in [k for k in ev.active if k.startswith("oom_soon:")]:
        f = now.get(key)
        if f is None or f.seconds > 2 * lead:
            ev.resolve(key)
    for key, f in now.items():
        if f.seconds > lead:
            continue
        level: Level = "critical" if f.seconds <= lead / 10 else "warning"
        text = one_line(
            f"{f.pool} fills at {f.rate_bytes_per_s / 2**20:.1f} MiB/s: at this rate it "
            f"reaches its limit of {gib(f.limit_bytes)} in ~{f.seconds / 60:.0f} min "
            f"({gib(f.held_bytes)} held)"
        )
        data = {
            "pool": f.pool,
            "seconds": round(f.seconds, 1),
            "rate_bytes_per_s": round(f.rate_bytes_per_s, 1),
            "held_bytes": f.held_bytes,
            "limit_bytes": f.limit_bytes,
        }
        current = ev.active.get(key)
        if current is None:
            ev.fire(Alert(key, "oom_soon", level, f.pool, text, data))
        elif current.level == "warning" and level == "critical":
            alert = Alert(key, "oom_soon", level, f.pool, text, data)
            ev.active[key] = alert
            ev.changes.append(AlertChange("escalated", alert, ev.now))
        else:
            ev.active[key] = dataclasses.replace(current, message=text, data=data)


# -- collectors ---------------------------------------------------------------------------


def _collectors(ev: _Eval, snap: Snapshot) -> None:
    for run in snap.runs:
        key = f"collector:{run.collector}"
        failing = run.status == "error"
        cond = f"{key}@warning"
        if ev.held(cond, failing, ev.s.collector_hold_s):
            failing_s = (ev.now - ev.pending[cond]) / 1000
            text = one_line(
                f"collector {run.collector} failing for {failing_s:.0f} s: "
                f"{run.error or 'unknown error'}"
            )
            data = {
                "collector": run.collector,
                "error": run.error,
                "failing_since_ms": ev.pending[cond],
            }
            if key in ev.active:
                ev.active[key] = dataclasses.replace(ev.active[key], message=text, data=data)
            else:
                ev.fire(Alert(key, "collector", "warning", run.collector, text, data))
        elif not failing and key in ev.active:
            ev.resolve(key, f"collector {run.collector} is working again")


# -- events -------------------------------------------------------------------------------


def _pid(data: dict[str, Any]) -> int | None:
    pid = data.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def _proc_name(snap: Snapshot, pid: int | None) -> str:
    if pid is None:
        return "a process"
    for info in snap.processes:
        if info.pid == pid:
            return f"{info.comm}[{pid}]"
    return f"pid {pid}"


def _events(ev: _Eval, snap: Snapshot) -> None:
    finished: set[int] = {g.pid for g in snap.exited}  # pids whose load is over
    # kills first: a crash of the same pid in this tick is then known to be that kill
    for e in sorted(snap.events, key=lambda e: e.kind not in KILL_KINDS):
        pid = _pid(e.data)
        if e.kind == "oom_predicted":
            who = str(pid) if pid is not None else str(e.data.get("model") or "?")
            key = f"oom_predicted:{e.device_id}:{who}:{e.ts_ms}"
            ev.fire(
                Alert(
                    key,
                    "oom_predicted",
                    "critical",
                    e.device_id,
                    one_line(e.message),
                    {**e.data, "device_id": e.device_id, "event_ts_ms": e.ts_ms},
                ),
                event=True,
            )
        elif e.kind in KILL_KINDS or e.kind in ("app_oom", "engine_oom"):
            key = f"{e.kind}:{e.device_id}:{pid if pid is not None else '-'}:{e.ts_ms}"
            ev.fire(
                Alert(
                    key,
                    e.kind,
                    "critical",
                    _subject(e, snap),
                    one_line(e.message),
                    {**e.data, "device_id": e.device_id, "event_ts_ms": e.ts_ms},
                ),
                event=True,
            )
        elif e.kind == "crash":
            _crash(
                ev,
                pid,
                e.data.get("start_ticks"),
                _subject(e, snap),
                one_line(e.message),
                {**e.data, "event_ts_ms": e.ts_ms},
                e.ts_ms,
            )
        elif e.kind == "load_finished":
            _surprise(ev, snap, e)
        elif e.kind == "daemon_started" and e.data.get("unclean") is True:
            key = f"unclean_restart:{e.ts_ms}"
            new_pid = _pid(e.data)
            text = (
                "daemon restarted after an unclean stop"
                + (f" (new pid {new_pid})" if new_pid is not None else "")
                + ("; samples of the time it was down are missing")
            )
            ev.fire(
                Alert(key, "unclean_restart", "warning", "daemon", text, dict(e.data)), event=True
            )
        if e.kind in ("load_finished", "crash", "process_exit") and pid is not None:
            finished.add(pid)
    for gone in snap.exited:
        # monitor/exits.py: crashes, OOM kills and engine OOMs alert; exits and stops
        # (a llama-swap swap, during load or not) never do
        cause, _, how = classify_legacy(gone)
        if cause in ALERT_CAUSES:
            name = f"{gone.comm}[{gone.pid}]" if gone.comm else _proc_name(snap, gone.pid)
            _crash(
                ev,
                gone.pid,
                gone.start_ticks,
                name,
                f"{name} {how}",
                {
                    "pid": gone.pid,
                    "start_ticks": gone.start_ticks,
                    "how": how,
                    "cause": cause,
                    "exit_code": gone.exit_code,
                    "exit_signal": gone.exit_signal,
                    "last_seen_ms": gone.last_seen_ms,
                },
                gone.last_seen_ms,
            )
    for key, alert in list(ev.active.items()):
        if alert.rule == "oom_predicted" and _pid(alert.data) in finished:
            ev.resolve(key)


def _subject(e: DeviceEvent, snap: Snapshot) -> str:
    pid = _pid(e.data)
    if pid is not None:
        comm = e.data.get("comm")
        return f"{comm}[{pid}]" if isinstance(comm, str) and comm else _proc_name(snap, pid)
    unit = e.data.get("unit") or e.data.get("source")
    return str(unit) if unit else e.device_id


def _crash(
    ev: _Eval,
    pid: int | None,
    start_ticks: Any,
    subject: str,
    message: str,
    data: dict[str, Any],
    ts_ms: int,
) -> None:
    """One crash alert per process (the store's ``crash`` event and the tick's exit record
    are the same crash); none when the kill that caused it already alerted."""
    if pid is None:
        key = f"crash:{subject}:{ts_ms}"
    else:
        key = f"crash:{pid}:{start_ticks if isinstance(start_ticks, int) else '-'}"
        for seen_key, fired in ev.seen.items():
            parts = seen_key.split(":")
            same_kill = parts[0] in KILL_KINDS and parts[-2] == str(pid)
            # an engine OOM exit is the engine's out-of-memory line that already alerted
            same_oom = parts[0] in ("app_oom", "engine_oom") and data.get("cause") == "engine_oom"
            if (
                (same_kill or same_oom)
                and parts[-1].isdigit()
                and (abs(int(parts[-1]) - ts_ms) <= KILL_MATCH_MS)
            ):
                ev.seen.setdefault(key, fired)
                return
    ev.fire(Alert(key, "crash", "critical", subject, message, data), event=True)


def _surprise(ev: _Eval, snap: Snapshot, e: DeviceEvent) -> None:
    pid = _pid(e.data)
    name = _proc_name(snap, pid)
    tol = Tolerance(ev.s.surprise_pct, int(ev.s.surprise_min_mib * 1024 * 1024))
    for field_name, measured in sorted(e.data.items()):
        if not field_name.startswith("measured_") or not isinstance(measured, int):
            continue
        device_id = field_name[len("measured_") :]
        estimate = e.data.get(f"estimate_{device_id}")
        if not isinstance(estimate, int) or estimate <= 0 or not is_over(measured, estimate, tol):
            continue
        over = 100.0 * (measured - estimate) / estimate
        key = f"surprise:{device_id}:{pid if pid is not None else '-'}:{e.ts_ms}"
        text = (
            f"memory surprise: {name} uses {gib(measured)} on {device_id}, "
            f"{gib(measured - estimate)} ({over:.0f}%) more than the "
            f"{gib(estimate)} estimated"
        )
        ev.fire(
            Alert(
                key,
                "surprise",
                "warning",
                device_id,
                text,
                {
                    "pid": pid,
                    "device_id": device_id,
                    "measured_bytes": measured,
                    "estimate_bytes": estimate,
                    "event_ts_ms": e.ts_ms,
                },
            ),
            event=True,
        )


def _expire(ev: _Eval) -> None:
    """Event alerts resolve themselves ``EVENT_TTL_MS`` after they fired."""
    for key, alert in list(ev.active.items()):
        if alert.rule in ("pressure", "collector", "oom_soon"):
            continue
        if ev.now - ev.since.get(key, ev.now) >= EVENT_TTL_MS:
            ev.resolve(key)
