"""The post-mortem as typed data: the ``vramscope.postmortem/1`` document.

``monitor/analysis/postmortem.py`` assembles a :class:`PostMortem` from the database;
``PostMortem.to_json`` is the JSON document ``vramscope postmortem --json`` prints (the
same keys in the same order as before the model existed). ``PostMortem.from_json`` reads
such a document back from anywhere (a saved file, an older version, hostile input) and is
the one place it is validated: a field missing, null, of the wrong type or not finite
reads as None (unknown), a list of the wrong type as empty, a timeline point that is not
a pair of numbers is dropped, points are sorted by time and negative bytes read as 0. The
renderers (monitor/report/postmortem/) read only these typed fields. Strings are kept as
given: the renderers make them safe for a terminal or HTML.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEMA = "vramscope.postmortem/1"

Point = tuple[float, float]  # (epoch ms, bytes)


def _num(x: Any) -> float | None:
    """A finite JSON number (never a bool), else None."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _int(x: Any) -> int | None:
    v = _num(x)
    return None if v is None else int(v)


def _text(x: Any) -> str | None:
    """A string as given; a number as written; anything else unknown."""
    if isinstance(x, str):
        return x
    return None if _num(x) is None else str(x)


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _bytes_by_key(x: Any) -> dict[str, float | None]:
    """A ``{device id: bytes}`` map; a value that is not a number is None."""
    return {str(k): _num(v) for k, v in _dict(x).items()}


def _points(raw: Any) -> tuple[Point, ...]:
    """Valid (t_ms, bytes) pairs, sorted by time; negative values read as 0."""
    out = []
    for p in _list(raw):
        if isinstance(p, list | tuple) and len(p) >= 2:
            t, v = _num(p[0]), _num(p[1])
            if t is not None and v is not None:
                out.append((t, max(v, 0)))
    out.sort(key=lambda tv: tv[0])
    return tuple(out)


def _points_json(points: tuple[Point, ...]) -> list[list[float]]:
    return [[t, v] for t, v in points]


@dataclass(frozen=True, slots=True)
class CrashEvent:
    """The crash, OOM-kill or exit event the post-mortem is about (monitor/store events)."""

    ts_ms: float | None
    kind: str | None
    message: str | None
    data: Mapping[str, Any]  # the event's own JSON data, as recorded

    def to_json(self) -> dict[str, Any]:
        return {"ts_ms": self.ts_ms, "kind": self.kind, "message": self.message, "data": self.data}

    @classmethod
    def from_json(cls, raw: Any) -> CrashEvent | None:
        d = _dict(raw)
        if not d:
            return None
        return cls(
            _num(d.get("ts_ms")),
            _text(d.get("kind")),
            _text(d.get("message")),
            _dict(d.get("data")),
        )


@dataclass(frozen=True, slots=True)
class KernelRecord:
    """The kernel OOM record's figures (monitor/logs/kernel.py): the victim's anon / file /
    shmem RSS at the kill, the constraint, its cgroup and that cgroup's limit."""

    anon_rss_bytes: float | None
    file_rss_bytes: float | None
    shmem_rss_bytes: float | None
    constraint: str | None
    memcg: str | None
    memcg_limit_bytes: float | None
    ts_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "anon_rss_bytes": self.anon_rss_bytes,
            "file_rss_bytes": self.file_rss_bytes,
            "shmem_rss_bytes": self.shmem_rss_bytes,
            "constraint": self.constraint,
            "memcg": self.memcg,
            "memcg_limit_bytes": self.memcg_limit_bytes,
            "ts_ms": self.ts_ms,
        }

    @classmethod
    def from_json(cls, raw: Any) -> KernelRecord | None:
        d = _dict(raw)
        if not d:
            return None
        return cls(
            _num(d.get("anon_rss_bytes")),
            _num(d.get("file_rss_bytes")),
            _num(d.get("shmem_rss_bytes")),
            _text(d.get("constraint")),
            _text(d.get("memcg")),
            _num(d.get("memcg_limit_bytes")),
            _num(d.get("ts_ms")),
        )


