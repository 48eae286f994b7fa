"""Alert rules (a pure function, table-driven) and their delivery end to end on loopback:
apprise ``json://`` to a real local HTTP receiver, and a command hook."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collectors.base import (
    CollectorRun,
    DeviceEvent,
    DeviceSample,
    ExitedProcess,
    ProcessInfo,
    Snapshot,
)
from monitor.alerts import Alert, AlertChange, AlertSettings, AlertState, Notifier, evaluate
from monitor.alerts.rules import EVENT_TTL_MS

GIB = 1024**3
S = AlertSettings()
T0 = 1_700_000_000_000
GPU = "drm:0000:c5:00.0"


def gpu(pct: float | None, total: int = 24 * GIB) -> DeviceSample:
    used = None if pct is None else round(total * pct / 100)
    return DeviceSample(GPU, "drm", "amd", "Radeon 8060S", "unified", total, used)


def host(total: int, available: int) -> DeviceSample:
    # used_bytes is deliberately wrong: host pressure must come from available
    return DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", total, GIB, available_bytes=available
    )


def snap(
    ts: int,
    devices: tuple[DeviceSample, ...] = (),
    events: tuple[DeviceEvent, ...] = (),
    runs: tuple[CollectorRun, ...] = (),
    exited: tuple[ExitedProcess, ...] = (),
    processes: tuple[ProcessInfo, ...] = (),
) -> Snapshot:
    return Snapshot(ts, devices, processes, (), (), exited, runs, events)


def run_steps(
    steps: list[tuple[float, Snapshot | Callable[[int], Snapshot]]],
    settings: AlertSettings = S,
    state: AlertState | None = None,
) -> tuple[AlertState, list[list[tuple[str, str, str]]]]:
    """Evaluate each (seconds after T0, snapshot) in turn; the changes of every step as
    (kind, rule, level)."""
    state = state or AlertState()
    seen = []
    for t_s, make in steps:
        now = T0 + int(t_s * 1000)
        s = make(now) if callable(make) else make
        state, changes = evaluate(settings, s, state, now)
        seen.append([(c.kind, c.alert.rule, c.alert.level) for c in changes])
    return state, seen


# -- pressure -----------------------------------------------------------------------------

FW = [("fired", "pressure", "warning")]
FC = [("fired", "pressure", "critical")]
ESC = [("escalated", "pressure", "critical")]
RES_W = [("resolved", "pressure", "warning")]
RES_C = [("resolved", "pressure", "critical")]

PRESSURE_CASES = {
    "hold respected: 29 s is not enough, 30 s is": (
        [(0, 95), (10, 95), (29, 95), (30, 95), (40, 95)],
        [[], [], [], FW, []],
    ),
    "a dip restarts the hold": (
        [(0, 95), (20, 80), (40, 95), (69, 95), (70, 95)],
        [[], [], [], [], FW],
    ),
    "hysteresis: 91 -> 89 stays, 84 resolves (clear 5)": (
        [(0, 91), (30, 91), (40, 89), (50, 85), (60, 84)],
        [[], FW, [], [], RES_W],
    ),
    "escalation needs its own hold": (
        [(0, 91), (30, 91), (40, 98), (69, 98), (70, 98)],
        [[], FW, [], [], ESC],
    ),
    "straight to critical fires critical only": ([(0, 99), (30, 99), (40, 99)], [[], FC, []]),
    "critical falls quietly to warning and escalates again": (
        [(0, 99), (30, 99), (40, 93), (50, 91), (60, 98), (90, 98), (100, 80)],
        [[], FC, [], [], [], ESC, RES_C],
    ),
    "below the warning threshold never fires": ([(0, 89.9), (100, 89.9)], [[], []]),
    "unknown usage keeps the alert and restarts a pending hold": (
        [
            (0, 95),
            (30, 95),
            (40, None),
            (50, 80),
            (60, 95),
            (70, None),
            (80, 95),
            (109, 95),
            (110, 84),
        ],
        [[], FW, [], RES_W, [], [], [], [], []],
    ),
}


@pytest.mark.parametrize("case", list(PRESSURE_CASES))
def test_pressure_rules(case: str) -> None:
    points, expected = PRESSURE_CASES[case]
    steps: list[tuple[float, Any]] = [(t, lambda now, p=p: snap(now, (gpu(p),))) for t, p in points]
    _, seen = run_steps(steps)
    assert seen == expected


def test_pressure_with_other_settings() -> None:
    settings = AlertSettings(
        pressure_warning_pct=80, pressure_critical_pct=95, clear_drop_pct=10, hold_s=0
    )
    steps: list[tuple[float, Any]] = [
        (t, lambda now, p=p: snap(now, (gpu(p),))) for t, p in [(0, 81), (1, 71), (2, 69.9)]
    ]
    _, seen = run_steps(steps, settings)
    assert seen == [FW, [], RES_W]


def test_host_pressure_uses_available_and_names_gib() -> None:
    h = host(64 * GIB, 3 * GIB)  # 61 of 64 GiB used: 95.3 %
    state, seen = run_steps([(0, snap(T0, (h,))), (30, snap(T0 + 30_000, (h,)))])
    assert seen == [[], FW]
    alert = state.active["pressure:host"]
    assert alert.message == "host RAM at 95.3%: 61.0 of 64.0 GiB used (3.0 GiB available)"
    assert alert.data["used_bytes"] == 61 * GIB
    state, changes = evaluate(S, snap(T0 + 40_000, (host(64 * GIB, 20 * GIB),)), state, T0 + 40_000)
    assert [(c.kind, c.alert.message) for c in changes] == [
        ("resolved", "host RAM at 68.8%: 44.0 of 64.0 GiB used (20.0 GiB available)")
    ]
    assert state.active == {}


def test_gpu_pressure_message_and_key() -> None:
    state, _ = run_steps([(0, snap(T0, (gpu(92),))), (30, snap(T0 + 30_000, (gpu(92),)))])
    alert = state.active[f"pressure:{GPU}"]
    assert alert.level == "warning" and alert.subject == GPU
    assert alert.message == (
        f"unified memory of Radeon 8060S ({GPU}) at 92.0%: 22.1 of 24.0 GiB used"
    )
    assert "\n" not in alert.message


def test_evaluate_does_not_mutate_its_input_state() -> None:
    state = AlertState()
    s1, _ = evaluate(S, snap(T0, (gpu(99),)), state, T0)
    frozen = (dict(s1.active), dict(s1.pending), dict(s1.since), dict(s1.seen))
    s2, changes = evaluate(S, snap(T0 + 30_000, (gpu(99),)), s1, T0 + 30_000)
    assert changes and s2.active
    assert (s1.active, s1.pending, s1.since, s1.seen) == frozen
    assert state.active == {} and state.pending == {}


# -- collectors ---------------------------------------------------------------------------


def run_of(status: str, ts: int) -> CollectorRun:
    return CollectorRun(
        "nvml",
        ts,
        0.01,
        0.01,
        status,  # type: ignore[arg-type]
        "NVMLError_Unknown" if status == "error" else None,
    )


COLLECTOR_CASES = {
    "failing 60 s fires, ok resolves": (
        [(0, "error"), (30, "error"), (59, "error"), (60, "error"), (70, "error"), (80, "ok")],
        [
            [],
            [],
            [],
            [("fired", "collector", "warning")],
            [],
            [("resolved", "collector", "warning")],
        ],
    ),
    "a blip shorter than the hold never fires": (
        [(0, "error"), (50, "ok"), (60, "error"), (100, "error")],
        [[], [], [], []],
    ),
    "nodata is not a failure": ([(0, "nodata"), (100, "nodata")], [[], []]),
    "nodata after failing resolves": (
        [(0, "error"), (60, "error"), (70, "nodata")],
        [[], [("fired", "collector", "warning")], [("resolved", "collector", "warning")]],
    ),
}


@pytest.mark.parametrize("case", list(COLLECTOR_CASES))
def test_collector_rules(case: str) -> None:
    points, expected = COLLECTOR_CASES[case]
    steps: list[tuple[float, Any]] = [
        (t, lambda now, st=st: snap(now, runs=(run_of(st, now),))) for t, st in points
    ]
    state, seen = run_steps(steps)
    assert seen == expected


def test_collector_message_names_it_and_the_error() -> None:
    state, _ = run_steps(
        [(t, lambda now: snap(now, runs=(run_of("error", now),))) for t in (0, 65)]
    )
    alert = state.active["collector:nvml"]
    assert alert.message == "collector nvml failing for 65 s: NVMLError_Unknown"


# -- events -------------------------------------------------------------------------------

PROC = ProcessInfo(4242, 777, None, 1, 1000, "llama-server", ("llama-server",), "llama.cpp")


def event(kind: str, ts: int, device: str = "host", **data: Any) -> DeviceEvent:
    return DeviceEvent(ts, device, kind, "critical", f"{kind} happened to pid 4242", data)


def test_oom_predicted_fires_at_once_and_resolves_on_load_finished() -> None:
    pred = event("oom_predicted", T0, GPU, pid=4242, need_bytes=30 * GIB, room_bytes=20 * GIB)
    state, changes = evaluate(S, snap(T0, events=(pred,)), AlertState(), T0)
    assert [(c.kind, c.alert.level) for c in changes] == [("fired", "critical")]
    assert changes[0].alert.subject == GPU
    # the same event seen again (a replayed tick) never fires twice
    state, changes = evaluate(S, snap(T0 + 1000, events=(pred,)), state, T0 + 1000)
    assert changes == []
    other = event("load_finished", T0 + 5000, pid=1)
    state, changes = evaluate(S, snap(T0 + 5000, events=(other,)), state, T0 + 5000)
    assert changes == []
    done = event("load_finished", T0 + 9000, pid=4242)
    state, changes = evaluate(S, snap(T0 + 9000, events=(done,)), state, T0 + 9000)
    assert [(c.kind, c.alert.rule) for c in changes] == [("resolved", "oom_predicted")]
    assert state.active == {}


@pytest.mark.parametrize("ending", ["exit", "crash_event", "timeout"])
def test_oom_predicted_resolves_on_exit_crash_or_after_ten_minutes(ending: str) -> None:
    pred = event("oom_predicted", T0, GPU, pid=4242)
    state, _ = evaluate(S, snap(T0, events=(pred,)), AlertState(), T0)
    later = T0 + 60_000
    if ending == "exit":
        s = snap(later, exited=(ExitedProcess(4242, 777, later - 1000, "vanished"),))
    elif ending == "crash_event":
        s = snap(later, events=(event("crash", later, pid=4242, start_ticks=777),))
    else:
        state, changes = evaluate(S, snap(T0 + EVENT_TTL_MS - 1), state, T0 + EVENT_TTL_MS - 1)
        assert changes == []
        later = T0 + EVENT_TTL_MS
        s = snap(later)
    state, changes = evaluate(S, s, state, later)
    assert ("resolved", "oom_predicted") in [(c.kind, c.alert.rule) for c in changes]
    assert not any(a.rule == "oom_predicted" for a in state.active.values())


@pytest.mark.parametrize("kind", ["crash", "oom_kill", "oomd_kill", "app_oom", "engine_oom"])
def test_kill_and_crash_events_fire_critical_then_resolve_after_ten_minutes(kind: str) -> None:
    ev = event(kind, T0, pid=4242, start_ticks=777)
    s0 = snap(T0, events=(ev,), processes=(PROC,))
    state, changes = evaluate(S, s0, AlertState(), T0)
    assert [(c.kind, c.alert.rule, c.alert.level) for c in changes] == [("fired", kind, "critical")]
    assert changes[0].alert.subject == "llama-server[4242]"
    state, changes = evaluate(S, snap(T0 + 599_000), state, T0 + 599_000)
    assert changes == [] and len(state.active) == 1
    state, changes = evaluate(S, snap(T0 + 600_000), state, T0 + 600_000)
    assert [(c.kind, c.alert.rule) for c in changes] == [("resolved", kind)]
    # the same event again (replayed) is never re-fired
    state, changes = evaluate(S, replace(s0, ts_ms=T0 + 601_000), state, T0 + 601_000)
    assert changes == [] and state.active == {}


def test_oom_kill_and_its_crash_exit_are_one_alert() -> None:
    kill = event("oom_kill", T0, pid=4242)
    gone = ExitedProcess(
        4242, 777, T0 - 1000, "killed by the kernel OOM killer", cause="oom_killed"
    )
    crash = event("crash", T0 - 1000, pid=4242, start_ticks=777)
    # the crash event listed before the kill: order within a tick must not matter
    s = snap(T0, events=(crash, kill), exited=(gone,), processes=(PROC,))
    state, changes = evaluate(S, s, AlertState(), T0)
    assert [(c.kind, c.alert.rule) for c in changes] == [("fired", "oom_kill")]


def test_crash_exit_without_kill_is_one_crash_alert() -> None:
    gone = ExitedProcess(4242, 777, T0 - 1000, "crashed (SIGSEGV)", exit_signal=11, cause="crashed")
    crash = event("crash", T0 - 1000, pid=4242, start_ticks=777)
    s = snap(T0, events=(crash,), exited=(gone,), processes=(PROC,))
    state, changes = evaluate(S, s, AlertState(), T0)
    assert [(c.kind, c.alert.rule) for c in changes] == [("fired", "crash")]
    # a plain exit is no crash
    quiet = snap(T0 + 1, exited=(ExitedProcess(5, 5, T0, "vanished"),))
    assert evaluate(S, quiet, AlertState(), T0 + 1)[1] == []
    # nor a stop during load (llama-swap swapping), nor a SIGKILL nobody recorded
    for cause, sig in (("stopped_during_load", 15), ("stopped", 15), ("killed", 9)):
        gone = ExitedProcess(6, 6, T0, "x", exit_signal=sig, cause=cause)
        assert evaluate(S, snap(T0 + 1, exited=(gone,)), AlertState(), T0 + 1)[1] == []


SURPRISE_CASES = {
    "21% over fires": (int(12.1 * GIB), [("fired", "surprise", "warning")]),
    "exactly 20% over does not": (12 * GIB, []),
    "19% over does not": (int(11.9 * GIB), []),
    "under the estimate does not": (8 * GIB, []),
}


@pytest.mark.parametrize("case", list(SURPRISE_CASES))
def test_memory_surprise_threshold(case: str) -> None:
    measured, expected = SURPRISE_CASES[case]
    ev = event(
        "load_finished",
        T0,
        pid=4242,
        **{
            f"measured_{GPU}": measured,
            f"estimate_{GPU}": 10 * GIB,
            "measured_host": GIB,
            "estimate_host": GIB,
        },
    )
    state, changes = evaluate(S, snap(T0, events=(ev,), processes=(PROC,)), AlertState(), T0)
    assert [(c.kind, c.alert.rule, c.alert.level) for c in changes] == expected
    if expected:
        alert = changes[0].alert
        assert alert.subject == GPU
        assert alert.message == (
            f"memory surprise: llama-server[4242] uses 12.1 GiB on {GPU},"
            " 2.1 GiB (21%) more than the 10.0 GiB estimated"
        )


def test_surprise_pct_setting() -> None:
    ev = event("load_finished", T0, pid=4242, measured_host=int(10.6 * GIB), estimate_host=10 * GIB)
    loose = evaluate(S, snap(T0, events=(ev,)), AlertState(), T0)[1]
    tight = evaluate(AlertSettings(surprise_pct=5), snap(T0, events=(ev,)), AlertState(), T0)[1]
    assert loose == [] and [c.alert.subject for c in tight] == ["host"]


@pytest.mark.parametrize(
    "unclean, expected",
    [(True, [("fired", "unclean_restart", "warning")]), (False, []), (None, [])],
)
def test_unclean_restart(unclean: bool | None, expected: list[tuple[str, str, str]]) -> None:
    data: dict[str, Any] = {"pid": 99}
    if unclean is not None:
        data["unclean"] = unclean
    ev = DeviceEvent(T0, "daemon", "daemon_started", "info", "started", data)
    _, changes = evaluate(S, snap(T0, events=(ev,)), AlertState(), T0)
    assert [(c.kind, c.alert.rule, c.alert.level) for c in changes] == expected
    if expected:
        assert changes[0].alert.message.startswith("daemon restarted after an unclean stop")


def test_unlisted_events_do_not_alert() -> None:
    evs = (event("load_started", T0, pid=1), event("process_exit", T0, pid=2))
    assert evaluate(S, snap(T0, events=evs), AlertState(), T0)[1] == []


# -- delivery -----------------------------------------------------------------------------


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[str, dict[str, Any]]]
    lock: threading.Lock
    fail_first: int

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        srv = self.server
        if self.path.startswith("/slow"):
            time.sleep(3)
        with srv.lock:  # type: ignore[attr-defined]
            if self.path.startswith("/flaky") and srv.fail_first > 0:  # type: ignore[attr-defined]
                srv.fail_first -= 1  # type: ignore[attr-defined]
                status = 500
            else:
                srv.got.append((self.path, json.loads(body)))  # type: ignore[attr-defined]
                status = 200
        try:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.daemon_threads = True
    server.block_on_close = False
    server.got = []  # type: ignore[attr-defined]
    server.lock = threading.Lock()  # type: ignore[attr-defined]
    server.fail_first = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url(server: ThreadingHTTPServer, path: str) -> str:
    return f"json://127.0.0.1:{server.server_address[1]}{path}"


def received(
    server: ThreadingHTTPServer,
    n: int,
    timeout: float = 8.0,
) -> list[tuple[str, dict[str, Any]]]:
    """The first ``n`` posts, waiting at most ``timeout``; fewer if they never came."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with server.lock:  # type: ignore[attr-defined]
            got = list(server.got)  # type: ignore[attr-defined]
        if len(got) >= n:
            return got
        time.sleep(0.02)
    return got


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def change(
    kind: str,
    level: str = "warning",
    key: str = f"pressure:{GPU}",
    message: str = "GPU memory at 91.0%: 21.8 of 24.0 GiB used",
) -> AlertChange:
    alert = Alert(key, "pressure", level, GPU, message, {"pct": 91.0})  # type: ignore[arg-type]
    return AlertChange(kind, alert, T0)  # type: ignore[arg-type]


