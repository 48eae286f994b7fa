"""The growth a llama-server reports itself (issue 29 point 3): the daemon follows each
tracked server's --log-file once per tick and /metrics exports what it says its prompt
cache and checkpoints hold, so VramscopeServerOverEstimate judges measured memory against
the estimate at load plus that growth, never against the growth ceiling."""

from __future__ import annotations

import os
from pathlib import Path

from collectors.base import ProcessInfo, Snapshot
from monitor.daemon.growth_logs import GrowthLogs
from monitor.http.metrics import build_registry, render

MIB = 1024**2
STATE = (
    "0.42.101.912 W srv        update:  - cache state: {n} prompts, {mib:.3f} MiB "
    "(limits: 8192.000 MiB, 4096 tokens, 8589934592 est)\n"
)
CREATED = (
    "1.02.000.001 I slot create_check: id  {slot} | task 7 | created context checkpoint "
    "{i} of 32 (pos_min = 0, pos_max = 99, n_tokens = 100, size = {mib:.3f} MiB)\n"
)


def server(pid: int, *extra: str, cwd: str | None = None, engine: str = "llama.cpp") -> ProcessInfo:
    argv = ("llama-server", "-m", f"/models/m{pid}.gguf", *extra)
    uid = os.geteuid()  # the server's user owns its log (the daemon follows no one else's)
    return ProcessInfo(pid, pid, None, 1, uid, "llama-server", argv, engine, ("inference",), cwd)


def snap(*processes: ProcessInfo) -> Snapshot:
    return Snapshot(1_700_000_000_000, (), processes, (), (), (), ())


def growth_lines(body: str) -> dict[str, float]:
    prefix = "vramscope_process_reported_growth_bytes{"
    return {
        line.split(" ")[0][len(prefix) - 1 :]: float(line.split(" ")[1])
        for line in body.splitlines()
        if line.startswith(prefix)
    }


def test_a_servers_log_gives_its_prompt_cache_and_checkpoints(tmp_path: Path) -> None:
    log = tmp_path / "llama.log"
    log.write_text(STATE.format(n=3, mib=300.0) + CREATED.format(slot=0, i=1, mib=2.0))
    relative = server(41, "--log-file", "llama.log", cwd=str(tmp_path))
    no_log = server(42)
    other = server(43, "--log-file", str(log), engine="vllm")
    growth = GrowthLogs()
    try:
        growth.on_tick(snap(relative, no_log, other))
        assert growth.rows() == {41: {"prompt_cache": 300 * MIB, "checkpoints": 2 * MIB}}
        current = snap(relative, no_log, other)
        body = render(build_registry(lambda: current, growth=growth.rows)).decode()
        assert growth_lines(body) == {
            '{cause="checkpoints",model="m41.gguf",pid="41"}': 2 * MIB,
            '{cause="prompt_cache",model="m41.gguf",pid="41"}': 300 * MIB,
        }
        with log.open("a") as f:  # the cache fills: the next tick says so
            f.write(STATE.format(n=5, mib=500.0))
        growth.on_tick(snap(relative))
        assert growth.rows()[41]["prompt_cache"] == 500 * MIB
        growth.on_tick(snap())  # it exited: its follower is closed, its rows gone
        assert growth.rows() == {}
        assert growth._followers == {}  # noqa: SLF001 - nothing left open
    finally:
        growth.close()


def test_a_log_that_says_nothing_yet_is_unknown_not_zero(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("0.00.002.239 I cmn  common_param: system_info: n_threads = 2\n")
    missing = server(52, "--log-file", str(tmp_path / "absent.log"))
    growth = GrowthLogs()
    try:
        growth.on_tick(snap(server(51, "--log-file", str(log)), missing))
        assert growth.rows() == {}
        body = render(build_registry(lambda: snap(), growth=growth.rows)).decode()
        assert "# TYPE vramscope_process_reported_growth_bytes gauge" in body
        assert growth_lines(body) == {}
    finally:
        growth.close()


def test_a_disabled_prompt_cache_is_zero_growth(tmp_path: Path) -> None:
    log = tmp_path / "nocache.log"
    log.write_text(
        "0.00.100.000 I srv    load_model: prompt cache is disabled - use `--cache-ram N` "
        "to enable it\n"
    )
    growth = GrowthLogs()
    try:
        growth.on_tick(snap(server(61, "--log-file", str(log), "--cache-ram", "0")))
        assert growth.rows() == {61: {"prompt_cache": 0}}
    finally:
        growth.close()


def test_a_log_another_user_owns_is_never_opened(tmp_path) -> None:  # noqa: ANN001
    """A server run by uid 65534 names a root-owned file as its --log-file: the daemon
    (root) refuses it before opening, and follows the same file once the server's user
    owns it."""
    import os

    from monitor.logs.server_cache import ServerLogFollower

    log = tmp_path / "server.log"
    log.write_text("srv  update:  - cache state: 1 prompts, 64.000 MiB (limits: 8192.000 MiB)\n")
    os.chown(log, 0, 0)
    theirs = ServerLogFollower(log, owner_uid=65534)
    assert theirs.read() is None and "not the server's" in (theirs.error or "")
    os.chown(log, 65534, 65534)
    assert ServerLogFollower(log, owner_uid=65534).read() is not None
