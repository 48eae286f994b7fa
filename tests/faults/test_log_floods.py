"""A fault that repeats every tick writes one log line, not one per tick (issue 14)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from apscheduler.events import EVENT_JOB_MISSED
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from monitor.daemon.loop import quiet_repeated_warnings


def test_ticks_skipped_every_interval_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """A real APScheduler running a job slower than its interval, configured as the
    daemon's (one worker, max_instances 1): it skips a run at every interval, and each
    skip used to be a WARNING line."""
    caplog.set_level(logging.DEBUG)
    filt = quiet_repeated_warnings()
    runs = threading.Event()
    jobs_log = logging.getLogger("monitor.daemon.loop.jobs")

    def slow_tick() -> None:
        runs.set()
        time.sleep(0.4)

    sched = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(max_workers=1)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 1},
    )
    sched.add_listener(
        lambda e: jobs_log.warning(
            "job %s missed its time (the previous run was still going)", e.job_id
        ),
        EVENT_JOB_MISSED,
    )
    sched.add_job(slow_tick, "interval", seconds=0.02, id="sample")
    sched.start()
    try:
        assert runs.wait(30)
        deadline = time.monotonic() + 30
        while sum(filt.counts.values()) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        sched.shutdown(wait=True)
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) >= 10  # it did happen, every interval
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert 1 <= len(loud) <= 2, [r.getMessage() for r in loud]
    assert "repeats are counted" in loud[0].getMessage()
