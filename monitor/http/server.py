"""The daemon's HTTP endpoint: health, Prometheus metrics, the latest snapshot, events, and
predictions against the live box.

Endpoints (JSON unless said; every error is one line ``{"error": "..."}``):

- ``GET /healthz``: ``200 ok: last tick N s ago`` (text), ``503`` before the first tick,
  when the latest tick is older than ``max(5 x interval_s, 30 s)``, or while the database
  refuses writes (``database: cannot write ...``: the reason, since when, the backlog),
  or while its last ``SQLite quick_check`` failed (``database corrupt: ...``, the first
  problem; monitor/store/integrity.py);
- ``GET /metrics``: Prometheus text format, OpenMetrics when ``Accept`` asks for it,
  gzip when ``Accept-Encoding`` allows (monitor/http/metrics.py lists the metrics);
- ``GET /api/v1/snapshot``: the latest snapshot as ``vramscope.status/1``
  (monitor/report/status.py), 503 before the first tick;
- ``GET /api/v1/events?since_ms=MS&kind=K[&kind=K2|,K2]&limit=N``: events from the
  database in time order (default: the last 24 hours, at most 1000; ``truncated`` says
  when more matched - ask again from the last ``ts_ms``);
- ``GET /api/v1/estimates``: ``vramscope.estimates/1``, the daemon's stored assessment of
  each server of the latest tick (monitor/analysis/assess.py: launch, estimate per
  component and device, the launch's findings, the estimator version, or ``error`` when
  the model cannot be estimated), computed once per launch and never from this request,
  each with what the process holds at the latest tick (``measured``) and the ``verdict``
  and ``summary`` judged from them; 503 before the first tick;
- ``POST /api/v1/predict`` (``Content-Type: application/json``, body at most 64 KiB):
  ``{"command": ["llama-server", "-m", "/models/x.gguf", ...], "margin_gib": 0.5}`` ->
  the ``vramscope.predict/1`` document judged against the latest snapshot, status 200
  (or ``{"model_id": "ID"}``: a llama-server router's model on this box, its child
  launch as the router renders it and its LRU unload, monitor/analysis/router_predict.py)
  whatever the verdict; 400 for a bad request or a command that cannot be estimated;
  403 for a model file outside ``[http] model_dirs`` or one the caller could not read
  itself (monitor/http/access.py); 504 past ``PREDICT_DEADLINE_S`` (monitor/http/deadline.py).

Security: no files are served. With a token, every request needs
``Authorization: Bearer TOKEN`` (compared in constant time) or gets 401, on loopback too,
before anything else of the request is parsed or routed;
listening anywhere but loopback without a token is refused (:class:`HttpConfigError`).
Hostile clients are bounded: a connection holds no thread until its request line and
headers have arrived; they are read on one thread (monitor/http/heads.py), may take
``MAX_HEAD_BYTES`` and ``MAX_HEADER_LINES`` (else 431) and must arrive within
``HEAD_TIMEOUT_S`` in all (a slow client is cut); at most ``MAX_PENDING_HEADS`` are
pending (past that the oldest is answered 503). At most ``MAX_CONNECTIONS`` requests are
then served at once, each on a thread, plus ``RESERVED_CONNECTIONS`` more kept for
``/healthz`` and requests with the valid token; the rest are answered 503 (issue 28
item 12: stalled or busy clients cannot starve health checks and authorized clients).
A path in a predict request gets the same error whether it is missing, unreadable or not
a GGUF file, so the endpoint says nothing about which paths exist. Clients that go away
mid-answer are counted and logged once, not one traceback each.
Without a token (loopback only) a request whose ``Host`` is a name other than
``localhost`` is refused (DNS rebinding), and the predict POST needs a JSON content type
(a browser cannot send one cross-site without a preflight, which gets 501).
"""

from __future__ import annotations

