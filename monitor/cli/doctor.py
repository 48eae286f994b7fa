"""``vramscope doctor``: what vramscope can see on this machine, what it cannot, and the fix.

Each check is a :class:`Check` with a level: ``ok``, ``info`` (works, worth knowing),
``warn`` (something is hidden) or ``fail`` (vramscope cannot do its job).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from collectors import _fs
from collectors.base import CollectorOptions, Roots, Snapshot
from monitor.config import Config
from monitor.daemon.lock import lock_holder
from monitor.daemon.sampler import Sampler
from monitor.errors import VramscopeError
from monitor.estimate import features_from_flags
from monitor.units import GIB

Level = Literal["ok", "info", "warn", "fail"]
CAP_SYS_PTRACE = 19
PTRACE_FIX = (
    "run the daemon as root, or grant CAP_SYS_PTRACE (systemd: AmbientCapabilities=CAP_SYS_PTRACE)"
)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    level: Level
    detail: str
    fix: str | None = None


def kernel_version(release: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", release)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def kernel_checks(release: str) -> list[Check]:
    """What the running kernel offers (proc(5), drm-usage-stats.rst)."""
    version = kernel_version(release)
    checks = []
    if version < (4, 5):
        checks.append(
            Check(
                "kernel",
                "fail",
                f"{release}: no RssAnon/RssFile in /proc/PID/status",
                "use Linux 4.5 or newer",
            )
        )
    elif version < (4, 14):
        checks.append(
            Check(
                "kernel",
                "warn",
                f"{release}: no /proc/PID/smaps_rollup, so no PSS",
                "use Linux 4.14 or newer",
            )
        )
    if version < (5, 14):
        checks.append(
            Check(
                "kernel",
                "warn",
                f"{release}: no DRM fdinfo, so no per-process AMD/Intel GPU memory",
                "use Linux 5.14 or newer (5.19+ for the standard drm-* keys)",
            )
        )
    elif version < (5, 19):
        checks.append(
            Check(
                "kernel", "info", f"{release}: old amdgpu fdinfo format (read, with fewer fields)"
            )
        )
    if not checks:
        checks.append(
            Check("kernel", "ok", f"{release}: fdinfo, smaps_rollup and status all present")
        )
    return checks


def _has_capability(proc: Path, bit: int) -> bool:
    try:
        for line in _fs.read_bytes(proc / "self" / "status").decode(errors="replace").splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError):
        pass
    return False


def privilege_checks(roots: Roots) -> list[Check]:
    """Can we read other users' /proc/PID/fd (needed for DRM fdinfo)?"""
    if os.geteuid() == 0 or _has_capability(roots.proc, CAP_SYS_PTRACE):
        who = "root" if os.geteuid() == 0 else "CAP_SYS_PTRACE"
        return [Check("privileges", "ok", f"running with {who}: every process can be inspected")]
    denied = total = 0
    try:
        entries = list(os.scandir(roots.proc))
    except OSError as exc:
        return [
            Check(
                "privileges",
                "fail",
                f"cannot list {roots.proc}: {exc.strerror}",
                "point --proc-root at a proc tree",
            )
        ]
    for entry in entries:
        if not entry.name.isdigit():
            continue
        total += 1
        try:
            os.listdir(Path(entry.path) / "fd")
        except PermissionError:
            denied += 1
        except OSError:
            total -= 1
    if denied:
        return [
            Check(
                "privileges",
                "warn",
                f"{denied} of {total} processes belong to other users: their GPU memory "
                "is counted in the device total but not attributed",
                PTRACE_FIX,
            )
        ]
    return [Check("privileges", "ok", f"all {total} processes can be inspected")]


def hidepid_check(roots: Roots) -> list[Check]:
    try:
        mounts = _fs.read_bytes(roots.proc / "self" / "mountinfo").decode(errors="replace")
    except OSError:
        return []
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == "/proc" and "hidepid=" in line and os.geteuid() != 0:
            return [
                Check(
                    "procfs",
                    "warn",
                    "/proc is mounted with hidepid=: other users' processes are invisible",
                    "run as root or in the gid= of the mount",
                )
            ]
    return []


