"""Alerts: pure rules over each tick's snapshot (``rules``) and their delivery (``delivery``).

``monitor.alerts.delivery`` imports apprise only when a Notifier with URLs is built, so
importing this package costs nothing when alerts are off.
"""

from monitor.alerts.delivery import Notifier, NotifierStats
from monitor.alerts.rules import (
    Alert,
    AlertChange,
    AlertSettings,
    AlertState,
    device_usage,
    evaluate,
)

__all__ = [
    "Alert",
    "AlertChange",
    "AlertSettings",
    "AlertState",
    "Notifier",
    "NotifierStats",
    "device_usage",
    "evaluate",
]