@dataclass(frozen=True, slots=True)
class MeasuredAtDeath:
    """What the victim held at its last tick by the one definition every view uses
    (monitor/analysis/measured.py), with that tick's time."""

    ts_ms: float | None
    total_bytes: float | None
    device_bytes: float | None
    host_anon_bytes: float | None
    host_file_bytes: float | None
    unknown_device_ids: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "ts_ms": self.ts_ms,
            "total_bytes": self.total_bytes,
            "device_bytes": self.device_bytes,
            "host_anon_bytes": self.host_anon_bytes,
            "host_file_bytes": self.host_file_bytes,
            "unknown_device_ids": list(self.unknown_device_ids),
        }

    @classmethod
    def from_json(cls, raw: Any) -> MeasuredAtDeath | None:
        d = _dict(raw)
        if not d:
            return None
        return cls(
            _num(d.get("ts_ms")),
            _num(d.get("total_bytes")),
            _num(d.get("device_bytes")),
            _num(d.get("host_anon_bytes")),
            _num(d.get("host_file_bytes")),
            tuple(str(x) for x in _list(d.get("unknown_device_ids"))),
        )


@dataclass(frozen=True, slots=True)
class Victim:
    """The process that died: who it was, how it ended and what it held (bytes per
    device: at death, last nonzero sample, peak)."""

    pid: int | None
    comm: str | None
    argv: tuple[str, ...]
    engine: str | None
    started_at_ms: float | None
    exited_ms: float | None
    how: str | None
    exit_cause: str | None
    exit_code: int | None
    exit_signal: int | None
    at_death: Mapping[str, float | None]
    last_measured: Mapping[str, float | None]
    peak: Mapping[str, float | None]
    kernel: KernelRecord | None
    measured: MeasuredAtDeath | None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "comm": self.comm,
            "argv": list(self.argv),
            "engine": self.engine,
            "started_at_ms": self.started_at_ms,
            "exited_ms": self.exited_ms,
            "how": self.how,
            "exit_cause": self.exit_cause,
            "exit_code": self.exit_code,
            "exit_signal": self.exit_signal,
            "at_death": dict(self.at_death),
            "last_measured": dict(self.last_measured),
            "peak": dict(self.peak),
            "kernel": self.kernel.to_json() if self.kernel else None,
            "measured": self.measured.to_json() if self.measured else None,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Victim:
        d = _dict(raw)
        argv = d.get("argv")
        args = (argv,) if isinstance(argv, str) and argv else _list(argv)
        return cls(
            _int(d.get("pid")),
            _text(d.get("comm")),
            tuple(a if isinstance(a, str) else str(a) for a in args),
            _text(d.get("engine")),
            _num(d.get("started_at_ms")),
            _num(d.get("exited_ms")),
            _text(d.get("how")),
            _text(d.get("exit_cause")),
            _int(d.get("exit_code")),
            _int(d.get("exit_signal")),
            _bytes_by_key(d.get("at_death")),
            _bytes_by_key(d.get("last_measured")),
            _bytes_by_key(d.get("peak")),
            KernelRecord.from_json(d.get("kernel")),
            MeasuredAtDeath.from_json(d.get("measured")),
        )


@dataclass(frozen=True, slots=True)
class DeviceTimeline:
    """One device's memory in use over the window (store's device samples)."""

    device_id: str | None
    name: str | None
    total_bytes: float | None
    points: tuple[Point, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "device_id": self.device_id,
            "name": self.name,
            "total_bytes": self.total_bytes,
            "points": _points_json(self.points),
        }

    @classmethod
    def from_json(cls, raw: Any) -> DeviceTimeline:
        d = _dict(raw)
        return cls(
            _text(d.get("device_id")),
            _text(d.get("name")),
            _num(d.get("total_bytes")),
            _points(d.get("points")),
        )