import contextlib
import hmac
import io
import ipaddress
import json
import logging
import os
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from collectors.base import Snapshot
from monitor.errors import SetupError, VramscopeError, bug_line
from monitor.http.access import Caller, ModelAccess, ModelAccessError
from monitor.http.deadline import PREDICT_DEADLINE_S, Busy, DeadlineExceeded, DeadlineRunner
from monitor.http.heads import (
    MAX_HEAD_BYTES,
    Head,
    HeadReader,
    turn_away,
)
from monitor.http.metrics import (
    Assessments,
    Counts,
    Estimates,
    Growth,
    build_registry,
    ceilings_from_assessments,
    encode,
    estimates_from_assessments,
)
from monitor.http.peer import peer_uid
from monitor.http.requests import (
    BodyReader,
    RequestError,
    dns_safe_host,
    drain,
    header_value,
    int_param,
    predict_request,
    query_params,
)
from monitor.integrations.loopback import is_loopback_host as is_loopback

if TYPE_CHECKING:
    from monitor.analysis.state import BoxState
    from monitor.config import Config
    from monitor.store.database import WriterHealth

PID_HEADER = "X-Vramscope-Pid"  # on every routed answer: which daemon answered (doctor)
log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
MAX_DRAIN_BYTES = 1024 * 1024  # an oversized body up to this is read and dropped
MAX_PREDICTS = 2  # predictions running at once; more get 503
MAX_ABANDONED_PREDICTS = 4  # workers past their deadline still ending; while so many, 503
EVENTS_DEFAULT_WINDOW_MS = 24 * 3600 * 1000
EVENTS_DEFAULT_LIMIT, EVENTS_MAX_LIMIT = 1000, 10000
REQUEST_TIMEOUT_S = 10.0  # each read or write of a body or an answer
# the whole body (at most MAX_BODY_BYTES) must arrive within this, however it trickles: a
# client that sends a byte a second cannot hold a request thread for long (issue 28)
BODY_DEADLINE_S = 5.0
MAX_HEADER_LINES = 48
MAX_CONNECTIONS = 32  # requests served at once; each holds a thread
RESERVED_CONNECTIONS = 4
"""More requests served at once when the ``MAX_CONNECTIONS`` are busy, only for
``/healthz`` and requests with the valid token (a health check or the owner's client
gets in while anyone else holds every general thread)."""
DEFAULT_PORT = 9835
# an endpoint's answer: status, content type, body and, for some, extra headers
_Answer = tuple[int, str, bytes] | tuple[int, str, bytes, dict[str, str]]

_JSON = "application/json"
# GGUF problems that say nothing about the bytes of the file (the rest may quote them:
# "not a GGUF file (magic b'root')" would read 4 bytes of any file the daemon can read).
_MODEL_UNREADABLE = "not a readable GGUF model file"  # missing, unreadable or not GGUF
# a bug's answer: its type and message (paths, bytes of a file) stay in the daemon's log
_BUG_ANSWER = "internal error (this is a bug; its traceback is in the daemon's log)"


class HttpConfigError(SetupError):
    """The [http] settings cannot work (one line, for the user)."""


