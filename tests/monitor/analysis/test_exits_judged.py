"""The exit judge (monitor/analysis/exits_judged.py): which exits become events, which
alert, and their words; pure, so judged here from the exit facts alone."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest

from collectors.base import ExitedProcess, ProcessInfo, Snapshot
from monitor.analysis.exits_judged import JUDGE, SHORT_LIVED_MS, judge_exit, keeps_record
from monitor.exits import ExitFacts, classify
from monitor.store.database import Store
from monitor.store.records import EventRecord, ExitRecord, ProcessRow

T0 = 1_700_000_000_000
SERVER = ProcessRow(7, "llama-server", "llama.cpp", json.dumps(["llama-server"]), T0)


def _gone(facts: ExitFacts, comm: str = "llama-server", **kw: object) -> ExitedProcess:
    """An exit as the daemon hands it on: classified by monitor/exits.py."""
    verdict = classify(facts)
    return ExitedProcess(
        4242,
        777,
        T0 + 9_000,
        how=verdict.text,
        comm=comm,
        exit_code=facts.exit_code,
        exit_signal=facts.exit_signal,
        cause=verdict.cause,
        **kw,  # type: ignore[arg-type]
    )


def test_a_sigkill_by_the_oom_killer_is_a_crash_event_and_alerts() -> None:
    gone = _gone(ExitFacts(exit_signal=signal.SIGKILL, kernel_kill="oom_kill"))
    record = judge_exit(gone, SERVER, T0 + 10_000)
    assert record.cause == "oom_killed"
    told, crash = record.events
    assert (told.kind, told.severity, told.ts_ms) == ("process_exit", "critical", T0 + 10_000)
    assert told.message == (
        "llama-server (pid 4242) killed by the kernel OOM killer; last seen 1000 ms before"
    )
    assert (crash.kind, crash.severity, crash.ts_ms) == ("crash", "critical", T0 + 9_000)
    assert crash.subject == "llama-server[4242]" and crash.data["process_id"] == 7
    assert crash.data["signal"] == "SIGKILL" and crash.data["cause"] == "oom_killed"
    assert keeps_record(gone) and JUDGE.keeps_record(gone)


def test_a_clean_exit_0_is_told_but_never_alerts() -> None:
    gone = _gone(ExitFacts(exit_code=0))
    (told,) = judge_exit(gone, SERVER, T0 + 10_000).events
    assert (told.kind, told.severity, told.data["cause"]) == ("process_exit", "info", "exited")
    assert not keeps_record(gone)


def test_a_server_stopped_by_sigterm_or_killed_by_someone_else_does_not_alert() -> None:
    for facts, cause, severity in (
        (ExitFacts(exit_signal=signal.SIGTERM), "stopped", "info"),
        (ExitFacts(exit_signal=signal.SIGKILL), "killed", "warning"),
    ):
        record = JUDGE.judge(_gone(facts), SERVER, T0 + 10_000)
        assert [e.kind for e in record.events] == ["process_exit"]
        assert (record.cause, record.events[0].severity) == (cause, severity)


def test_a_short_lived_process_or_our_own_cli_run_is_no_event_unless_it_alerts() -> None:
    shell = ProcessRow(8, "python3", None, json.dumps(["python3", "job.py"]), T0)
    clean = _gone(ExitFacts(exit_code=0), comm="python3")
    assert judge_exit(clean, shell, T0 + 10_000).events == ()  # seen 9 s
    old = dataclasses.replace(shell, first_seen_ms=T0 + 9_000 - SHORT_LIVED_MS)
    assert len(judge_exit(clean, old, T0 + 10_000).events) == 1  # seen a minute
    own = ProcessRow(9, "python3", None, json.dumps(["python3", "-m", "monitor"]), 0)
    assert judge_exit(clean, own, T0 + 10_000).events == ()
    crashed = _gone(ExitFacts(exit_signal=signal.SIGSEGV), comm="python3")
    assert [e.kind for e in judge_exit(crashed, own, T0 + 10_000).events] == [
        "process_exit",
        "crash",
    ]


def test_an_exit_without_a_row_is_told_when_it_alerts_or_a_server_died_young() -> None:
    quiet = _gone(ExitFacts(exit_code=1), comm="python3")
    assert judge_exit(quiet, None, T0 + 10_000).events == ()
    refused = _gone(ExitFacts(exit_code=1), exit_source="connector")
    (told,) = judge_exit(refused, None, T0 + 10_000).events
    assert told.data["process_id"] is None and told.severity == "warning"
    oom = _gone(ExitFacts(exit_signal=signal.SIGKILL, kernel_kill="oom_kill"), comm="python3")
    assert [e.kind for e in judge_exit(oom, None, T0 + 10_000).events] == [
        "process_exit",
        "crash",
    ]


def test_an_exit_record_without_the_daemons_cause_is_classified_from_its_status() -> None:
    raw = ExitedProcess(5, 5, T0, comm="llama-server", exit_signal=int(signal.SIGSEGV))
    record = judge_exit(raw, SERVER, T0 + 1_000)
    assert record.cause == "crashed" and record.events[-1].kind == "crash"
    assert keeps_record(raw)


class _Says:
    """A judge of the test's own: the store must write exactly what it decides."""

    def __init__(self, record: ExitRecord, keep: bool = False) -> None:
        self.record, self.keep = record, keep
        self.asked: list[ProcessRow | None] = []

    def keeps_record(self, gone: ExitedProcess) -> bool:
        return self.keep

    def judge(self, gone: ExitedProcess, row: ProcessRow | None, ts_ms: int) -> ExitRecord:
        self.asked.append(row)
        return self.record