@dataclass(frozen=True, slots=True)
class ProcessTimeline:
    """One tracked process's memory on one device over the window: host RSS (anon + file
    + shmem) on ``host``, VRAM + GTT on a GPU."""

    pid: int | None
    comm: str | None
    device_id: str | None
    points: tuple[Point, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "comm": self.comm,
            "device_id": self.device_id,
            "points": _points_json(self.points),
        }

    @classmethod
    def from_json(cls, raw: Any) -> ProcessTimeline:
        d = _dict(raw)
        return cls(
            _int(d.get("pid")),
            _text(d.get("comm")),
            _text(d.get("device_id")),
            _points(d.get("points")),
        )


@dataclass(frozen=True, slots=True)
class Loading:
    """A server that had started loading and not finished when the victim died."""

    pid: int | None
    comm: str | None
    model: str | None
    started_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "comm": self.comm,
            "model": self.model,
            "started_ms": self.started_ms,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Loading:
        d = _dict(raw)
        return cls(
            _int(d.get("pid")),
            _text(d.get("comm")),
            _text(d.get("model")),
            _num(d.get("started_ms")),
        )


@dataclass(frozen=True, slots=True)
class LaunchEstimate:
    """The victim's launch estimate (monitor/estimate) by device, with and without its
    run-time growth, where it came from, and what was measured at death."""

    by_device: Mapping[str, float | None]
    by_device_with_growth: Mapping[str, float | None]
    source: str | None
    measured_at_death: Mapping[str, float | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "by_device": dict(self.by_device),
            "by_device_with_growth": dict(self.by_device_with_growth),
            "source": self.source,
            "measured_at_death": dict(self.measured_at_death),
        }

    @classmethod
    def from_json(cls, raw: Any) -> LaunchEstimate | None:
        d = _dict(raw)
        if not d:
            return None
        return cls(
            _bytes_by_key(d.get("by_device")),
            _bytes_by_key(d.get("by_device_with_growth")),
            _text(d.get("source")),
            _bytes_by_key(d.get("measured_at_death")),
        )


@dataclass(frozen=True, slots=True)
class OtherEvent:
    """Another event of the window (monitor/store events), by time."""

    ts_ms: float | None
    kind: str | None
    message: str | None

    def to_json(self) -> dict[str, Any]:
        return {"ts_ms": self.ts_ms, "kind": self.kind, "message": self.message}

    @classmethod
    def from_json(cls, raw: Any) -> OtherEvent:
        d = _dict(raw)
        return cls(_num(d.get("ts_ms")), _text(d.get("kind")), _text(d.get("message")))


@dataclass(frozen=True, slots=True)
class BudgetMember:
    """One process of the killed cgroup at the kill (monitor/analysis/cgroup_budget.py)."""

    pid: int | None
    name: str | None
    comm: str | None
    anon_bytes: float | None
    file_bytes: float | None
    shmem_bytes: float | None
    gpu_bytes: float | None
    victim: bool

    @classmethod
    def from_json(cls, raw: Any) -> BudgetMember:
        d = _dict(raw)
        return cls(
            _int(d.get("pid")),
            _text(d.get("name")),
            _text(d.get("comm")),
            _num(d.get("anon_bytes")),
            _num(d.get("file_bytes")),
            _num(d.get("shmem_bytes")),
            _num(d.get("gpu_bytes")),
            d.get("victim") is True,
        )


@dataclass(frozen=True, slots=True)
class CgroupBudget:
    """The kill in terms of the killed cgroup's budget: the renderers read its cgroup,
    limit and members; ``document`` is ``Budget.as_dict()`` (cgroup_budget.py), the JSON
    written as is. ``members`` is None when the document has no member list."""

    cgroup: str | None
    limit_bytes: float | None
    members: tuple[BudgetMember, ...] | None
    document: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dict(self.document)

    @classmethod
    def from_json(cls, raw: Any) -> CgroupBudget | None:
        if not isinstance(raw, dict):
            return None
        members = raw.get("members")
        return cls(
            _text(raw.get("cgroup")),
            _num(raw.get("limit_bytes")),
            tuple(BudgetMember.from_json(m) for m in members)
            if isinstance(members, list)
            else None,
            raw,
        )


