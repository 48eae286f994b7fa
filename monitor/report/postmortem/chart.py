"""What the post-mortem's chart draws (monitor/report/postmortem/svg.py draws it): the
victim's device, the other processes there as stacked bands, the victim, the device's
total in use and the limit the victim ran under, all read from the typed post-mortem."""

from __future__ import annotations

import math

from monitor.analysis.postmortem_doc import PostMortem
from monitor.report.postmortem.common import Point, Series, clean, pid_text, text

MAX_SVG_POINTS = 600  # per series, after downsampling

TOP_BANDS = 5
LIMIT_OFF_SCALE = 3.0  # a limit above 3x the data's peak is written, not drawn to scale
LIMIT_COLOR = "#000000"


class Chart:
    """What the chart draws, for one device (the victim's): the other processes on it as
    stacked bands (largest peak at the bottom, the rest summed into "others"), the victim as
    a line over them, the device's measured total and the limit the victim ran under."""

    __slots__ = (
        "device_id",
        "times",
        "bands",
        "victim",
        "device",
        "limit_bytes",
        "limit_label",
        "not_charted",
    )

    def __init__(self) -> None:
        self.device_id: str | None = None
        self.times: list[float] = []
        self.bands: list[tuple[Series, list[float]]] = []  # series, cumulative top per time
        self.victim: Series | None = None
        self.device: Series | None = None
        self.limit_bytes: float | None = None
        self.limit_label = ""
        self.not_charted: list[str] = []


def _peak(s: Series) -> float:
    return max((v for _, v in s.points), default=0.0)


