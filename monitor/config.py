"""Configuration: zero-config defaults, an optional TOML file, then command-line overrides.

Where things go when nothing is configured:
- database: ``$STATE_DIRECTORY`` (systemd's ``StateDirectory=``), else ``/var/lib/vramscope``
  for root, else ``$XDG_STATE_HOME/vramscope`` (``~/.local/state/vramscope``);
- config file: ``--config FILE``, else ``/etc/vramscope/config.toml`` for root or
  ``$XDG_CONFIG_HOME/vramscope/config.toml``, read only if it exists.

Every key is checked: an unknown key, a wrong type or an out-of-range value is a
:class:`ConfigError` that names the key and its line.
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from monitor.errors import InputError
from monitor.store.retention import Retention

if TYPE_CHECKING:  # collectors.base (16 dataclasses, threads) only where a Config is built
    from collectors.base import CollectorOptions, Roots

DB_NAME = "vramscope.db"


class ConfigError(InputError):
    """A configuration problem, phrased for the user in one line."""


def _default_roots() -> Roots:
    """The real /proc and /sys. collectors.base is imported on first use: ``--help``,
    ``events`` and the other commands that build no Config never load it (issue 32)."""
    from collectors.base import Roots

    return Roots()


def _default_options() -> CollectorOptions:
    from collectors.base import CollectorOptions

    return CollectorOptions()


def default_state_dir() -> Path:
    if state := os.environ.get("STATE_DIRECTORY"):
        return Path(state.split(":")[0])
    if os.geteuid() == 0:
        return Path("/var/lib/vramscope")
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "vramscope"


def require_db_folder(config: Config) -> None:
    """Refuse a database path someone named (--db, [daemon] db) whose folder is missing:
    a typo must not become a tree of new folders. The default location's folders
    (default_state_dir) are the daemon's own to create. Raises ConfigError (one line)."""
    folder = config.db_path.parent
    if config.db_named_by is not None and not os.path.lexists(folder):
        raise ConfigError(
            f"the database folder {folder} does not exist ({config.db_named_by}: "
            f"{config.db_path}): create it first; only the default location's are created"
        )


def default_config_path() -> Path:
    if os.geteuid() == 0:
        return Path("/etc/vramscope/config.toml")
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "vramscope" / "config.toml"


@dataclass(frozen=True, slots=True)
class FleetBox:
    """One box of ``[fleet] boxes``: its daemon's URL and the file holding its [http] token
    (None: the box takes no token). The token is read only when the box is watched
    (monitor/http/tokens.py), and sent only to that URL."""

    url: str
    token_file: Path | None = None


@dataclass(frozen=True, slots=True)
class Config:
    db_path: Path = field(default_factory=lambda: default_state_dir() / DB_NAME)
    # who named db_path ("--db", "[daemon] db in FILE"); None: the default location, the
    # only one whose missing folders the daemon creates (require_db_folder)
    db_named_by: str | None = None
    interval_s: float = 1.0
    prune_interval_s: float = 600.0  # the raw tail a long history window reads: issue 32
    integrity_check_s: float = 3600.0  # SQLite quick_check of the database while running
    log_level: str = "info"
    roots: Roots = field(default_factory=_default_roots)
    collectors: tuple[str, ...] | None = None  # None: each collector's default
    options: CollectorOptions = field(default_factory=_default_options)
    retention: Retention = field(default_factory=Retention)
    gpu_overhead_mib: int = 300  # per process per GPU: CUDA context etc. (estimation.md 1c)
    budgets_gib: dict[str, float] = field(default_factory=dict)  # [budgets]: expected size
    swap_url: str | None = None  # [llama_swap] url: loopback only
    swap_config: Path | None = None
    alert_urls: tuple[str, ...] = ()  # [alerts]
    alert_command: str | None = None
    alert_cooldown_s: float = 600.0
    alert_settings: dict[str, float] = field(default_factory=dict)  # thresholds, holds
    http_listen: str | None = "127.0.0.1:9835"  # [http]; None: no HTTP server
    http_token: str | None = None
    # [http] model_dirs: the folders whose GGUF files HTTP predicts may read (resolved,
    # absolute); empty: HTTP predicts naming a model file get 403 (monitor/http/access.py)
    http_model_dirs: tuple[str, ...] = ()
    # a process gets /metrics series with a pid label once it has run this long
    # (monitor/http/metrics.py: a launch that ends within seconds makes no series of its own)
    http_pid_series_after_s: float = 30.0
    log_files: tuple[str, ...] = ()  # [logs] files: engine logs to tail for OOM lines
    journal_units: tuple[str, ...] = ()  # [logs] journal_units
    # [predict] growth_horizon_tokens: distinct prompt tokens within which a prompt cache
    # that would overflow counts as an OOM (exit 3); beyond it, a note (docs: README)
    growth_horizon_tokens: int = 1_000_000
    fleet: tuple[FleetBox, ...] = ()  # [fleet] boxes: per-box tokens for --remote
    source: Path | None = None