def parse_listen(text: str) -> tuple[str, int]:
    """``127.0.0.1:9835``, ``[::1]:9835``, ``localhost:9835`` or ``:9835`` (all IPv4
    addresses) -> (host, port). The host must be an IP address or ``localhost``."""
    raw = text.strip()
    if raw.startswith("["):
        host, sep, port_text = raw[1:].partition("]:")
        if not sep:
            raise HttpConfigError(f"listen {text!r}: expected [IPV6]:PORT, e.g. [::1]:9835")
    else:
        host, sep, port_text = raw.rpartition(":")
        if not sep:
            raise HttpConfigError(
                f"listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}"
            )
        if ":" in host:
            raise HttpConfigError(
                f"listen {text!r}: write an IPv6 address in brackets, e.g. [::1]:{DEFAULT_PORT}"
            )
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise HttpConfigError(f"listen {text!r}: the port must be a number from 0 to 65535")
    if host == "":
        host = "0.0.0.0"
    elif host.lower() == "localhost":
        host = "127.0.0.1"
    else:
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            raise HttpConfigError(
                f"listen {text!r}: the host must be an IP address or localhost"
            ) from None
    return host, int(port_text)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of connects waits here, not in SYN retries

    def __init__(self, address: tuple[str, int], app: HttpServer) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.app = app
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.reserved = threading.BoundedSemaphore(RESERVED_CONNECTIONS)
        self.heads = HeadReader(self._dispatch, app.quiet.note)
        # each handler is made by _serve, with its head: the class is not called with 3
        super().__init__(address, _Handler)  # type: ignore[arg-type]

    def process_request(self, request: Any, client_address: Any) -> None:
        """No thread yet: the head is read first, with every other pending head."""
        self.heads.add(request, client_address)

    def _dispatch(self, request: socket.socket, client_address: Any, head: Head) -> None:
        """A complete head (on the head reader's thread): a thread from the general pool,
        else from the reserved one when the head may use it, else 503 at once."""
        pool = self._pool_for(head)
        if pool is None:
            self.app.quiet.note(
                "busy",
                f"more than {MAX_CONNECTIONS} HTTP requests at once; the excess is answered 503",
            )
            turn_away(request)
            return
        try:
            threading.Thread(
                target=self._serve,
                args=(request, client_address, head, pool),
                name="vramscope-http-request",
                daemon=True,
            ).start()
        except BaseException:
            pool.release()
            raise

    def _pool_for(self, head: Head) -> threading.BoundedSemaphore | None:
        if self.slots.acquire(blocking=False):
            return self.slots
        if _may_use_reserved(self.app, head) and self.reserved.acquire(blocking=False):
            return self.reserved
        return None

    def _serve(
        self,
        request: socket.socket,
        client_address: Any,
        head: Head,
        pool: threading.BoundedSemaphore,
    ) -> None:
        try:
            _Handler(request, client_address, self, head)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            pool.release()

    def server_close(self) -> None:
        self.heads.stop()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, never socketserver's traceback on stderr."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            self.app.quiet.note("gone", f"an HTTP client went away or stalled ({exc!r})")
            return
        log.error("HTTP connection from %s failed: %r", client_address[0], exc)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn (a DNS lookup) for server_name
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])