def kernel_log_check(path: Path = Path("/dev/kmsg")) -> list[Check]:
    """OOM kills are read from the kernel log (monitor/logs/kmsg.py)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError as exc:
        return [
            Check(
                "kernel log",
                "warn",
                f"cannot read {path} ({exc.strerror}): OOM kills will not be recorded",
                "run the daemon as root or with CAP_SYSLOG (the systemd unit grants it)",
            )
        ]
    return [Check("kernel log", "ok", f"{path} is readable: OOM kills are recorded")]


def collector_checks(snap: Snapshot) -> list[Check]:
    checks = []
    for run in snap.runs:
        devices = [d for d in snap.devices if d.collector == run.collector]
        if run.status == "ok":
            names = ", ".join(d.name or d.device_id for d in devices) or "no devices"
            checks.append(
                Check(
                    f"collector {run.collector}", "ok", f"{names} ({run.duration_s * 1000:.1f} ms)"
                )
            )
        elif run.status == "nodata":
            checks.append(
                Check(f"collector {run.collector}", "info", f"not applicable here: {run.error}")
            )
        else:
            checks.append(
                Check(
                    f"collector {run.collector}",
                    "fail",
                    f"failed: {run.error}",
                    "report it with the output of `vramscope doctor --json`",
                )
            )
    for h in snap.hidden:
        checks.append(
            Check(
                "hidden", "warn", f"{h.comm or '?'} (pid {h.pid}): {h.reason}", h.hint or PTRACE_FIX
            )
        )
    return checks


def cpu_checks(snap: Snapshot) -> list[Check]:
    """Which of llama.cpp's CPU weight layouts this box gets: they change memory (a
    repacked weight is anonymous memory, not page cache), so the estimate uses them."""
    if snap.cpu_features is None:
        return [Check("cpu features", "info", "/proc/cpuinfo unreadable: repacking not modelled")]
    cpu = features_from_flags(snap.cpu_features)
    have = ", ".join(snap.cpu_features) or "none of AVX2/AVX-512/AMX"
    return [
        Check(
            "cpu features",
            "info",
            f"{have}: llama.cpp's CPU backend uses {cpu.describe()}; weights it repacks are "
            "anonymous memory unless the server runs with -nr",
        )
    ]


def cgroup_checks(snap: Snapshot, near_pct: float = 90.0) -> list[Check]:
    """Each tracked server's memory cgroup limit and charge: the kernel OOM-kills inside a
    cgroup at ``memory.max`` whatever host RAM has free (page cache is charged too)."""
    names = {p.pid: p.comm for p in snap.processes}
    checks = []
    for c in snap.cgroups:
        g = c.cgroup
        gib = GIB
        used = "?" if g.memory_current_bytes is None else f"{g.memory_current_bytes / gib:.2f}"
        limit = "no max" if g.memory_max_bytes is None else f"max {g.memory_max_bytes / gib:.2f}"
        high = "" if g.memory_high_bytes is None else f", high {g.memory_high_bytes / gib:.2f}"
        detail = (
            f"{names.get(c.pid, '?')} (pid {c.pid}) runs in {g.path}: {used} GiB "
            f"charged, {limit}{high} GiB"
        )
        held = g.unreclaimable_bytes  # clean page cache is reclaimed before a kill
        share = 100.0 * held / g.memory_max_bytes if g.memory_max_bytes and held else None
        if g.reclaimable_bytes:
            detail += f" ({g.reclaimable_bytes / gib:.2f} GiB of it reclaimable page cache)"
        if share is not None and share > near_pct:
            checks.append(
                Check(
                    "memory cgroup",
                    "warn",
                    f"{detail} ({share:.0f}% of its max)",
                    "raise MemoryMax= of the unit, or load less in it",
                )
            )
        else:
            checks.append(Check("memory cgroup", "info", detail))
    return checks


def database_checks(config: Config) -> list[Check]:
    return [*_database_state(config), *database_file_checks(config.db_path)]


def database_file_checks(path: Path) -> list[Check]:
    """Files beside the database that need a look: databases moved aside as corrupt, and
    ticks a stopped daemon could not write (written by the next start)."""
    from monitor.store import backlog

    checks = []
    try:
        moved = sorted(
            p
            for p in path.parent.glob(f"{glob_escape(path.name)}.corrupt-*")
            if not p.name.endswith(("-wal", "-shm"))
        )
    except OSError:
        moved = []
    if moved:
        checks.append(
            Check(
                "database",
                "warn",
                f"{len(moved)} corrupt database(s) moved aside by the daemon: "
                + ", ".join(str(p) for p in moved[:5]),
                "keep them as evidence or delete them; the daemon started a new database",
            )
        )
    from monitor.store.integrity import read_marker

    if lock_holder(path) is None and (corrupt := read_marker(path)) is not None:
        checks.append(
            Check(
                "database",
                "warn",
                f"the daemon found {path} corrupt while it ran: {corrupt}",
                "start `vramscope daemon`: it moves the file aside and starts a new one",
            )
        )
    for side in backlog.paths(path):
        if side.exists():
            checks.append(
                Check(
                    "database",
                    "warn",
                    f"{side} holds ticks a stopped daemon could not write",
                    "start `vramscope daemon`: it writes them first, then removes the file",
                )
            )
    return checks


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def daemon_health(config: Config, timeout_s: float = 5.0) -> tuple[int, str, int | None] | None:
    """(status, body, the answering daemon's pid from its X-Vramscope-Pid header; None when
    it sends none) of the /healthz on the config's loopback port, or None when it has no
    HTTP server or nothing answers."""
    if not config.http_listen:
        return None
    import urllib.error
    import urllib.request

    from monitor.http import PID_HEADER, parse_listen

    try:
        _host, port = parse_listen(config.http_listen)
    except VramscopeError:
        return None
    headers = {"Authorization": f"Bearer {config.http_token}"} if config.http_token else {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", headers=headers)
    try:
        with opener.open(request, timeout=timeout_s) as resp:
            body = resp.read(4096).decode("utf-8", "replace").strip()
            return resp.status, body, _pid_of(resp.headers.get(PID_HEADER))
    except urllib.error.HTTPError as exc:
        body = exc.read(4096).decode("utf-8", "replace").strip()
        return exc.code, body, _pid_of(exc.headers.get(PID_HEADER))
    except OSError:
        return None


def _pid_of(text: str | None) -> int | None:
    """The X-Vramscope-Pid header's pid (monitor/http/server.py), None when absent or odd."""
    return int(text) if text is not None and text.strip().isdigit() else None