def test_apprise_json_delivery_cooldown_and_resolve(receiver: ThreadingHTTPServer) -> None:
    notifier = Notifier([url(receiver, "/hook")], cooldown_s=600, retries=0, timeout_s=3)
    try:
        notifier.submit(change("fired"))
        got = received(receiver, 1)
        assert len(got) == 1
        path, payload = got[0]
        assert path == "/hook"
        assert payload["title"] == f"[vramscope] warning: memory pressure ({GPU})"
        assert payload["message"] == "GPU memory at 91.0%: 21.8 of 24.0 GiB used"
        notifier.submit(change("fired"))  # the same alert within cooldown: suppressed
        notifier.submit(change("escalated", "critical", message="at 98.0%"))  # level rose
        notifier.submit(change("resolved", "critical", message="at 80.0%"))
        notifier.submit(change("fired"))  # flapping back within cooldown: suppressed
        notifier.submit(change("resolved"))  # its fired notice never went out: suppressed
        assert notifier.flush(8)
        got = received(receiver, 3)
        assert [(p["title"], p["message"]) for _, p in got] == [
            (
                f"[vramscope] warning: memory pressure ({GPU})",
                "GPU memory at 91.0%: 21.8 of 24.0 GiB used",
            ),
            (f"[vramscope] critical: memory pressure ({GPU})", "at 98.0%"),
            (f"[vramscope] resolved: memory pressure ({GPU})", "resolved: at 80.0%"),
        ]
        time.sleep(0.2)
        assert len(received(receiver, 4, timeout=0.1)) == 3
        assert (notifier.stats.sent, notifier.stats.suppressed, notifier.stats.failed) == (3, 3, 0)
    finally:
        notifier.close()


