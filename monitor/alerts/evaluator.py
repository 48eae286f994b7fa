"""The daemon's side of alerts: evaluate each tick, store every change as an event, and
hand it to the notifier (which never blocks the tick). Rebuilt from the config on SIGHUP."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from collectors.base import DeviceEvent, Snapshot
from monitor.alerts.delivery import Notifier
from monitor.alerts.rules import AlertSettings, AlertState, evaluate

log = logging.getLogger(__name__)


def settings_from(config: Any) -> AlertSettings:
    fields = {f.name for f in dataclasses.fields(AlertSettings)}
    return AlertSettings(**{k: v for k, v in config.alert_settings.items() if k in fields})


class AlertEvaluator:
    def __init__(self, config: Any) -> None:
        self.state = AlertState()
        self.settings = settings_from(config)
        self.notifier: Notifier | None = None
        self._channels: tuple = ()
        self.reconfigure(config)

    def reconfigure(self, config: Any) -> None:
        self.settings = settings_from(config)
        channels = (tuple(config.alert_urls), config.alert_command, config.alert_cooldown_s)
        if channels != self._channels:
            if self.notifier is not None:
                self.notifier.close(timeout=2)
            urls, command, cooldown = channels
            self.notifier = Notifier(list(urls), command, cooldown) if urls or command else None
            self._channels = channels

    def on_tick(self, snap: Snapshot) -> list[DeviceEvent]:
        """Changes of this tick as events (alert_fired / alert_escalated / alert_resolved)."""
        try:
            self.state, changes = evaluate(self.settings, snap, self.state, snap.ts_ms)
        except Exception as exc:  # alerts must never cost a sample
            log.error("alerts: %r", exc)
            return []
        events = []
        for change in changes:
            a = change.alert
            if self.notifier is not None:
                self.notifier.submit(change)
            events.append(
                DeviceEvent(
                    change.ts_ms,
                    str(a.data.get("device") or "host"),
                    f"alert_{change.kind}",
                    "info" if change.kind == "resolved" else a.level,
                    a.message,
                    {"key": a.key, "rule": a.rule, "level": a.level, "subject": a.subject},
                )
            )
        return events

    def close(self) -> None:
        if self.notifier is not None:
            self.notifier.close(timeout=5)