def _database_state(config: Config) -> list[Check]:
    path = config.db_path
    holder = lock_holder(path)
    if holder is not None:
        return _daemon_database(config, holder)
    if path.exists():
        from monitor.store.database import classify

        kind, detail = classify(path)
        if kind in ("foreign", "not_sqlite", "directory", "unreadable"):
            return [
                Check(
                    "database",
                    "fail",
                    f"{path} is not a vramscope database ({detail or kind}); the daemon refuses it",
                    "pass --db a new path",
                )
            ]
        return [
            Check(
                "database",
                "info",
                f"{path} exists; no daemon is writing it now",
                "start one with `vramscope daemon` (or the systemd unit)",
            )
        ]
    parent = next((p for p in [path.parent, *path.parents] if p.exists()), Path("/"))
    if not os.access(parent, os.W_OK):
        return [
            Check(
                "database",
                "fail",
                f"cannot create {path}: {parent} is not writable",
                "pass --db to a writable place, or run as the service user",
            )
        ]
    return [Check("database", "info", f"{path} will be created by `vramscope daemon`")]


STALE_TICKS = 5  # as /healthz: a tick older than 5 intervals (at least STALE_MIN_S)
STALE_MIN_S = 10.0


def _daemon_database(config: Config, holder: int) -> list[Check]:
    """The database a running daemon holds: corrupt (its /healthz, or the mark it left
    beside the file), refusing writes (its /healthz; without an answer from it, its last
    tick in the file older than 5 intervals), else ok."""
    from monitor.store.integrity import read_marker

    path = config.db_path
    health = daemon_health(config)
    others: list[Check] = []
    if health is not None and health[2] != holder:  # another daemon's port, or an old one
        others.append(_not_this_daemon(config, holder, health[2]))
        health = None
    corrupt = read_marker(path)
    if corrupt is None and health is not None and health[1].startswith("database corrupt:"):
        corrupt = health[1]
    if corrupt is not None:
        return [
            Check(
                "database",
                "fail",
                f"the daemon (pid {holder}) found {path} corrupt: {corrupt}",
                "restart the daemon: it moves the file aside and starts a new database",
            ),
            *others,
        ]
    why = None
    if health is not None and health[0] != 200 and health[1].startswith("database:"):
        why = health[1]
    elif health is None and (stale := _stale_for_s(path)) is not None:
        why = f"no tick written for {stale:.0f} s (its /healthz did not answer)"
    if why is not None:
        return [
            Check(
                "database",
                "fail",
                f"the daemon (pid {holder}) cannot write {path}: {why}",
                "free disk space, stop the other writer, or fix the file's "
                "permissions; the daemon keeps sampling and writes the backlog "
                "when it can",
            ),
            *others,
        ]
    return [
        Check("database", "ok", f"{path} is being written by the daemon (pid {holder})"),
        *others,
    ]


