"""Alerts inside the daemon: a reloaded threshold takes effect, alerts are events, a slow
channel never delays a tick, an unclean restart is noticed, `vramscope alerts test`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from collectors.base import Roots
from monitor import config as config_mod
from monitor.alerts.evaluator import AlertEvaluator
from monitor.daemon.loop import DaemonContext, reload_config, tick
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store

ROOT = Path(__file__).resolve().parents[3]


class _Receiver(BaseHTTPRequestHandler):
    delay_s = 0.0
    gate: threading.Event | None = None  # when set: answer only once the test opens it
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        time.sleep(type(self).delay_s)
        if type(self).gate is not None:
            type(self).gate.wait(60)
        length = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append(json.loads(self.rfile.read(length) or b"{}"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def receiver(
    delay_s: float = 0.0, gate: threading.Event | None = None
) -> tuple[ThreadingHTTPServer, str]:
    handler = type("R", (_Receiver,), {"delay_s": delay_s, "gate": gate, "bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"json://127.0.0.1:{server.server_address[1]}/hook"


def context(tmp_path: Path, toml: str) -> DaemonContext:
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(toml)
    cfg = config_mod.load(cfg_path, db=tmp_path / "v.db")
    ctx = DaemonContext(cfg, Store.open(cfg.db_path), Sampler(Roots(), cfg.options))
    ctx.alerts = AlertEvaluator(cfg)
    return ctx


def kinds(ctx: DaemonContext) -> list[str]:
    return [r[0] for r in ctx.store.db.execute("SELECT kind FROM events ORDER BY id")]


def fired(ctx: DaemonContext, rule: str | None = None) -> list[str]:
    """The rules of the alerts fired so far (``rule``: only that one). Other alerts may
    fire on a busy machine, e.g. a crashed zombie another program left: the tests count
    only their own."""
    rows = ctx.store.db.execute(
        "SELECT json_extract(data, '$.rule') FROM events WHERE kind = 'alert_fired'"
    )
    return [r[0] for r in rows if rule is None or r[0] == rule]


def test_reloaded_threshold_takes_effect_and_reaches_the_channel(tmp_path: Path) -> None:
    server, url = receiver()
    try:
        ctx = context(
            tmp_path,
            f'[alerts]\nurls = ["{url}"]\npressure_warning_pct = 99.9\n'
            "pressure_critical_pct = 99.95\nhold_s = 0\n",
        )
        tick(ctx)
        assert not fired(ctx, "pressure")  # host RAM is nowhere near 99.9 % here
        (tmp_path / "c.toml").write_text(
            f'[alerts]\nurls = ["{url}"]\n'
            "pressure_warning_pct = 0.5\n"
            "pressure_critical_pct = 99.95\nhold_s = 0\n"
        )
        assert reload_config(ctx)
        time.sleep(0.002)
        tick(ctx)
        assert fired(ctx, "pressure")
        assert ctx.alerts.notifier is not None and ctx.alerts.notifier.flush(10)
        bodies = server.RequestHandlerClass.bodies
        (body,) = [b for b in bodies if "memory pressure" in b["title"]]
        assert "host" in body["title"]
        ctx.alerts.close()
        ctx.store.close()
    finally:
        server.shutdown()


def test_a_slow_channel_never_delays_a_tick(tmp_path: Path) -> None:
    """The channel answers only after the tick has returned: a tick that waited for it
    would run into the channel's timeout and count a failed delivery. No clock is read."""
    gate = threading.Event()
    server, url = receiver(gate=gate)
    try:
        ctx = context(
            tmp_path, f'[alerts]\nurls = ["{url}"]\npressure_warning_pct = 0.5\nhold_s = 0\n'
        )
        tick(ctx)  # returns while the receiver still holds the request
        assert fired(ctx, "pressure")
        notifier = ctx.alerts.notifier
        assert notifier is not None
        assert notifier.stats.sent == 0 and notifier.stats.failed == 0
        gate.set()  # now the channel answers
        assert notifier.flush(timeout=60)
        assert (notifier.stats.sent, notifier.stats.failed) == (len(fired(ctx)), 0)
        ctx.alerts.close()
        ctx.store.close()
    finally:
        gate.set()
        server.shutdown()


def test_unclean_restart_is_noticed(tmp_path: Path, wait_for_ticks) -> None:
    import signal

    db = tmp_path / "v.db"
    args = [sys.executable, "-m", "monitor", "daemon", "--db", str(db), "--interval", "0.2"]
    first = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        ticks = wait_for_ticks(db, 3)
    finally:
        first.kill()  # no daemon_stopped
        first.wait()
    second = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        wait_for_ticks(db, ticks + 3)  # the second daemon's first tick carries the event
    finally:
        second.send_signal(signal.SIGTERM)
    second.wait(timeout=20)
    import sqlite3

    rows = (
        sqlite3.connect(db)
        .execute(
            "SELECT kind, data FROM events WHERE kind IN ('daemon_started', 'alert_fired')"
            " ORDER BY id"
        )
        .fetchall()
    )
    unclean = [
        r for r in rows if r[0] == "daemon_started" and r[1] and json.loads(r[1]).get("unclean")
    ]
    assert len(unclean) == 1
    fired = [json.loads(r[1]) for r in rows if r[0] == "alert_fired"]
    assert any(f.get("rule") == "unclean_restart" for f in fired), fired


def test_alerts_test_command(tmp_path: Path) -> None:
    server, url = receiver()
    out = tmp_path / "hook.json"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[alerts]\nurls = ["{url}"]\ncommand = "cat > {out}"\n')
    try:
        result = subprocess.run(
            [sys.executable, "-m", "monitor", "alerts", "test", "--config", str(cfg)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": ok") == 2
    assert json.loads(out.read_text())["kind"] in ("test", "fired")
    empty = tmp_path / "e.toml"
    empty.write_text("")
    none = subprocess.run(
        [sys.executable, "-m", "monitor", "alerts", "test", "--config", str(empty)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert none.returncode == 2 and "no alert channels" in none.stderr