@dataclass(frozen=True, slots=True)
class PostMortem:
    """One crash, OOM kill or exit and its evidence: the ``vramscope.postmortem/1``
    document (monitor/analysis/postmortem.py assembles it from the database)."""

    schema: str | None
    title: str | None
    event: CrashEvent | None
    victim: Victim
    window_start_ms: float | None
    window_end_ms: float | None
    devices: tuple[DeviceTimeline, ...]
    processes: tuple[ProcessTimeline, ...]
    loading: tuple[Loading, ...]
    estimate: LaunchEstimate | None
    ceiling: Mapping[str, float | None]  # the limit each device (or memcg) ran under
    cause: str | None
    fix: str | None
    cgroup_budget: CgroupBudget | None
    other_events: tuple[OtherEvent, ...]
    other_events_omitted: int | None
    other_events_omitted_kinds: Mapping[str, int | None]

    @property
    def death_ms(self) -> float | None:
        """When it died: the event's time, else the victim's exit time."""
        if self.event is not None and self.event.ts_ms is not None:
            return self.event.ts_ms
        return self.victim.exited_ms

    def to_json(self) -> dict[str, Any]:
        """The JSON document (``--json``), keys in the order it has always had."""
        return {
            "schema": self.schema,
            "title": self.title,
            "event": self.event.to_json() if self.event else None,
            "victim": self.victim.to_json(),
            "window": {"start_ms": self.window_start_ms, "end_ms": self.window_end_ms},
            "timeline": {
                "devices": [d.to_json() for d in self.devices],
                "processes": [p.to_json() for p in self.processes],
            },
            "loading": [x.to_json() for x in self.loading],
            "estimate": self.estimate.to_json() if self.estimate else None,
            "ceiling": dict(self.ceiling),
            "cause": self.cause,
            "fix": self.fix,
            "cgroup_budget": self.cgroup_budget.to_json() if self.cgroup_budget else None,
            "other_events": [e.to_json() for e in self.other_events],
            "other_events_omitted": self.other_events_omitted,
            "other_events_omitted_kinds": dict(self.other_events_omitted_kinds),
        }

    @classmethod
    def from_json(cls, raw: Any) -> PostMortem:
        """Any JSON value read as a post-mortem (see the module docstring); never raises."""
        d = _dict(raw)
        window, timeline = _dict(d.get("window")), _dict(d.get("timeline"))
        return cls(
            _text(d.get("schema")),
            _text(d.get("title")),
            CrashEvent.from_json(d.get("event")),
            Victim.from_json(d.get("victim")),
            _num(window.get("start_ms")),
            _num(window.get("end_ms")),
            tuple(DeviceTimeline.from_json(x) for x in _list(timeline.get("devices"))),
            tuple(ProcessTimeline.from_json(x) for x in _list(timeline.get("processes"))),
            tuple(Loading.from_json(x) for x in _list(d.get("loading"))),
            LaunchEstimate.from_json(d.get("estimate")),
            _bytes_by_key(d.get("ceiling")),
            _text(d.get("cause")),
            _text(d.get("fix")),
            CgroupBudget.from_json(d.get("cgroup_budget")),
            tuple(OtherEvent.from_json(x) for x in _list(d.get("other_events"))),
            _int(d.get("other_events_omitted")),
            {str(k): _int(v) for k, v in _dict(d.get("other_events_omitted_kinds")).items()},
        )


def as_postmortem(doc: PostMortem | Any) -> PostMortem:
    """``doc`` itself when typed, else read with :meth:`PostMortem.from_json`."""
    return doc if isinstance(doc, PostMortem) else PostMortem.from_json(doc)
