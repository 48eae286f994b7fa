"""The fleet overview from a Prometheus server that scrapes the daemons (``vramscope tui
--prometheus URL``): the boxes it knows (its scrape targets), their devices, models,
headroom, time to OOM and firing alerts, as the same :class:`BoxRow` the ``--remote``
fleet draws.

Every metric name and every PromQL expression vramscope sends to Prometheus is in this
module (:data:`QUERIES`), so that a rename in monitor/http/metrics.py is one edit here.

Prometheus is asked through its HTTP API (``/api/v1/targets``, ``/api/v1/query``,
``/api/v1/alerts``) with the daemon client's bounded reads (monitor/http/client.py: at
most ``REMOTE_MAX_BYTES`` per answer, a connect and a total deadline, no proxies). Its
answers are untrusted: each is checked for the documented shape, strings are cut and made
terminal-safe, numbers must be finite.

Which targets are boxes: those of a scrape job that has had a
``vramscope_last_tick_timestamp_seconds`` series within the last hour (so a box whose
target is down now is still listed, as down, beside its job's other boxes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from monitor.analysis.fleet import BoxRow
from monitor.errors import VramscopeError
from monitor.textsafe import terminal_safe
from monitor.units import GIB, MIB

MAX_BOXES = 1000  # targets listed; more is not a fleet this view can show
MAX_TEXT = 200  # characters of any string taken from an answer
QUERY_TIMEOUT_S = 5.0

QUERIES = {
    "jobs": "count by (job) (last_over_time(vramscope_last_tick_timestamp_seconds[1h]))",
    "total": "vramscope_device_memory_total_bytes",
    "used": "vramscope_device_memory_used_bytes",
    "free": "vramscope_device_memory_free_bytes",
    "models": 'count by (job, instance) (vramscope_process_measured_bytes{model!=""})',
    "oom": "min by (job, instance, pool) (vramscope_time_to_oom_seconds)",
}
"""name -> the instant query; each answers a vector labelled with ``job`` and
``instance`` (the scrape target) and, for devices, ``device`` and ``name``."""

METRICS_PATH = "/metrics"  # a daemon's scrape path; the rest of the URL is its API


class PrometheusError(VramscopeError):
    """Prometheus cannot be read, or did not answer like Prometheus."""


Sample = tuple[dict[str, str], float]  # (labels, value) of one vector element
Box = tuple[str, str]  # (job, instance): one scrape target


@dataclass(frozen=True, slots=True)
class Answers:
    """What Prometheus said, parsed: the input of :func:`fleet_rows` (pure)."""

    targets: list[dict[str, Any]]  # /api/v1/targets data.activeTargets
    vectors: dict[str, list[Sample]]  # QUERIES name -> its vector
    alerts: list[dict[str, Any]] = field(default_factory=list)  # /api/v1/alerts data.alerts


def _text(value: Any) -> str:
    return terminal_safe(str(value))[:MAX_TEXT]


def _data(doc: Any, where: str) -> Any:
    """``data`` of a Prometheus API answer (``{"status": "success", "data": ...}``)."""
    if not isinstance(doc, dict) or doc.get("status") != "success" or "data" not in doc:
        error = doc.get("error") if isinstance(doc, dict) else None
        detail = f": {_text(error)}" if error else ""
        raise PrometheusError(f"{where}: not a Prometheus API answer{detail}")
    return doc["data"]


def parse_vector(doc: Any, where: str) -> list[Sample]:
    """An instant query's vector: (labels, finite value) pairs; other elements dropped."""
    data = _data(doc, where)
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PrometheusError(f"{where}: not an instant vector")
    out: list[Sample] = []
    for element in data.get("result") or []:
        if not isinstance(element, dict) or not isinstance(element.get("metric"), dict):
            continue
        value = element.get("value")
        try:
            number = float(value[1]) if isinstance(value, list) and len(value) == 2 else math.nan
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            labels = {_text(k): _text(v) for k, v in element["metric"].items()}
            out.append((labels, number))
    return out


def parse_targets(doc: Any) -> list[dict[str, Any]]:
    data = _data(doc, "/api/v1/targets")
    targets = data.get("activeTargets") if isinstance(data, dict) else None
    if not isinstance(targets, list):
        raise PrometheusError("/api/v1/targets: no activeTargets list")
    return [t for t in targets[: MAX_BOXES * 4] if isinstance(t, dict)]


def parse_alerts(doc: Any) -> list[dict[str, Any]]:
    data = _data(doc, "/api/v1/alerts")
    alerts = data.get("alerts") if isinstance(data, dict) else None
    if not isinstance(alerts, list):
        raise PrometheusError("/api/v1/alerts: no alerts list")
    return [a for a in alerts if isinstance(a, dict)]


def box_url(scrape_url: str) -> str | None:
    """The daemon's API URL from its scrape URL (``http://box:9835/metrics`` ->
    ``http://box:9835``); None: not an http(s) URL with a host (that target is skipped)."""
    parts = urlsplit(scrape_url)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        return None
    path = parts.path.removesuffix(METRICS_PATH).rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path}"


def _short(n: float) -> str:
    """The TUI's short size (tui/format.py ``size``): ``22.1G``, ``512M``."""
    return f"{n / GIB:.1f}G" if abs(n) >= GIB else f"{n / MIB:.0f}M"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _by_box(samples: list[Sample]) -> dict[Box, list[Sample]]:
    out: dict[Box, list[Sample]] = {}
    for labels, value in samples:
        out.setdefault((labels.get("job", ""), labels.get("instance", "")), []).append(
            (labels, value)
        )
    return out