def _tick(ts_ms: int, *, alive: bool, exited: tuple[ExitedProcess, ...] = ()) -> Snapshot:
    proc = ProcessInfo(4242, 777, None, 1, 1000, "llama-server", ("llama-server",), "llama.cpp")
    return Snapshot(ts_ms, (), (proc,) if alive else (), (), (), exited, ())


def _rows(store: Store, sql: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in store.db.execute(sql).fetchall()]


def test_the_store_writes_what_the_judge_decided_and_decides_nothing(tmp_path: Path) -> None:
    said = EventRecord(T0 + 5, "process_exit", "warning", "s", "the judge's words", {"k": 1})
    judge = _Says(ExitRecord("signalled", (said,)))
    store = Store.open(tmp_path / "v.db", exit_judge=judge)
    store.write(_tick(T0, alive=True))
    store.write(_tick(T0 + 1000, alive=True))
    # a SIGSEGV that monitor/exits.py calls a crash: still only what the judge returned
    segv = ExitedProcess(4242, 777, T0 + 1000, comm="llama-server", exit_signal=11)
    store.write(_tick(T0 + 2000, alive=False, exited=(segv,)))
    (row,) = judge.asked
    assert row is not None and (row.comm, row.engine, row.first_seen_ms) == (
        "llama-server",
        "llama.cpp",
        T0,
    )
    assert _rows(store, "SELECT exit_cause, exit_signal, exited_ms FROM processes") == [
        ("signalled", 11, T0 + 2000)
    ]
    assert _rows(store, "SELECT ts_ms, kind, severity, message, data FROM events") == [
        (T0 + 5, "process_exit", "warning", "the judge's words", '{"k": 1}')
    ]
    store.close()


def test_a_store_without_a_judge_refuses_a_tick_with_exits_and_keeps_it_unwritten(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "v.db")
    store.write(_tick(T0, alive=True))  # no exit: written
    gone = ExitedProcess(4242, 777, T0, comm="llama-server", exit_code=0)
    with pytest.raises(RuntimeError, match="without an exit judge"):
        store.write(_tick(T0 + 1000, alive=False, exited=(gone,)))
    assert _rows(store, "SELECT count(*) FROM events") == [(0,)]
    store.exit_judge = JUDGE  # the daemon's judge: the same tick now writes
    store.write(_tick(T0 + 1000, alive=False, exited=(gone,)))
    assert _rows(store, "SELECT exit_cause FROM processes") == [("exited",)]
    assert _rows(store, "SELECT kind, severity FROM events") == [("process_exit", "info")]
    store.close()
