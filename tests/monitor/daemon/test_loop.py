"""The daemon keeps the exit-event window as long as four of its ticks (issue 32)."""

from __future__ import annotations

from pathlib import Path

from collectors.base import Roots
from collectors.proc_events import KEEP_S, ProcEventListener
from monitor import config as config_mod
from monitor.daemon.loop import DaemonContext, reload_config
from monitor.daemon.sampler import Sampler
from monitor.store.database import Store


def test_a_reloaded_interval_widens_the_exit_event_window(tmp_path: Path) -> None:
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text("[daemon]\ninterval_s = 1\n")
    cfg = config_mod.load(cfg_path, db=tmp_path / "v.db")
    ctx = DaemonContext(cfg, Store.open(cfg.db_path), Sampler(Roots(), cfg.options))
    ctx.proc_events = ProcEventListener()  # not opened: only its window is read here
    try:
        assert ctx.proc_events.keep_s == KEEP_S
        cfg_path.write_text("[daemon]\ninterval_s = 300\n")
        assert reload_config(ctx)
        assert ctx.proc_events.keep_s == 1200  # four ticks: an exit is asked for a tick late
        cfg_path.write_text("[daemon]\ninterval_s = 0.25\n")
        assert reload_config(ctx)
        assert ctx.proc_events.keep_s == KEEP_S
    finally:
        ctx.sampler.close()
        ctx.store.close()
