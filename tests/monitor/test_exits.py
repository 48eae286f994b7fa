"""The classification of exits (monitor/exits.py): a pure function, every branch."""

from __future__ import annotations

import signal

import pytest

from monitor.exits import ExitFacts, classify

CASES = {
    "exit 0": (ExitFacts(0), "exited", "info", False),
    "exit 3": (ExitFacts(3), "exited_error", "warning", False),
    "SIGTERM": (ExitFacts(None, signal.SIGTERM), "stopped", "info", False),
    "SIGINT during load": (
        ExitFacts(None, signal.SIGINT, loading=True),
        "stopped_during_load",
        "info",
        False,
    ),
    "SIGKILL by someone": (ExitFacts(None, signal.SIGKILL), "killed", "warning", False),
    "kernel OOM": (
        ExitFacts(None, 9, kernel_kill="oom_kill", constraint="CONSTRAINT_NONE"),
        "oom_killed",
        "critical",
        True,
    ),
    "cgroup OOM": (
        ExitFacts(None, 9, kernel_kill="oom_kill", constraint="CONSTRAINT_MEMCG"),
        "cgroup_oom_killed",
        "critical",
        True,
    ),
    "oomd": (ExitFacts(None, 9, kernel_kill="oomd_kill"), "oomd_killed", "critical", True),
    "SIGSEGV": (ExitFacts(None, signal.SIGSEGV, True), "crashed", "critical", True),
    "SIGABRT": (ExitFacts(None, signal.SIGABRT), "crashed", "critical", True),
    "SIGBUS": (ExitFacts(None, signal.SIGBUS), "crashed", "critical", True),
    "SIGILL": (ExitFacts(None, signal.SIGILL), "crashed", "critical", True),
    "SIGFPE": (ExitFacts(None, signal.SIGFPE), "crashed", "critical", True),
    "engine OOM then exit 1": (ExitFacts(1, engine_oom=True), "engine_oom", "critical", True),
    "engine OOM then abort": (
        ExitFacts(None, signal.SIGABRT, engine_oom=True),
        "engine_oom",
        "critical",
        True,
    ),
    "engine OOM line, clean exit": (ExitFacts(0, engine_oom=True), "exited", "info", False),
    "SIGUSR1": (ExitFacts(None, signal.SIGUSR1), "signalled", "warning", False),
    "nothing known": (ExitFacts(), "unknown", "info", False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_way_of_ending(case: str) -> None:
    facts, cause, severity, alerts = CASES[case]
    got = classify(facts)
    assert (got.cause, got.severity, got.alerts) == (cause, severity, alerts)


def test_texts_name_the_signal_and_the_load() -> None:
    assert classify(ExitFacts(None, 15, loading=True)).text == "stopped during load (SIGTERM)"
    assert classify(ExitFacts(None, 11, True)).text == "crashed (SIGSEGV) (core dumped)"
    assert classify(ExitFacts(3)).text == "exited with code 3"
    assert "exit status unknown" in classify(ExitFacts()).text


def test_a_clean_exit_during_load_is_a_stop() -> None:
    """The real llama-server catches SIGTERM during its load and exits 0 (measured with the
    built server: tests/realworld/test_exit_real.py); a load that fails exits 1."""
    stop = classify(ExitFacts(0, None, loading=True))
    assert (stop.cause, stop.severity, stop.alerts) == ("stopped_during_load", "info", False)
    assert classify(ExitFacts(0, None)).cause == "exited"
    failed = classify(ExitFacts(1, None, loading=True))
    assert failed.cause == "exited_error" and "during load" in failed.text