DeviceNamer = Callable[[str, str | None, int | None], str]
"""(device id, name label, GPU index or None for the host) -> the name shown: the TUI
passes its own (tui/format.py ``short_device_name``) so both fleets name devices alike."""


def plain_name(device_id: str, name: str | None, gpu_index: int | None) -> str:
    return "host RAM" if gpu_index is None else f"GPU{gpu_index} {name or device_id}"


def _devices(
    total: list[Sample], used: list[Sample], free: list[Sample], namer: DeviceNamer
) -> tuple[str, Any]:
    """("GPU0 RTX 4090 20.2G/24.0G, host RAM 34.0G/64.0G", (headroom, device) or None):
    the headroom is the device's free bytes as the daemon exports them, else total - used."""
    used_of = {s[0].get("device"): s[1] for s in used}
    free_of = {s[0].get("device"): s[1] for s in free}
    ordered = sorted(total, key=lambda s: (s[0].get("device") == "host", s[0].get("device", "")))
    parts, tightest, gpu = [], None, 0
    for labels, capacity in ordered:
        device = labels.get("device", "?")
        name = namer(device, labels.get("name"), None if device == "host" else gpu)
        gpu += device != "host"
        used_bytes = used_of.get(device)
        parts.append(f"{name} {_short(used_bytes) if used_bytes is not None else '?'}/"
                     f"{_short(capacity)}")  # fmt: skip
        room = free_of.get(device)
        if room is None and used_bytes is not None:
            room = capacity - used_bytes
        if room is not None and (tightest is None or room < tightest[0]):
            tightest = (int(room), name)
    return ", ".join(parts), tightest


def fleet_rows(answers: Answers, namer: DeviceNamer = plain_name) -> list[BoxRow]:
    """One row per scrape target of a vramscope job (in Prometheus's order): a target
    that is down is a row whose error says so, with Prometheus's last scrape error."""
    jobs = {labels.get("job") for labels, _ in answers.vectors.get("jobs", [])}
    per = {name: _by_box(answers.vectors.get(name, [])) for name in QUERIES}
    firing: dict[Box, list[str]] = {}
    for alert in answers.alerts:
        labels = _dict(alert.get("labels"))
        if alert.get("state") == "firing" and labels.get("instance"):
            notes = _dict(alert.get("annotations"))
            text = notes.get("summary") or labels.get("alertname") or "alert"
            box = (str(labels.get("job", "")), str(labels["instance"]))
            firing.setdefault(box, []).append(_text(text))
    rows: list[BoxRow] = []
    for target in answers.targets:
        labels = _dict(target.get("labels"))
        job, instance = str(labels.get("job", "")), str(labels.get("instance", ""))
        if job not in jobs or len(rows) >= MAX_BOXES:
            continue
        url = box_url(str(target.get("scrapeUrl") or f"http://{instance}"))
        if url is None or url != _text(url):
            continue
        if target.get("health") != "up":
            error = _text(target.get("lastError") or "no scrape yet")
            rows.append(BoxRow(url, error=f"Prometheus target down: {error}"))
            continue
        box = (job, instance)
        devices, tightest = _devices(per["total"].get(box, []), per["used"].get(box, []),
                                     per["free"].get(box, []), namer)  # fmt: skip
        ooms = sorted((v, lb.get("pool", "?")) for lb, v in per["oom"].get(box, []))
        models = per["models"].get(box, [])
        rows.append(
            BoxRow(
                url,
                devices,
                int(models[0][1]) if models else 0,
                tightest[0] if tightest else None,
                tightest[1] if tightest else None,
                tuple(firing.get(box, ())),
                time_to_oom_s=ooms[0][0] if ooms else None,
                oom_pool=ooms[0][1] if ooms else None,
            )
        )
    return rows


class PrometheusFleet:
    """The fleet as one Prometheus server knows it; :meth:`rows` asks it afresh."""

    def __init__(
        self, url: str, timeout_s: float = QUERY_TIMEOUT_S, namer: DeviceNamer = plain_name
    ) -> None:
        from monitor.http.client import DaemonClient, RemoteError

        try:
            self._client = DaemonClient(url, None, timeout_s)
        except RemoteError:
            raise PrometheusError(
                f"--prometheus {url}: expected http://HOST:PORT, e.g. http://prometheus:9090"
            ) from None
        self.url = self._client.url
        self.namer = namer

    def _get(self, path: str) -> Any:
        from monitor.http.client import RemoteError

        try:
            return self._client.get(path)
        except RemoteError as exc:
            message = str(exc).replace("the vramscope daemon", "Prometheus")
            raise PrometheusError(message.replace("; not a vramscope daemon?", "")) from None

    def answers(self) -> Answers:
        """Ask: the targets, each query of :data:`QUERIES`, the alerts."""
        targets = parse_targets(self._get("/api/v1/targets?state=active"))
        vectors = {
            name: parse_vector(self._get(f"/api/v1/query?query={quote(q)}"), name)
            for name, q in QUERIES.items()
        }
        return Answers(targets, vectors, parse_alerts(self._get("/api/v1/alerts")))

    def rows(self) -> list[BoxRow]:
        return fleet_rows(self.answers(), self.namer)
