"""A collector that raises, hangs or returns garbage is isolated: recorded, a hung one is
timed out and retried with backoff, and the others keep sampling on every tick."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from collectors import base
from collectors.base import DeviceSample, GuardedCollector, ProcessMemory, Reading, Roots, Tick
from collectors.registry import CollectorSpec
from monitor.config import Config
from monitor.daemon import sampler as sampler_mod
from monitor.daemon.loop import DaemonContext, tick
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store

GOOD = DeviceSample("fake:0", "good", "fake", "Good GPU", "dedicated", 100, 40)


class Good:
    name = "good"

    def __init__(self, roots: Roots, options: object) -> None:
        self.calls = 0

    def collect(self, tick: Tick) -> Reading:
        self.calls += 1
        return Reading(devices=(GOOD,), memory=(ProcessMemory(1, "fake:0", vram_bytes=7),))

    def close(self) -> None:
        pass


class Raises(Good):
    name = "raises"

    def collect(self, tick: Tick) -> Reading:
        raise RuntimeError("boom")


class Hangs(Good):
    name = "hangs"

    def __init__(self, roots: Roots, options: object) -> None:
        super().__init__(roots, options)
        self.release = threading.Event()
        self.closed = False

    def collect(self, tick: Tick) -> Reading:
        self.calls += 1
        self.release.wait(30)
        return Reading(devices=(DeviceSample("fake:1", "hangs", "x", "late", "dedicated", 1, 1),))

    def close(self) -> None:
        self.closed = True


GARBAGE = [
    None,
    "not a reading",
    Reading(devices=("a string",)),  # type: ignore[arg-type]
    Reading(devices=None),  # type: ignore[arg-type]
    Reading(memory=(ProcessMemory(1, "fake:0", vram_bytes=[1, 2]),)),  # type: ignore[arg-type]
    Reading(devices=(DeviceSample("fake:0", "g", "x", None, "dedicated", object(), 1),)),  # type: ignore[arg-type]
]


class Garbage(Good):
    name = "garbage"

    def collect(self, tick: Tick) -> Reading:
        self.calls += 1
        return GARBAGE[(self.calls - 1) % len(GARBAGE)]  # type: ignore[return-value]


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = tuple(CollectorSpec(c.name, c, True, "test") for c in (Raises, Hangs, Garbage, Good))
    monkeypatch.setattr(sampler_mod, "REGISTRY", specs)
    monkeypatch.setattr(base, "FIRST_TIMEOUT_S", 0.0)


def test_bad_collectors_are_isolated_and_the_good_one_samples_every_tick(
    fakes: None, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "v.db")
    sampler = Sampler(Roots(), timeout_s=0.2)
    ctx = DaemonContext(Config(db_path=tmp_path / "v.db"), store, sampler)
    hangs = next(c for c in sampler.collectors if c.name == "hangs")
    assert isinstance(hangs, Hangs)
    try:
        durations = []
        for _ in range(len(GARBAGE) * 2):
            t0 = time.perf_counter()
            snap = tick(ctx)
            durations.append(time.perf_counter() - t0)
            time.sleep(0.003)
            runs = {r.collector: r for r in snap.runs}
            assert [d.device_id for d in snap.devices] == ["fake:0"]  # good, every tick
            assert runs["good"].status == "ok"
            assert runs["raises"].status == "error" and runs["raises"].error == "RuntimeError: boom"
            assert runs["hangs"].status == "error"
            assert runs["hangs"].error is not None
            assert runs["hangs"].error.startswith("timed out after 0.2 s")
            assert runs["garbage"].status == "error" and runs["garbage"].error
        # one tick waits for the hung call once (0.2 s); the skipped ones do not wait
        assert max(durations) < 0.2 + 0.3 and sorted(durations)[-2] < 0.1, durations
        assert hangs.calls == 1  # skipped while stuck: never a second call on top
        assert not ctx.pending  # garbage never reached (or poisoned) the database
        rows = store.db.execute(
            "SELECT collector, status, count(*) FROM collector_runs GROUP BY 1, 2"
        ).fetchall()
        n = len(GARBAGE) * 2
        assert set(rows) == {
            ("good", "ok", n),
            ("raises", "error", n),
            ("hangs", "error", n),
            ("garbage", "error", n),
        }
        errors = {
            r[0]
            for r in store.db.execute(
                "SELECT error FROM collector_runs WHERE collector = 'garbage'"
            )
        }
        assert any("not a Reading" in e for e in errors) and any("holds a str" in e for e in errors)
        # the hung call returns: after its backoff the collector is called again
        hangs.release.set()
        guard = next(g for g in sampler.guards if g.name == "hangs")
        time.sleep(max(0.0, guard.retry_at - time.monotonic()) + 0.01)
        snap = tick(ctx)
        assert {r.collector: r.status for r in snap.runs}["hangs"] == "ok"
        assert hangs.calls == 2 and guard.timeouts == 0
    finally:
        hangs.release.set()
        sampler.close()
        store.close()


class Stuck:
    name = "stuck"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def collect(self, tick: Tick) -> Reading:
        self.calls += 1
        self.release.wait(30)
        return Reading()

    def close(self) -> None:
        pass


def test_backoff_doubles_while_still_stuck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "FIRST_TIMEOUT_S", 0.0)
    now = [1000.0]
    stuck = Stuck()
    guard = GuardedCollector(stuck, timeout_s=0.05, clock=lambda: now[0])
    try:
        tick_ = Tick(Roots(), 1)
        _, run = guard.run(tick_)
        assert run.error == "timed out after 0.05 s"
        delays = []
        for _ in range(12):
            delays.append(round(guard.retry_at - now[0], 3))
            now[0] = guard.retry_at  # due; the call is still running: skipped, backs off
            _, run = guard.run(tick_)
            assert run.status == "error" and "skipped" in (run.error or "")
        assert delays[:5] == [0.05, 0.1, 0.2, 0.4, 0.8]
        assert delays[-1] == base.MAX_BACKOFF_S or delays[-1] == 0.05 * 2**11
        assert stuck.calls == 1
        stuck.release.set()
        time.sleep(0.05)
        now[0] = guard.retry_at
        _, run = guard.run(tick_)
        assert run.status == "ok" and stuck.calls == 2
    finally:
        stuck.release.set()
        guard.close()


def test_a_hung_collector_does_not_keep_the_process_from_exiting(tmp_path: Path) -> None:
    """Worker threads are daemon threads: interpreter exit never joins a hung call."""
    import subprocess
    import sys

    code = (
        "import threading\n"
        "from collectors.base import GuardedCollector, Reading, Roots, Tick\n"
        "class H:\n"
        "    name = 'h'\n"
        "    def collect(self, tick):\n"
        "        threading.Event().wait()\n"
        "    def close(self):\n"
        "        pass\n"
        "g = GuardedCollector(H(), timeout_s=0.1)\n"
        "import collectors.base as b; b.FIRST_TIMEOUT_S = 0\n"
        "print(g.run(Tick(Roots(), 1))[1].error)\n"
        "g.close()\n"
    )
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "timed out after 0.1 s"
    assert time.monotonic() - t0 < 10