def test_command_hook_gets_the_change_as_json(tmp_path: Path) -> None:
    out = tmp_path / "hook.json"
    notifier = Notifier([], command=f"cat > {out}.tmp && mv {out}.tmp {out}", timeout_s=5)
    try:
        notifier.submit(change("fired", "critical"))
        assert notifier.flush(8)
        payload = json.loads(out.read_text())
        assert payload["kind"] == "fired" and payload["level"] == "critical"
        assert payload["key"] == f"pressure:{GPU}" and payload["rule"] == "pressure"
        assert payload["title"] == f"[vramscope] critical: memory pressure ({GPU})"
        assert payload["message"] == "GPU memory at 91.0%: 21.8 of 24.0 GiB used"
        assert payload["data"] == {"pct": 91.0} and payload["ts_ms"] == T0
        assert notifier.stats.sent == 1
    finally:
        notifier.close()


def test_send_test_reports_each_channel(receiver: ThreadingHTTPServer) -> None:
    port = receiver.server_address[1]
    notifier = Notifier(
        [
            f"json://vram:s3cret@127.0.0.1:{port}/t",
            f"json://127.0.0.1:{closed_port()}/x",
            "notascheme://nothing",
        ],
        command="echo 'no such channel' >&2; exit 3",
        timeout_s=2,
    )
    try:
        results = notifier.send_test()
        assert len(results) == 4
        values = list(results.values())
        assert values[0] == "ok"
        assert values[1] != "ok" and values[1]
        assert "invalid" in values[2]
        assert results["command"] == "the command hook exited with status 3: no such channel"
        got = received(receiver, 1)
        assert got[0][1]["title"].startswith("[vramscope] warning: test")
        assert not any("s3cret" in name for name in results)  # never a secret in a name
    finally:
        notifier.close()