# section -> key -> (type, (min, max) or choices)
_NUM = (int, float)
_SCHEMA: dict[str, dict[str, tuple[Any, Any]]] = {
    "daemon": {
        "interval_s": (_NUM, (0.05, 3600)),
        "prune_interval_s": (_NUM, (1, 86400)),
        "integrity_check_s": (_NUM, (1, 86400 * 7)),
        "db": (str, None),
        "log_level": (str, ("debug", "info", "warning", "error")),
    },
    "collectors": {
        "enabled": (list, None),
        "top_n": (int, (0, 1000)),
        "max_tracked": (int, (1, 10000)),
        "rescan_s": (_NUM, (0, 86400)),
        "pss_interval_s": (_NUM, (0, 86400)),
    },
    "retention": {
        "raw_hours": (_NUM, (0.1, 24 * 365)),
        "minute_days": (_NUM, (1, 3650)),
        "runs_hours": (_NUM, (0.1, 24 * 365)),
        "events_days": (_NUM, (1, 3650)),
        "events_max": (int, (1000, 10_000_000)),
    },
    "paths": {"proc_root": (str, None), "sys_root": (str, None)},
    "estimate": {"gpu_overhead_mib": (int, (0, 65536))},
    "predict": {"growth_horizon_tokens": (int, (0, 10**12))},
    "budgets": {},  # model name, file name or path -> expected GiB (any key, a number)
    "llama_swap": {"url": (str, None), "config": (str, None)},
    "logs": {"files": (list, None), "journal_units": (list, None)},
    "http": {
        "enabled": (bool, None),
        "listen": (str, None),
        "token": (str, None),
        "model_dirs": (list, None),
        "pid_series_after_s": (_NUM, (0, 86400)),
    },
    "fleet": {"boxes": (list, None)},  # [{url = "http://box:9835", token_file = "/abs"}]
    "alerts": {
        "urls": (list, None),  # apprise URLs: ntfy://, slack://, discord://, mailto://, json://
        "command": (str, None),  # run with the alert as JSON on stdin
        "cooldown_s": (_NUM, (0, 86400 * 7)),
        "pressure_warning_pct": (_NUM, (0.1, 100)),
        "pressure_critical_pct": (_NUM, (0.1, 100)),
        "clear_drop_pct": (_NUM, (0, 50)),
        "hold_s": (_NUM, (0, 86400)),
        "collector_hold_s": (_NUM, (0, 86400)),
        "surprise_pct": (_NUM, (0, 1000)),  # monitor/analysis/judge.py: over by this much AND
        "surprise_min_mib": (_NUM, (0, 1024 * 1024)),  # by this many MiB
        "oom_lead_s": (_NUM, (0, 86400 * 7)),  # a steady fill alerts this long ahead
    },
}


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """The line where ``key`` (or the ``[section]`` header) is written, for messages."""
    lines = text.splitlines()
    in_section = key is None
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if re.match(rf"^\[\s*{re.escape(section)}\s*\]", stripped):
            if key is None:
                return number
            in_section = True
            continue
        if stripped.startswith("["):
            in_section = False
        if in_section and key and re.match(rf"^{re.escape(key)}\s*=", stripped):
            return number
    return None


def _where(path: Path, text: str, section: str, key: str | None = None) -> str:
    line = _line_of(text, section, key)
    return f"{path}:{line}" if line else str(path)


MAX_CONFIG_BYTES = 1 << 20  # the shipped example is 5 KiB


