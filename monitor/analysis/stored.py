"""The daemon's stored assessments, parsed: the store keeps each as its document
(monitor/store/estimates.py, ``vramscope.assessment/1``); here they become
:class:`~monitor.analysis.assess.Assessment` again. A document that no longer parses (a
hand-edited row, a newer writer) is skipped, never shown as a guess."""

from __future__ import annotations

import logging
from typing import Any

from monitor.analysis.assess import Assessment, from_json

log = logging.getLogger(__name__)


def parsed(doc: dict[str, Any]) -> Assessment | None:
    """The assessment of a stored document, or None (logged at debug) when it does not
    parse."""
    try:
        return from_json(doc)
    except (ValueError, TypeError, RecursionError) as exc:
        log.debug("stored assessment of pid %s skipped: %s", doc.get("pid"), exc)
        return None


def assessments_at(db: Any, ts_ms: int) -> dict[tuple[int, int], Assessment]:
    """Each process's newest stored assessment made at or before ``ts_ms``, by (pid,
    start_ticks); {} for a database written before the table existed."""
    from monitor.store import estimates

    out = {}
    for key, doc in estimates.at(db, ts_ms).items():
        a = parsed(doc)
        if a is not None:
            out[key] = a
    return out