def test_command_hook_timeout_is_a_failure() -> None:
    notifier = Notifier([], command="sleep 30", timeout_s=0.5)
    try:
        start = time.monotonic()
        assert notifier.send_test() == {"command": "the command hook timed out after 0.5 s"}
        assert time.monotonic() - start < 3
    finally:
        notifier.close()


@pytest.mark.parametrize("bad", ["closed_port", "slow_receiver"])
def test_failing_channel_never_delays_submit_or_the_others(
    receiver: ThreadingHTTPServer, bad: str
) -> None:
    bad_url = (
        f"json://127.0.0.1:{closed_port()}/x" if bad == "closed_port" else url(receiver, "/slow")
    )
    notifier = Notifier([bad_url, url(receiver, "/good")], retries=2, backoff_s=0.2, timeout_s=1.0)
    try:
        slowest = 0.0
        for i in range(5):
            t = time.perf_counter()
            notifier.submit(change("fired", key=f"pressure:dev{i}"))
            slowest = max(slowest, time.perf_counter() - t)
        assert slowest < 0.5  # a submit that waited on the channel takes its 1 s timeout
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with receiver.lock:  # type: ignore[attr-defined]
                good = [p for p, _ in receiver.got if p == "/good"]  # type: ignore[attr-defined]
            if good:
                break
            time.sleep(0.01)
        assert good  # the first notice got past the bad channel
    finally:
        notifier.close(timeout=1)


