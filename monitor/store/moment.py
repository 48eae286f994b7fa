"""Read a past moment back from the database as a Snapshot (``--at TIME``)."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from collectors.base import DeviceSample, HiddenProcess, ProcessInfo, ProcessMemory, Snapshot
from monitor.errors import NotRecorded, UsageError
from monitor.store.database import open_readonly
from monitor.store.migrations import DEVICE_SAMPLE_FIELDS, PROCESS_SAMPLE_FIELDS

_STATIC = (
    "collector",
    "vendor",
    "name",
    "memory_kind",
    "pci_bus_id",
    "vram_total_bytes",
    "vis_vram_total_bytes",
    "gtt_total_bytes",
    "hugepages_total_bytes",
    "swap_total_bytes",
    "mig_enabled",
)


def parse_time(text: str) -> int:
    """``YYYY-MM-DD HH:MM[:SS]`` (local time) or ISO 8601, or epoch ms -> epoch ms."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 18:  # epoch ms (int64's range)
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            moment = moment.astimezone()  # local time, as a user types it
        return int(moment.astimezone(UTC).timestamp() * 1000)
    except (ValueError, OverflowError, OSError):  # not a time; a year the C library refuses
        raise UsageError(f"cannot read the time {text!r}: use 'YYYY-MM-DD HH:MM'") from None


SINCE_FORMS = "30m, 6h, 2d, 1w, today, yesterday, a time of day (14:30) or 'YYYY-MM-DD HH:MM'"
_BACK_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: datetime | None = None) -> int:
    """``events --since``: a span back from now (``30m``, ``2h``, ``1d``, ``1w``),
    ``today`` / ``yesterday`` (local midnight), a time of day (``14:30[:SS]``: its latest
    occurrence, so just after midnight ``23:00`` is last night's) or what
    :func:`parse_time` reads -> epoch ms. ``now`` is an aware local datetime (tests).
    Raises UsageError with one line naming the forms it reads."""
    now = now if now is not None else datetime.now().astimezone()
    word = text.strip().lower()
    span = re.fullmatch(r"(\d{1,12}(?:\.\d{1,6})?)\s*([smhdw])", word)
    if span:
        back_s = float(span.group(1)) * _BACK_S[span.group(2)]
        if not back_s < 1e11:  # ~3000 years: int() of an epoch that far back overflows
            raise UsageError(f"--since {text}: too far back")
        return int((now.timestamp() - back_s) * 1000)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if word in ("today", "yesterday"):
        day = midnight if word == "today" else midnight - timedelta(days=1)
        return int(day.timestamp() * 1000)
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", word)
    if clock and int(clock.group(1)) < 24 and int(clock.group(2)) < 60:
        seconds = int(clock.group(3) or 0)
        if seconds < 60:
            moment = now.replace(
                hour=int(clock.group(1)), minute=int(clock.group(2)), second=seconds, microsecond=0
            )
            if moment > now:
                moment -= timedelta(days=1)
            return int(moment.timestamp() * 1000)
    try:
        return parse_time(text)
    except UsageError:
        raise UsageError(f"--since {text!r}: cannot read it; use {SINCE_FORMS}") from None


# A moment this far past the last sample still reads that sample (a typed 'HH:MM' just
# after the daemon's last tick); further on, the database does not know the moment.
AFTER_LAST_GRACE_MS = 60_000


def _local(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def check_moment(
    db_path: Path, ts_ms: int, first_ms: int | None, last_ms: int | None, now_ms: int | None = None
) -> None:
    """Raise NotRecorded naming the range the database covers when ``ts_ms`` is outside it
    (before the first full-resolution sample, or after the last one / in the future)."""
    if first_ms is None or last_ms is None:
        raise NotRecorded(
            f"{db_path} holds no full-resolution samples yet (is the daemon running?)"
        )
    covers = f"the database covers {_local(first_ms)} .. {_local(last_ms)}"
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    if ts_ms < first_ms:
        raise NotRecorded(f"{_local(ts_ms)} is before the first sample in {db_path}: {covers}")
    if ts_ms > last_ms + AFTER_LAST_GRACE_MS:
        where = "in the future" if ts_ms > now_ms else f"after the last sample in {db_path}"
        raise NotRecorded(f"{_local(ts_ms)} is {where}: {covers}")


def snapshot_at(db_path: Path, ts_ms: int) -> Snapshot:
    """The last tick at or before ``ts_ms`` (raw samples only: the recent window); a
    moment outside what the database covers is NotRecorded naming that range."""
    from monitor.store.reads import sample_span, tick_at_or_before

    db = open_readonly(db_path)
    try:
        first, last = sample_span(db)
        check_moment(db_path, ts_ms, first, last)
        tick = tick_at_or_before(db, ts_ms)
        if tick is None:
            raise NotRecorded(f"{db_path} has no full-resolution sample at or before that time")
        return snapshot_in(db, tick)
    finally:
        db.close()


def snapshot_in(db: Any, at: int) -> Snapshot:
    """The tick ``at`` (an exact ``ts_ms``) of an open database connection."""
    statics = {r[0]: r[1:] for r in db.execute(f"SELECT id, {', '.join(_STATIC)} FROM devices")}
    devices = []
    for r in db.execute(
        f"SELECT device_id, {', '.join(DEVICE_SAMPLE_FIELDS)} FROM device_samples WHERE ts_ms = ?",
        (at,),
    ):
        fields = dict(zip(DEVICE_SAMPLE_FIELDS, r[1:], strict=True))
        static = dict(zip(_STATIC, statics.get(r[0], (None,) * len(_STATIC)), strict=True))
        static["mig_enabled"] = (
            None if static["mig_enabled"] is None else bool(static["mig_enabled"])
        )
        devices.append(DeviceSample(device_id=r[0], **static, **fields))
    infos, rows = {}, []
    sample_cols = ", ".join("s." + f for f in PROCESS_SAMPLE_FIELDS)
    for r in db.execute(
        "SELECT p.pid, p.start_ticks, p.started_at_ms, p.ppid, p.uid, p.comm, p.argv,"
        f" p.engine, p.reasons, p.cwd, s.device_id, {sample_cols}"
        " FROM process_samples s JOIN processes p ON p.id = s.process_id"
        " WHERE s.ts_ms = ?",
        (at,),
    ):
        pid = r[0]
        infos[pid] = ProcessInfo(
            pid,
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            tuple(json.loads(r[6])),
            r[7],
            tuple(x for x in (r[8] or "").split(",") if x),
            cwd=r[9],
        )
        rows.append(
            ProcessMemory(pid, r[10], **dict(zip(PROCESS_SAMPLE_FIELDS, r[11:], strict=True)))
        )
    hidden = tuple(
        HiddenProcess(pid, reason, device_id=device_id, used_bytes=used)
        for pid, device_id, used, reason in db.execute(
            "SELECT pid, device_id, used_bytes, reason FROM hidden_samples"
            " WHERE ts_ms = ? ORDER BY pid",
            (at,),
        )
    )
    return Snapshot(at, tuple(devices), tuple(infos.values()), tuple(rows), hidden, (), ())