class HttpServer:
    """Serves the daemon's latest snapshot. ``latest`` and ``estimates`` are called from
    request threads: they must be safe to call from any thread (returning the reference
    to an immutable Snapshot the sampling thread swaps in is)."""

    def __init__(
        self,
        listen: str,
        token: str | None,
        latest: Callable[[], Snapshot | None],
        db_path: Path,
        config: Config,
        estimates: Estimates | None = None,
        health: Callable[[], WriterHealth | None] | None = None,
        assessments: Assessments | None = None,
        counts: Counts | None = None,
        growth: Growth | None = None,
    ) -> None:
        host, port = parse_listen(listen)
        if token is not None:
            token = token.strip()
            if not token:
                raise HttpConfigError(
                    "[http] token is empty: set a long random string "
                    "(e.g. from `openssl rand -hex 32`) or remove it"
                )
            if not all(33 <= ord(c) <= 126 for c in token):
                raise HttpConfigError("[http] token must be printable ASCII without spaces")
        if token is None and not is_loopback(host):
            raise HttpConfigError(
                f"binding {_host_port(host, port)} needs [http] token: anyone who can reach "
                "the port could read the process table and run predictions; set a token or "
                f"listen on 127.0.0.1:{port}"
            )
        self._host, self._port = host, port
        self._token = token.encode() if token is not None else None
        self.latest = latest
        self.db_path = Path(db_path)
        self.config = config
        self.health = health
        self.assessments = assessments
        ceilings = None
        if assessments is not None:
            ceilings = ceilings_from_assessments(latest, assessments)
            if estimates is None:
                estimates = estimates_from_assessments(latest, assessments)
        self.registry = build_registry(
            latest, estimates, health, ceilings, counts, growth, config.http_pid_series_after_s
        )
        self.stale_after_s = max(5 * float(config.interval_s), 30.0)
        self.predicts = DeadlineRunner(MAX_PREDICTS, PREDICT_DEADLINE_S, MAX_ABANDONED_PREDICTS)
        self.quiet = QuietLog()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port) once started (port 0 -> the real port)."""
        if self._server is not None:
            host, port = self._server.server_address[:2]
            return str(host), int(port)
        return self._host, self._port

    @property
    def token_required(self) -> bool:
        return self._token is not None

    def start(self) -> None:
        """Bind and serve in a daemon thread; returns at once. A bind failure (port in use,
        address not on this host) raises :class:`HttpConfigError`."""
        if self._server is not None:
            return
        try:
            server = _Server((self._host, self._port), self)
        except OSError as exc:
            raise HttpConfigError(
                f"cannot listen on {_host_port(self._host, self._port)}: {exc.strerror or exc}"
            ) from None
        self._server = server
        server.heads.start()
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="vramscope-http",
            daemon=True,
        )
        self._thread.start()
        log.info(
            "HTTP API on http://%s/ (token %s)",
            _host_port(*self.address),
            "required" if self._token else "off: loopback only",
        )

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice or before start."""
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    # -- request handling (called from the handler, one thread per request) -------

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        scheme, _, given = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode("utf-8", "replace"), self._token)

    def healthz(self) -> tuple[int, str, bytes]:
        snap = self.latest()
        if snap is None:
            return 503, "text/plain; charset=utf-8", b"starting: no tick yet\n"
        age = time.time() - snap.ts_ms / 1000
        if age > self.stale_after_s:
            return (
                503,
                "text/plain; charset=utf-8",
                (f"stale: last tick {age:.1f} s ago (limit {self.stale_after_s:.0f} s)\n").encode(),
            )
        health = self.health() if self.health is not None else None
        if health is not None and health.integrity_ok is False:
            return (
                503,
                "text/plain; charset=utf-8",
                _one_line(
                    f"database corrupt: {health.integrity_problem} (SQLite quick_check of "
                    f"{self.db_path}); the next start moves it aside and starts a new one"
                ).encode()
                + b"\n",
            )
        if health is not None and not health.write_ok:
            since = (time.time() - health.since_ms / 1000) if health.since_ms else 0.0
            return (
                503,
                "text/plain; charset=utf-8",
                _one_line(
                    f"database: cannot write {self.db_path} for {max(since, 0):.0f} s "
                    f"({health.error}); {health.backlog_ticks} tick(s) kept in memory, "
                    f"{health.dropped_ticks} dropped; sampling goes on"
                ).encode()
                + b"\n",
            )
        return 200, "text/plain; charset=utf-8", f"ok: last tick {max(age, 0):.1f} s ago\n".encode()

    def metrics(
        self, accept: str | None = None, accept_encoding: str | None = None
    ) -> tuple[int, str, bytes, dict[str, str]]:
        """The registry encoded as asked (monitor/http/metrics.py: OpenMetrics on
        ``Accept``, gzip on ``Accept-Encoding``)."""
        body, content_type, headers = encode(self.registry, accept, accept_encoding)
        return 200, content_type, body, headers

    def snapshot(self) -> tuple[int, str, bytes]:
        from monitor.report.status import to_json
        from monitor.servers import read_llama_env

        state = self._need_state()
        proc = self.config.roots.proc  # routers/children by their environment too, as status
        return 200, _JSON, _dump(to_json(state.snapshot, lambda pid: read_llama_env(proc, pid)))

    def estimates(self) -> tuple[int, str, bytes]:
        from monitor.analysis.assess import assessments_document, judged
        from monitor.analysis.judge import Tolerance
        from monitor.servers.recognise import helper_parents

        snap = self._need_state().snapshot
        stored = self.assessments() if self.assessments is not None else {}
        helpers = helper_parents({p.pid: p for p in snap.processes})
        live = {(p.pid, p.start_ticks) for p in snap.processes}
        tolerance = Tolerance.from_settings(self.config.alert_settings)
        items = [
            judged(
                a, snap.memory, [h for h, o in helpers.items() if o == a.pid], tolerance=tolerance
            )
            for k, a in sorted(stored.items())
            if k in live
        ]
        return 200, _JSON, _dump(assessments_document(items, snap.ts_ms))

    def events(self, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        from monitor.analysis.postmortem import list_events
        from monitor.store.database import StoreError

        now = int(time.time() * 1000)
        since_ms = int_param(query, "since_ms", now - EVENTS_DEFAULT_WINDOW_MS, 0)
        limit = int_param(query, "limit", EVENTS_DEFAULT_LIMIT, 1, EVENTS_MAX_LIMIT)
        kinds = tuple(k for value in query.get("kind", []) for k in value.split(",") if k)
        if len(kinds) > 32 or any(len(k) > 64 for k in kinds):
            raise RequestError(400, "kind: at most 32 kinds of at most 64 characters")
        unknown = set(query) - {"since_ms", "kind", "limit"}
        if unknown:
            raise RequestError(
                400, f"unknown parameter {sorted(unknown)[0]!r}; expected since_ms, kind, limit"
            )
        try:
            rows = list_events(self.db_path, since_ms, kinds, limit + 1)  # +1: truncated?
        except StoreError as exc:
            raise RequestError(503, str(exc)) from None
        return (
            200,
            _JSON,
            _dump(
                {
                    "since_ms": since_ms,
                    "kinds": list(kinds),
                    "truncated": len(rows) > limit,
                    "events": rows[:limit],
                }
            ),
        )

    def predict(self, body: bytes, caller: Caller | None = None) -> tuple[int, str, bytes]:
        """Judge the command in a worker under PREDICT_DEADLINE_S (monitor/http/deadline.py),
        reading only model files inside [http] model_dirs that ``caller`` could read
        (monitor/http/access.py; None: an unknown caller, "others")."""
        request = predict_request(body)
        state = self._need_state()
        access = ModelAccess(
            self.config.http_model_dirs,
            caller if caller is not None else Caller(None),
            deadline=time.monotonic() + self.predicts.deadline_s,
        )
        try:
            doc = self.predicts.run(lambda: self._judge(request, state, access))
        except Busy as exc:
            raise RequestError(503, f"busy: {exc}", {"Retry-After": "1"}) from None
        except DeadlineExceeded as exc:
            raise RequestError(504, str(exc)) from None
        return 200, _JSON, doc.encode() + b"\n"

    def _judge(self, request: dict[str, Any], state: BoxState, access: ModelAccess) -> str:
        """The predict document (runs in the worker thread)."""
        from monitor.analysis.predict_request import PredictRequest
        from monitor.gguf.reader import GgufError
        from monitor.report.predict import to_json
        from monitor.usecases.predict import judge

        req = PredictRequest(
            request["command"],
            model_id=request.get("model_id"),  # a router's, on this box (router_predict.py)
            margin_gib=request["margin_gib"],
            growth_horizon_tokens=self.config.growth_horizon_tokens,
        )
        try:
            result = judge(self.config, req, state.snapshot, live=False, read_header=access.reader)
        except ModelAccessError as exc:  # says nothing of the file's bytes or existence
            raise RequestError(403, _one_line(str(exc))) from None
        except GgufError as exc:
            raise RequestError(400, _gguf_message(exc)) from None
        except OSError as exc:  # any other file the command names: the same answer
            name = exc.filename if isinstance(exc.filename, str) else "a file"
            raise RequestError(400, _one_line(f"{name}: {_MODEL_UNREADABLE}")) from None
        return to_json(result)

    def _need_state(self) -> BoxState:
        """The box as the daemon's latest tick shows it (monitor/analysis/state.py)."""
        from monitor.analysis.state import Daemon, box_state

        snap = self.latest()
        if snap is None:
            raise RequestError(
                503, "no snapshot yet: the daemon has not finished a tick", {"Retry-After": "1"}
            )
        return box_state(Daemon(snap))


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _gguf_message(exc: Any) -> str:
    """One answer for every unreadable model: "no such file" against "not a GGUF" would
    tell a client which paths exist (and the problem may quote the file's bytes)."""
    return _one_line(f"{getattr(exc, 'path', '?')}: {_MODEL_UNREADABLE}")


class QuietLog:
    """Events a client can cause at will (a reset, a stall, a flood of connections): the
    first of each kind is logged at info, the rest counted and logged at debug."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, kind: str, message: str) -> None:
        with self._lock:
            n = self.counts[kind] = self.counts.get(kind, 0) + 1
        if n == 1:
            log.info("%s (further ones are counted, at debug level)", message)
        else:
            log.debug("%s (%d so far)", message, n)


def _may_use_reserved(app: HttpServer, head: Head) -> bool:
    """A request the reserved threads are kept for: ``/healthz`` (whoever asks: without
    the token it is answered 401 at once), or any request with the valid token when one
    is set (without a token every local client is alike: only health checks)."""
    lines = head.lines()
    if head.too_large or not lines:
        return False
    parts = lines[0].split()
    if len(parts) >= 2 and urlsplit(parts[1].decode("latin-1")).path == "/healthz":
        return True
    return app.token_required and app.authorized(header_value(lines[1:], b"authorization"))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "vramscope"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S
    protocol_version = "HTTP/1.0"

    # -- plumbing -------------------------------------------------------------

    def __init__(
        self, request: socket.socket, client_address: Any, server: _Server, head: Head
    ) -> None:
        self.head = head  # read already, by monitor/http/heads.py
        super().__init__(request, client_address, server)

    def handle_one_request(self) -> None:
        """The base class, on the head read already under limits, the token checked first."""
        self.close_connection = True  # HTTP/1.0: one request per connection
        self.request_version, self.command, self.requestline = "HTTP/1.0", "", ""
        if self.head.too_large:
            self.send_error(
                431,
                f"the request line and headers may take {MAX_HEAD_BYTES} "
                f"bytes and {MAX_HEADER_LINES} lines",
            )
            return
        extra = self.head.extra
        lines = self.head.lines()
        if len(lines) > MAX_HEADER_LINES + 1:
            self.send_error(431, f"at most {MAX_HEADER_LINES} header lines")
            return
        self.requestline = lines[0][:200].decode("latin-1") if lines else ""
        app = self.server.app
        if app.token_required and not app.authorized(header_value(lines[1:], b"authorization")):
            self._send(
                401,
                _JSON,
                _dump({"error": "missing or wrong bearer token"}),
                {"WWW-Authenticate": 'Bearer realm="vramscope"'},
            )
            return
        self.raw_requestline = lines[0] + b"\r\n" if lines else b""
        connection_reader = self.rfile
        self.rfile = io.BytesIO(b"".join(line + b"\r\n" for line in lines[1:]) + b"\r\n")
        try:
            parsed = self.parse_request()
        finally:
            self.rfile = BodyReader(extra, connection_reader)
        if not parsed:
            return
        method = getattr(self, "do_" + self.command, None)
        if method is None:
            self.send_error(501, f"unsupported method ({self.command[:20]!r})")
            return
        method()

    def version_string(self) -> str:
        return self.server_version  # no Python version in the Server header

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # the base sends HTML; malformed request lines and unknown methods end up here
        self.close_connection = True
        reason = message or self.responses.get(code, ("error",))[0]
        with contextlib.suppress(OSError):
            self._send(code, _JSON, _dump({"error": _one_line(str(reason))}))

    def _send(
        self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(
                411, "send the body with a Content-Length (no chunked transfer encoding)"
            )
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise RequestError(411, "a Content-Length is required")
        if not length_text.strip().isdigit():
            raise RequestError(400, "bad Content-Length")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            if length <= MAX_DRAIN_BYTES:  # read it, so that closing sends no RST that
                drain(self.rfile, length)  # could cost the client the 413 itself
            raise RequestError(413, f"the body is {length} bytes; at most {MAX_BODY_BYTES}")
        return self._read_within(length, time.monotonic() + BODY_DEADLINE_S)

    def _read_within(self, length: int, deadline: float) -> bytes:
        """``length`` bytes of body, all of them before ``deadline`` (else 408 and the
        connection is closed); each read waits at most what is left."""
        chunks: list[bytes] = []
        left = length
        try:
            while left > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                self.connection.settimeout(remaining)
                chunk = self.rfile.read1(left)
                if not chunk:
                    raise RequestError(400, "the body ended early")
                chunks.append(chunk)
                left -= len(chunk)
        except TimeoutError:
            self.close_connection = True
            raise RequestError(
                408, f"the body did not arrive within {BODY_DEADLINE_S:.0f} s"
            ) from None
        finally:
            self.connection.settimeout(REQUEST_TIMEOUT_S)
        return b"".join(chunks)

    # -- dispatch ---------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        app = self.server.app
        try:
            if not app.authorized(self.headers.get("Authorization")):
                raise RequestError(
                    401,
                    "missing or wrong bearer token",
                    {"WWW-Authenticate": 'Bearer realm="vramscope"'},
                )
            if not app.token_required and not dns_safe_host(self.headers.get("Host")):
                raise RequestError(403, "the Host header must be an IP address or localhost")
            url = urlsplit(self.path)
            routes: dict[str, tuple[str, Callable[[], _Answer]]] = {
                "/healthz": ("GET", app.healthz),
                "/metrics": (
                    "GET",
                    lambda: app.metrics(
                        self.headers.get("Accept"), self.headers.get("Accept-Encoding")
                    ),
                ),
                "/api/v1/snapshot": ("GET", app.snapshot),
                "/api/v1/estimates": ("GET", app.estimates),
                "/api/v1/events": ("GET", lambda: app.events(query_params(url.query))),
                "/api/v1/predict": ("POST", self._predict),
            }
            route = routes.get(url.path)
            if route is None:
                raise RequestError(404, f"no such endpoint; try {', '.join(routes)}")
            if route[0] != method:
                raise RequestError(405, f"{url.path} takes {route[0]}", {"Allow": route[0]})
            status, content_type, body, *extra = route[1]()
            headers = dict(extra[0]) if extra else {}
            # which daemon answered: `doctor` tells its database's daemon from another's
            headers[PID_HEADER] = str(os.getpid())
            self._send(status, content_type, body, headers)
        except (ConnectionError, TimeoutError) as exc:  # the client went away
            self.close_connection = True
            app.quiet.note("gone", f"an HTTP client went away before its answer ({exc!r})")
        except RequestError as exc:
            if exc.status >= 400 and exc.status != 503:
                log.debug("HTTP %s %s -> %d: %s", method, self.path[:200], exc.status, exc.message)
            self._send(exc.status, _JSON, _dump({"error": _one_line(exc.message)}), exc.headers)
        except VramscopeError as exc:  # the request (400) or the daemon's store (503)
            log.debug("HTTP %s %s -> %d: %s", method, self.path[:200], exc.http_status, exc)
            self._send(exc.http_status, _JSON, _dump({"error": exc.one_line()}))
        except Exception as exc:  # a bug: its traceback in the daemon's log, one line here
            log.exception("HTTP %s %s failed: %s", method, self.path[:200], bug_line(exc))
            self._send(500, _JSON, _dump({"error": _BUG_ANSWER}))

    def _predict(self) -> tuple[int, str, bytes]:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != _JSON:
            raise RequestError(415, "send the body as Content-Type: application/json")
        return self.server.app.predict(self._read_body(), self._caller())

    def _caller(self) -> Caller:
        """Who sent this request: a loopback client's uid from its socket, else unknown."""
        host, port = self.client_address[:2]
        if not is_loopback(str(host)):
            return Caller(None)
        uid = peer_uid((str(host), int(port)), self.connection.getsockname()[:2])
        return Caller.of_uid(uid)