def test_failing_channel_first_notice_arrives_within_one_timeout(
    receiver: ThreadingHTTPServer,
) -> None:
    notifier = Notifier([url(receiver, "/slow"), url(receiver, "/good")], retries=0, timeout_s=1.0)
    try:
        start = time.monotonic()
        notifier.submit(change("fired"))
        end = time.monotonic() + 6
        while time.monotonic() < end:
            with receiver.lock:  # type: ignore[attr-defined]
                if any(p == "/good" for p, _ in receiver.got):  # type: ignore[attr-defined]
                    break
            time.sleep(0.01)
        elapsed = time.monotonic() - start
        assert elapsed > 0.9  # /slow had its one attempt (its timeout) before /good
        assert notifier.flush(5)
        assert notifier.stats.failed == 1 and notifier.stats.sent == 1
    finally:
        notifier.close(timeout=1)


def test_retries_with_backoff_deliver_after_failures(receiver: ThreadingHTTPServer) -> None:
    receiver.fail_first = 2  # type: ignore[attr-defined]
    notifier = Notifier([url(receiver, "/flaky")], retries=3, backoff_s=0.1, timeout_s=2)
    try:
        notifier.submit(change("fired"))
        got = received(receiver, 1, timeout=8)
        assert [p for p, _ in got] == ["/flaky"]
        assert notifier.flush(8)  # the answer reached the receiver before sent was counted
        end = time.monotonic() + 8
        while notifier.stats.sent == 0 and time.monotonic() < end:
            time.sleep(0.02)
        assert notifier.stats.retried == 2 and notifier.stats.sent == 1
    finally:
        notifier.close()


