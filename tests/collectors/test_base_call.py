"""collectors/base.py's _Call, the result of one call handed to a collector's worker
thread (instead of concurrent.futures.Future, issue 32 item 4): its result, its exception
raised in the caller, and TimeoutError while the call has not returned."""

from __future__ import annotations

import threading

import pytest

from collectors.base import _Worker


def test_a_result_an_exception_and_a_call_still_running() -> None:
    worker = _Worker("test")
    try:
        assert worker.submit(lambda: 42).result(timeout=60) == 42

        def fails() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            worker.submit(fails).result(timeout=60)
        gate = threading.Event()
        held = worker.submit(lambda: gate.wait(60))
        with pytest.raises(TimeoutError):
            held.result(timeout=0.01)
        assert not held.done()
        gate.set()
        assert held.result(timeout=60) is True and held.done()
    finally:
        worker.stop()
