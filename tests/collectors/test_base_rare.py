"""collectors/base_rare.py: a tick's seldom parts, imported when first named, are still the
classes collectors.base names and the collector harness checks (issue 32 item 4)."""

from __future__ import annotations

import pytest

import collectors.base as base
from collectors import base_rare
from collectors.base import Reading, Roots, Tick, run_collector


def test_collectors_base_still_names_each_class() -> None:
    for name in base._RARE:
        assert getattr(base, name) is getattr(base_rare, name)
    from collectors.base import HiddenProcess

    assert HiddenProcess is base_rare.HiddenProcess
    with pytest.raises(AttributeError, match="NoSuchThing"):
        base.NoSuchThing  # noqa: B018


class _Once:
    name = "once"

    def __init__(self, reading: object) -> None:
        self.reading = reading

    def collect(self, tick: Tick) -> Reading:
        return self.reading  # type: ignore[return-value]

    def close(self) -> None:
        pass


def test_the_harness_checks_the_rare_parts_it_imports_on_demand() -> None:
    tick = Tick(Roots(), now_ms=1)
    hidden = base_rare.HiddenProcess(7, "denied")
    good, run = run_collector(_Once(Reading(hidden=(hidden,))), tick)
    assert run.status == "ok" and good.hidden == (hidden,)
    # an exit where a hidden process belongs: refused, as before the move
    exited = base_rare.ExitedProcess(7, 1, 1)
    _, run = run_collector(_Once(Reading(hidden=(exited,))), tick)  # type: ignore[arg-type]
    assert run.status == "error" and "Reading.hidden holds a ExitedProcess" in (run.error or "")