def test_retries_run_out_and_count_failed() -> None:
    notifier = Notifier([], command="exit 1", retries=2, backoff_s=0.05, timeout_s=2)
    try:
        notifier.submit(change("fired"))
        end = time.monotonic() + 8
        while notifier.stats.failed == 0 and time.monotonic() < end:
            time.sleep(0.02)
        assert notifier.stats.failed == 1 and notifier.stats.retried == 2
        assert notifier.stats.sent == 0
    finally:
        notifier.close()


def test_full_queue_drops_the_oldest_and_counts(tmp_path: Path) -> None:
    log = tmp_path / "log"
    notifier = Notifier(
        [], command=f"sleep 0.3; cat >> {log}; echo >> {log}", queue_size=2, timeout_s=5
    )
    try:
        for i in range(6):
            notifier.submit(change("fired", key=f"k{i}"))
        assert notifier.stats.dropped >= 3
        assert notifier.flush(10)
        keys = [json.loads(line)["key"] for line in log.read_text().splitlines() if line]
        assert keys[-2:] == ["k4", "k5"]  # the newest survive
        assert len(keys) + notifier.stats.dropped == 6
    finally:
        notifier.close()


def test_close_returns_in_bounded_time() -> None:
    notifier = Notifier([], command="sleep 3", timeout_s=10)
    notifier.submit(change("fired"))
    time.sleep(0.1)
    start = time.monotonic()
    notifier.close(timeout=0.5)
    assert time.monotonic() - start < 1.5
    notifier.submit(change("fired", key="late"))  # after close: counted, never raises
    assert notifier.stats.dropped >= 1
