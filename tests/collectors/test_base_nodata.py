"""collectors/base.py ``GuardedCollector``: a collector whose hardware or library is
absent (``NoData``) is asked again every ``NODATA_RETRY_S``, not every tick (issue 32 item
3: three absent collectors cost ~0.4 ms a tick in thread hand-offs). Noise: its ticks in
between call nothing and repeat its status and reason with the tick's time. Signal: a
device that appears is seen at the first retry; a collector that answers is called every
tick; a fault (an error) is not held back."""

from __future__ import annotations

import pytest

from collectors.base import (
    NODATA_RETRY_S,
    CollectorError,
    GuardedCollector,
    NoData,
    Reading,
    Roots,
    Tick,
)


class Switchable:
    """A collector that answers NoData, data or an error, as told; counts its calls."""

    name = "switchable"

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls = 0

    def collect(self, tick: Tick) -> Reading:
        self.calls += 1
        if self.answer == "nodata":
            raise NoData("no such device here")
        if self.answer == "error":
            raise CollectorError("read failed")
        return Reading()

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("timeout_s", [None, 5.0])  # inline and in its worker thread
def test_an_absent_device_is_asked_again_only_after_the_retry(timeout_s: float | None) -> None:
    collector, clock = Switchable("nodata"), Clock()
    guard = GuardedCollector(collector, timeout_s, clock=clock)
    try:
        runs = []
        for i in range(5):
            clock.now += 1.0
            runs.append(guard.run(Tick(Roots(), 1_000 + i))[1])
        assert collector.calls == 1
        assert [r.status for r in runs] == ["nodata"] * 5
        assert {r.error for r in runs} == {"no such device here"}
        assert [r.ts_ms for r in runs] == [1_000, 1_001, 1_002, 1_003, 1_004]
        collector.answer = "ok"  # the device appears
        clock.now += NODATA_RETRY_S
        assert guard.run(Tick(Roots(), 2_000))[1].status == "ok"
        assert collector.calls == 2
        guard.run(Tick(Roots(), 2_001))
        assert collector.calls == 3  # answering: called every tick again
    finally:
        guard.close()


@pytest.mark.parametrize("answer", ["ok", "error"])
def test_a_collector_that_answers_or_fails_is_called_every_tick(answer: str) -> None:
    collector, clock = Switchable(answer), Clock()
    guard = GuardedCollector(collector, 5.0, clock=clock)
    try:
        statuses = [guard.run(Tick(Roots(), i))[1].status for i in range(4)]
        assert collector.calls == 4
        assert statuses == [answer] * 4
    finally:
        guard.close()