def _not_this_daemon(config: Config, holder: int, answered: int | None) -> Check:
    """The /healthz on the config's port is not from the daemon writing its database: its
    answer says nothing about this database, and is not read as if it did."""
    who = f"pid {answered}" if answered is not None else "a daemon that does not say its pid"
    return Check(
        "daemon",
        "warn",
        f"{config.http_listen} is answered by {who}, not by the daemon writing "
        f"{config.db_path} (pid {holder}): its health is not this database's",
        "pass the --config (or --db) of the daemon you mean; each daemon needs its own "
        "[http] listen",
    )


def _stale_for_s(path: Path) -> float | None:
    """Seconds since the daemon last wrote a tick (or started), when that is longer than
    ``STALE_TICKS`` of its intervals (from its daemon_started event); else None."""
    import sqlite3

    from monitor.store.database import StoreError, open_readonly
    from monitor.store.reads import daemon_last_write

    try:
        db = open_readonly(path)
        try:
            last_ms, interval_s = daemon_last_write(db)
        finally:
            db.close()
    except (StoreError, sqlite3.Error):
        return None
    if last_ms is None:
        return None
    age_s = time.time() - last_ms / 1000
    return age_s if age_s > max(STALE_TICKS * (interval_s or 1.0), STALE_MIN_S) else None


def exit_status_check(kernel_log_readable: bool) -> list[Check]:
    """Which source gives exit codes and signals: the process-event connector
    (collectors/proc_events.py), else zombies' /proc/PID/stat, else kernel records only."""
    from collectors.proc_events import ProcEventListener

    listener = ProcEventListener()
    working = listener.open() and listener.verify()
    listener.close()
    if working:
        return [
            Check(
                "exit status",
                "ok",
                "source: connector (the kernel's process events): "
                "each tracked process's exit code or signal is recorded",
            )
        ]
    fallback = "zombie (a server's /proc/PID/stat while its parent has not reaped it)" + (
        " and kernel log (OOM kills)" if kernel_log_readable else ""
    )
    return [
        Check(
            "exit status",
            "warn",
            f"source: {fallback} only; {listener.error}: most exits are recorded "
            "without a code or signal",
            "run the daemon as root or with CAP_NET_ADMIN",
        )
    ]


def run_checks(config: Config) -> list[Check]:
    options = CollectorOptions(pss_per_tick=0)
    sampler = Sampler(config.roots, options, config.collectors)
    try:
        snap = sampler.sample()
    finally:
        sampler.close()
    return [
        *kernel_checks(os.uname().release),
        *privilege_checks(config.roots),
        *hidepid_check(config.roots),
        *(kernel := kernel_log_check()),
        *exit_status_check(kernel[0].level == "ok"),
        *collector_checks(snap),
        *cgroup_checks(snap),
        *cpu_checks(snap),
        *database_checks(config),
    ]


def render(checks: list[Check]) -> str:
    mark = {"ok": "ok  ", "info": "info", "warn": "WARN", "fail": "FAIL"}
    lines = []
    for c in checks:
        lines.append(f"[{mark[c.level]}] {c.name}: {c.detail}")
        if c.fix and c.level != "ok":
            lines.append(f"       fix: {c.fix}")
    return "\n".join(lines)