def read_text(path: Path) -> str:
    """The config file's text, read through one descriptor: opened ``O_NONBLOCK`` (a FIFO
    never blocks the open), a regular file only (``/dev/zero``, a FIFO, a folder are
    refused; ``/dev/null`` reads as empty), at most :data:`MAX_CONFIG_BYTES` (issue 28;
    DESIGN.md, security stance: bounded reads of files others could touch)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3):
            return ""  # /dev/null: the usual way to say "no config file"
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"config file {path} is not a regular file")
        try:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None


def read_file(path: Path) -> dict[str, dict[str, Any]]:
    """Parse and validate a config file; raise ConfigError naming the key and line."""
    import tomllib  # only when there is a file to read

    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError(f"{path}: not valid TOML: nested too deeply") from None
    for section, values in data.items():
        if section not in _SCHEMA:
            known = ", ".join(f"[{s}]" for s in _SCHEMA)
            raise ConfigError(
                f"{_where(path, text, section)}: unknown section [{section}] (known: {known})"
            )
        if not isinstance(values, dict):
            raise ConfigError(f"{_where(path, text, section)}: '{section}' must be a [table]")
        for key, value in values.items():
            _check(path, text, section, key, value)
    return data


def _check(path: Path, text: str, section: str, key: str, value: Any) -> None:
    schema = _SCHEMA[section]
    where = _where(path, text, section, key)
    if section == "budgets":
        if isinstance(value, bool) or not isinstance(value, _NUM) or not 0 < value < math.inf:
            raise ConfigError(f"{where}: [budgets] {key!r} must be a positive number of GiB")
        return
    if key not in schema:
        raise ConfigError(
            f"{where}: unknown key '{key}' in [{section}] (known: {', '.join(schema)})"
        )
    kind, rule = schema[key]
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        names = "number" if kind is _NUM else kind.__name__
        raise ConfigError(f"{where}: [{section}] {key} must be a {names}, not {value!r}")
    if isinstance(rule, tuple) and len(rule) == 2 and all(isinstance(r, _NUM) for r in rule):
        low, high = rule
        if not low <= value <= high:
            raise ConfigError(f"{where}: [{section}] {key} = {value} is outside {low}..{high}")
    elif isinstance(rule, tuple) and value not in rule:
        raise ConfigError(f"{where}: [{section}] {key} must be one of {', '.join(rule)}")
    if section == "http" and key == "model_dirs":
        for item in value:
            if not isinstance(item, str) or not os.path.isabs(item) or "\0" in item:
                raise ConfigError(
                    f"{where}: [http] model_dirs must list absolute folders, not {item!r}"
                )
    if section == "fleet" and key == "boxes":
        _check_fleet(where, value)
    if section == "collectors" and key == "enabled":
        from collectors.registry import REGISTRY  # every collector: only when asked

        names = {spec.name for spec in REGISTRY}
        for item in value:
            if item not in names:
                raise ConfigError(
                    f"{where}: unknown collector {item!r} (known: {', '.join(sorted(names))})"
                )


def _check_fleet(where: str, boxes: list[Any]) -> None:
    """``[fleet] boxes``: tables of ``url`` (http(s)://HOST:PORT, each once) and an
    optional absolute ``token_file``."""
    seen: set[str] = set()
    for box in boxes:
        if not isinstance(box, dict) or not isinstance(box.get("url"), str):
            raise ConfigError(
                f'{where}: [fleet] boxes must list tables like {{ url = "http://box:9835", '
                f'token_file = "/etc/vramscope/box.token" }}, not {str(box)[:60]!r}'
            )
        unknown = set(box) - {"url", "token_file"}
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {sorted(unknown)[0]!r} in a [fleet] box "
                "(known: url, token_file)"
            )
        key = box_key(box["url"])
        if key is None:
            raise ConfigError(
                f"{where}: [fleet] url {box['url'][:80]!r}: expected http://HOST:PORT"
            )
        if key in seen:
            raise ConfigError(f"{where}: [fleet] lists {box['url'][:80]} twice")
        seen.add(key)
        token_file = box.get("token_file")
        if token_file is not None and (
            not isinstance(token_file, str) or not os.path.isabs(token_file) or "\0" in token_file
        ):
            raise ConfigError(f"{where}: [fleet] token_file must be an absolute path")


def box_key(url: str) -> str | None:
    """How a box's URL is matched between ``--remote`` and ``[fleet]``: scheme and host
    lower-cased, the port explicit, no trailing slash; None: not an http(s) URL."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    scheme = parts.scheme.lower()
    port = port or (443 if scheme == "https" else 80)
    return f"{scheme}://{parts.hostname.lower()}:{port}{parts.path.rstrip('/')}"


def load(
    config_path: Path | None = None,
    *,
    db: Path | None = None,
    interval_s: float | None = None,
    proc_root: Path | None = None,
    sys_root: Path | None = None,
    log_level: str | None = None,
) -> Config:
    """Defaults, then the config file (explicit, or the default one if present), then flags."""
    path = config_path
    if path is None and default_config_path().exists():
        path = default_config_path()
    data = read_file(path) if path is not None else {}
    daemon = data.get("daemon", {})
    coll = data.get("collectors", {})
    ret = data.get("retention", {})
    paths = data.get("paths", {})
    from collectors.base import CollectorOptions, Roots

    base = Config()
    roots = Roots(
        proc=proc_root or Path(paths.get("proc_root", base.roots.proc)),
        sys=sys_root or Path(paths.get("sys_root", base.roots.sys)),
    )
    options = CollectorOptions(
        **{k: coll[k] for k in ("top_n", "max_tracked", "rescan_s", "pss_interval_s") if k in coll}
    )
    if interval_s is not None and not 0.05 <= interval_s <= 3600:
        raise ConfigError(f"--interval {interval_s} is outside 0.05..3600 seconds")
    enabled = coll.get("enabled")
    db_path = db or Path(os.path.expanduser(daemon.get("db", str(base.db_path))))
    if not str(db_path).strip() or db_path.is_dir() or str(db_path).endswith("/"):
        where = "--db" if db else f"[daemon] db in {path}"
        raise ConfigError(f"{where} must name a database file, not {str(db_path)!r}")
    named_by = "--db" if db else f"[daemon] db of {path}" if "db" in daemon else None
    return Config(
        db_path=db_path.resolve(),  # one lock per real file, whatever the spelling
        db_named_by=named_by,
        interval_s=float(interval_s if interval_s is not None else daemon.get("interval_s", 1.0)),
        prune_interval_s=float(daemon.get("prune_interval_s", base.prune_interval_s)),
        integrity_check_s=float(daemon.get("integrity_check_s", base.integrity_check_s)),
        log_level=log_level or daemon.get("log_level", base.log_level),
        roots=roots,
        collectors=tuple(enabled) if enabled is not None else None,
        options=options,
        retention=Retention(**ret),
        gpu_overhead_mib=int(data.get("estimate", {}).get("gpu_overhead_mib", 300)),
        budgets_gib={k: float(v) for k, v in data.get("budgets", {}).items()},
        swap_url=data.get("llama_swap", {}).get("url"),
        swap_config=Path(data["llama_swap"]["config"])
        if data.get("llama_swap", {}).get("config")
        else None,
        alert_urls=tuple(str(u) for u in data.get("alerts", {}).get("urls", ())),
        alert_command=data.get("alerts", {}).get("command"),
        alert_cooldown_s=float(data.get("alerts", {}).get("cooldown_s", 600)),
        alert_settings={
            k: float(v)
            for k, v in data.get("alerts", {}).items()
            if k not in ("urls", "command", "cooldown_s")
        },
        http_listen=None
        if data.get("http", {}).get("enabled") is False
        else data.get("http", {}).get("listen", "127.0.0.1:9835"),
        http_token=data.get("http", {}).get("token"),
        http_model_dirs=tuple(data.get("http", {}).get("model_dirs", ())),
        http_pid_series_after_s=float(data.get("http", {}).get("pid_series_after_s", 30.0)),
        log_files=tuple(str(x) for x in data.get("logs", {}).get("files", ())),
        journal_units=tuple(str(x) for x in data.get("logs", {}).get("journal_units", ())),
        growth_horizon_tokens=int(
            data.get("predict", {}).get("growth_horizon_tokens", base.growth_horizon_tokens)
        ),
        fleet=tuple(
            FleetBox(b["url"], Path(b["token_file"]) if b.get("token_file") else None)
            for b in data.get("fleet", {}).get("boxes", ())
        ),
        source=path,
    )


_HTTP_KEYS = (
    ("listen", "http_listen"),
    ("token", "http_token"),
    ("model_dirs", "http_model_dirs"),
    ("pid_series_after_s", "http_pid_series_after_s"),
)


def keep_running_http(old: Config, new: Config) -> tuple[Config, str | None]:
    """SIGHUP does not re-read [http]: the HTTP server keeps its socket, token and model
    folders until a restart (rebinding would drop the port Prometheus scrapes, and a new
    address can fail to bind once the old one is closed). Returns ``new`` with the running
    [http] values (so every reader agrees with the server) and, when the file changed
    them, the one line to log."""
    changed = [key for key, name in _HTTP_KEYS if getattr(new, name) != getattr(old, name)]
    if not changed:
        return new, None
    said = f"[http] {', '.join(changed)} changed"
    if "listen" in changed:
        others = [key for key in changed if key != "listen"]
        said = (
            f"[http] listen changed from {old.http_listen or 'off'} to {new.http_listen or 'off'}"
        )
        said += f" (and {', '.join(others)})" if others else ""
    where = f"on {old.http_listen}" if old.http_listen else "off"
    kept = replace(new, **{name: getattr(old, name) for _key, name in _HTTP_KEYS})
    return kept, f"{said}: needs a restart (systemctl restart vramscope); HTTP stays {where}"
