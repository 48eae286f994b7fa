"""The daemon's HTTP API: health, Prometheus metrics, snapshot, events, predictions.

Public API: :class:`HttpServer`, :class:`HttpConfigError`, :func:`parse_listen`,
:func:`is_loopback` (monitor/integrations/loopback.py, the one check); the metrics are
listed in monitor/http/metrics.py.
"""

from monitor.http.server import PID_HEADER, HttpConfigError, HttpServer, is_loopback, parse_listen

__all__ = ["PID_HEADER", "HttpConfigError", "HttpServer", "is_loopback", "parse_listen"]