def _aligned(points: list[Point], times: list[float]) -> list[float]:
    """``points`` read at each of ``times`` (the union of every band's sample times): inside
    the series' own span the last value seen carries forward; more than one of its own
    sampling steps (the median gap) before its first or after its last sample, it is 0.
    Carrying, not 0, because processes are sampled a few milliseconds apart in the same
    tick: a missing point there means "not sampled at this instant", not "held nothing", and
    zeros would draw a saw-tooth of false drops. Well outside its span the process had not
    started or had exited, so it held nothing."""
    if not points:
        return [0.0] * len(times)
    gaps = sorted(b[0] - a[0] for a, b in zip(points, points[1:], strict=False))
    step = gaps[len(gaps) // 2] if gaps else 0.0
    first, last = points[0][0] - step, points[-1][0] + step
    out: list[float] = []
    i, cur = 0, points[0][1]
    for t in times:
        while i < len(points) and points[i][0] <= t:
            cur = points[i][1]
            i += 1
        out.append(cur if first <= t <= last else 0.0)
    return out


def thin(times: list[float], tops: list[float], limit: int = MAX_SVG_POINTS) -> list[int]:
    """Indexes of at most ``limit`` of ``times``: per bucket, where the stack is lowest and
    highest, so every band is thinned at the same instants and its peaks survive."""
    if len(times) <= limit:
        return list(range(len(times)))
    buckets = max(limit // 2, 1)
    size = math.ceil(len(times) / buckets)
    keep: list[int] = []
    for i in range(0, len(times), size):
        idx = range(i, min(i + size, len(times)))
        keep.extend(sorted({min(idx, key=lambda j: tops[j]), max(idx, key=lambda j: tops[j])}))
    return keep


def _member_pids(pm: PostMortem) -> set[int] | None:
    """The pids of the killed cgroup's members; None when the kill was not a cgroup's."""
    budget = pm.cgroup_budget
    if budget is None or budget.members is None:
        return None
    return {m.pid for m in budget.members if m.pid is not None}


def _processes(pm: PostMortem, xr: tuple[float, float] | None) -> list[tuple[str, Series]]:
    """Every process's series in the window, with its device ("?" when unknown)."""
    procs: list[tuple[str, Series]] = []
    for i, p in enumerate(pm.processes):
        is_victim = p.pid is not None and p.pid == pm.victim.pid
        label = f"pid {pid_text(p.pid)} {text(p.comm)}" + (" (victim)" if is_victim else "")
        pts = [(t, v) for t, v in p.points if xr and xr[0] <= t <= xr[1]]
        s = Series(f"proc-{i}", label, "process", is_victim, pts)
        s.pid = p.pid
        procs.append((p.device_id if p.device_id is not None else "?", s))
    return procs


def _device_of(pm: PostMortem, procs: list[tuple[str, Series]]) -> str | None:
    """The victim's device: where it held the most; host when the kernel killed it."""
    mine = [(d, s) for d, s in procs if s.victim and s.points]
    if mine:
        return max(mine, key=lambda ds: _peak(ds[1]))[0]
    if pm.victim.kernel is not None:
        return "host"
    if any(s.points for _, s in procs):
        return max(procs, key=lambda ds: _peak(ds[1]))[0]
    return None


def _device_line(pm: PostMortem, chart: Chart, xr: tuple[float, float] | None) -> None:
    for i, d in enumerate(pm.devices):
        if d.device_id == chart.device_id:
            pts = [(t, v) for t, v in d.points if xr and xr[0] <= t <= xr[1]]
            chart.device = Series(
                f"dev-{i}",
                f"{clean(chart.device_id)} total in use" + (f" ({text(d.name)})" if d.name else ""),
                "device",
                False,
                pts,
                d.total_bytes,
            )
            return


def _limit(pm: PostMortem, chart: Chart) -> None:
    """The victim's cgroup limit (the kernel record's, else the one sampled on the killed
    cgroup) on host memory; else the device's capacity; else its ceiling."""
    kernel, budget = pm.victim.kernel, pm.cgroup_budget
    memcg_limit = kernel.memcg_limit_bytes if kernel else None
    memcg = kernel.memcg if kernel else None
    if not memcg_limit:  # the record gave none: the limit sampled on the killed cgroup
        memcg_limit = budget.limit_bytes if budget else None
        memcg = budget.cgroup if budget else None
    ceiling = pm.ceiling.get(chart.device_id) if chart.device_id is not None else None
    if chart.device_id == "host" and memcg_limit:
        chart.limit_bytes = memcg_limit
        chart.limit_label = f"cgroup {text(memcg)} limit"
    elif chart.device is not None and chart.device.total:
        chart.limit_bytes = chart.device.total
        chart.limit_label = f"{clean(chart.device_id)} capacity"
    elif ceiling:
        chart.limit_bytes = ceiling
        chart.limit_label = f"{clean(chart.device_id)} ceiling"


def chart_of(pm: PostMortem, xr: tuple[float, float] | None) -> Chart:
    """The chart of the victim's device over ``xr``."""
    chart = Chart()
    procs = _processes(pm, xr)
    chart.device_id = _device_of(pm, procs)
    members = _member_pids(pm)
    if members is not None and chart.device_id == "host":  # the killed cgroup's budget only
        procs = [(d, s) for d, s in procs if d != "host" or s.victim or s.pid in members]
    on_dev = [s for d, s in procs if d == chart.device_id]
    chart.not_charted = sorted({clean(d) for d, s in procs if d != chart.device_id and s.points})
    victims = [s for s in on_dev if s.victim and s.points]
    chart.victim = max(victims, key=_peak) if victims else None
    if chart.victim is not None:
        chart.victim.label += f" on {clean(chart.device_id)}"
    rest = sorted((s for s in on_dev if not s.victim and s.points), key=lambda s: -_peak(s))
    _device_line(pm, chart, xr)
    _limit(pm, chart)
    _stack(chart, rest)
    return chart


def _stack(chart: Chart, rest: list[Series]) -> None:
    """The others as bands: the top ``TOP_BANDS`` by peak, the rest summed as "others"."""
    shown, folded = rest[:TOP_BANDS], rest[TOP_BANDS:]
    layers = shown + (
        [Series("proc-others", f"others ({len(folded)} processes, summed)", "process", False, [])]
        if folded
        else []
    )
    chart.times = sorted({t for s in rest for t, _ in s.points})
    if not chart.times:
        return
    values = [_aligned(s.points, chart.times) for s in shown]
    if folded:
        parts = [_aligned(s.points, chart.times) for s in folded]
        values.append([sum(col) for col in zip(*parts, strict=True)])
    cum = [0.0] * len(chart.times)
    for s, vals in zip(layers, values, strict=True):
        cum = [c + v for c, v in zip(cum, vals, strict=True)]
        chart.bands.append((s, cum))
