"""Place a launch on a fleet: each box's own daemon judges it (``POST /api/v1/predict``
against its latest tick, its model files, its llama-swap), and this ranks the answers.

The answers are untrusted (another box's daemon, or whatever answers at that URL): each is
read through :func:`box_answer`, which keeps only well-formed fields (a verdict from the
known set, integer byte counts) and turns anything else into that box's one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitor.textsafe import terminal_safe

VERDICTS = ("fits", "tight", "thrash", "oom")
MAX_UNLOADS = 16  # names of what llama-swap would unload, per box
MAX_TEXT = 200  # characters of any string taken from an answer


@dataclass(frozen=True, slots=True)
class BoxAnswer:
    """One box's judgement of the launch (``error`` set: no judgement from it)."""

    url: str
    verdict: str | None = None  # fits / tight / thrash / oom, at load
    grown_verdict: str | None = None  # once the caches fill; None when nothing grows
    headroom_bytes: int | None = None  # the smallest slack after the margin, any device
    binding_device: str | None = None  # the device with that smallest slack
    would_unload: tuple[str, ...] = ()
    error: str | None = None
    document: dict[str, Any] | None = None  # the daemon's vramscope.predict/1, as sent

    @property
    def fits(self) -> bool:
        """Fits at load and once its caches fill (margin kept)."""
        return self.verdict == "fits" and self.grown_verdict in (None, "fits")

    @property
    def fits_at_load(self) -> bool:
        return self.verdict == "fits"


def _text(value: Any) -> str:
    return terminal_safe(str(value))[:MAX_TEXT]


def box_answer(url: str, status: int, doc: Any) -> BoxAnswer:
    """A daemon's answer (HTTP status and JSON) as a :class:`BoxAnswer`."""
    if not isinstance(doc, dict):
        return BoxAnswer(url, error="the answer is not a JSON object; not a vramscope daemon?")
    if status != 200:
        return BoxAnswer(url, error=_text(doc.get("error") or f"HTTP {status}"))
    if doc.get("schema") != "vramscope.predict/1" or doc.get("verdict") not in VERDICTS:
        return BoxAnswer(url, error="not a vramscope.predict/1 answer; not a vramscope daemon?")
    grown = doc.get("grown")
    grown_verdict = grown.get("verdict") if isinstance(grown, dict) else None
    if grown_verdict not in (None, *VERDICTS):
        grown_verdict = None
    slack: list[tuple[int, str]] = []
    for d in doc.get("devices") or []:
        if isinstance(d, dict) and type(d.get("slack_bytes")) is int:
            slack.append((d["slack_bytes"], _text(d.get("device_id", "?"))))
    tightest = min(slack) if slack else None
    unloads = doc.get("would_unload")
    names = tuple(_text(n) for n in unloads[:MAX_UNLOADS]) if isinstance(unloads, list) else ()
    return BoxAnswer(
        url,
        verdict=doc["verdict"],
        grown_verdict=grown_verdict,
        headroom_bytes=tightest[0] if tightest else None,
        binding_device=tightest[1] if tightest else None,
        would_unload=names,
        document=doc,
    )


def ranked(answers: list[BoxAnswer]) -> list[BoxAnswer]:
    """Boxes where it fits (once full too) first, most headroom first; then those where
    it fits at load only, then tight, then where it thrashes, then OOM; boxes that gave no
    answer last."""

    def key(a: BoxAnswer) -> tuple[int, int]:
        if a.error is not None:
            return (5, 0)
        order = {"tight": 2, "thrash": 3}.get(a.verdict or "", 4)
        order = 0 if a.fits else 1 if a.fits_at_load else order
        return (order, -(a.headroom_bytes or 0))

    return sorted(answers, key=key)


EXIT_FITS, EXIT_OOM, EXIT_ERROR, EXIT_GROWS_OOM = 0, 1, 2, 3


def exit_code(answers: list[BoxAnswer]) -> int:
    """0: fits on a box (once full too); 3: fits at load on a box, nowhere once full;
    1: no box that answered has room; 2: no box answered."""
    judged = [a for a in answers if a.error is None]
    if not judged:
        return EXIT_ERROR
    if any(a.fits for a in judged):
        return EXIT_FITS
    if any(a.fits_at_load for a in judged):
        return EXIT_GROWS_OOM
    return EXIT_OOM


@dataclass(frozen=True, slots=True)
class BoxRow:
    """One box of the fleet overview (``error`` set: unreachable or not a vramscope daemon)."""

    url: str
    devices: str = ""  # "GPU0 RTX 4090 20.2/24.0G, host RAM 34/64G"
    models: int = 0
    headroom_bytes: int | None = None  # the smallest room left on any device
    headroom_device: str | None = None
    active_alerts: tuple[str, ...] = ()  # the messages of alerts fired and not resolved
    error: str | None = None
    # the soonest forecast OOM (vramscope_time_to_oom_seconds; from Prometheus only)
    time_to_oom_s: float | None = None
    oom_pool: str | None = None

    @property
    def reason(self) -> str | None:
        """The error shortened to its meaning (the fleet's state column), or None."""
        return None if self.error is None else short_reason(self.error)


# (words in a client error, what they mean), first match wins; the words are
# monitor/http/client.py's messages and the OS's strerror texts
_REASONS = (
    ("Prometheus target down", "target down"),
    ("HTTP 401 (wrong token)", "401: wrong token"),
    ("HTTP 401", "401: token needed"),
    ("HTTP 403", "403: forbidden"),
    ("HTTP 404", "not a vramscope daemon"),
    ("timed out", "timed out"),
    ("Connection refused", "connection refused"),
    ("Connection reset", "connection reset"),
    ("No route to host", "no route to host"),
    ("Network is unreachable", "network unreachable"),
    ("Name or service not known", "unknown host"),
    ("Temporary failure in name resolution", "unknown host"),
    ("CERTIFICATE_VERIFY_FAILED", "TLS certificate refused"),
    ("not a vramscope", "not a vramscope daemon"),
    ("not JSON", "not a vramscope daemon"),
    ("larger than", "not a vramscope daemon"),
)


def short_reason(error: str) -> str:
    """What a box's one-line error means, in a few words ("connection refused", "timed
    out", "401: wrong token", "not a vramscope daemon"); "HTTP N" for another status,
    "unreachable" for anything else (the whole error is shown on demand)."""
    for words, meaning in _REASONS:
        if words in error:
            return meaning
    for token in error.split():
        if token.isdigit() and len(token) == 3 and f"HTTP {token}" in error:
            return f"HTTP {token}"
    return "unreachable"


def active_alerts(events: list[Any]) -> tuple[str, ...]:
    """Alerts fired (or escalated) and not resolved since, by subject, oldest first; each
    event needs ``kind``, ``subject`` and ``message`` (tui EventRow or an events page)."""
    active: dict[str, str] = {}
    for e in events:
        subject = str(getattr(e, "subject", None) or getattr(e, "message", ""))
        if e.kind in ("alert_fired", "alert_escalated"):
            active[subject] = _text(e.message)
        elif e.kind == "alert_resolved":
            active.pop(subject, None)
    return tuple(active.values())
