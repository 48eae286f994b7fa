"""How much of its context a server really uses: the p99 of the tokens in use per busy
slot over the daemon's recorded ``/slots`` polls (the ``slot_usage`` table,
monitor/integrations/slots.py ``UsageTracker``). ``diagnose`` and the TUI's database
source turn it into a ``-c`` that covers it (monitor/analysis/diagnose.py)."""

from __future__ import annotations

from pathlib import Path


def usage_p99(db_path: Path, model_path: str, days: float = 7.0) -> int | None:
    """p99 tokens in use per busy slot of ``model_path`` over the last ``days`` in the
    database at ``db_path``; None without a database, the table, or a busy poll."""
    from monitor.integrations.slots import SlotSample, UsageTracker
    from monitor.store.database import StoreError, open_readonly
    from monitor.store.reads import slot_usage

    try:
        db = open_readonly(db_path)
    except StoreError:
        return None
    try:
        rows = slot_usage(db, model_path, int(days * 86400_000))
    except Exception:  # an older database without the table
        return None
    finally:
        db.close()
    tracker = UsageTracker()
    by_ts: dict[int, list[SlotSample]] = {}
    for row in rows:
        by_ts.setdefault(row.ts_ms, []).append(
            SlotSample(row.slot_id, row.n_ctx or 0, row.tokens, row.busy)
        )
    for ts, slots in by_ts.items():
        tracker.add(model_path, slots, ts)
    stats = tracker.stats(model_path)
    return stats.p99 if stats is not None and stats.samples else None
