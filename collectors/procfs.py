"""The ``/proc`` collector: the host memory pool as a device, and tracked processes.

Sources (proc(5); units as the kernel prints them):
- ``/proc/meminfo`` (kB): MemTotal, MemAvailable, MemFree, Shmem, Unevictable, Mlocked,
  HugePages_Total/Free x Hugepagesize, SwapTotal/SwapFree. ``used = MemTotal -
  MemAvailable``, as ``free(1)`` reports it. GPU memory on an APU (GTT) lowers MemAvailable
  but is in no process's RSS (sources.md section 4.1): the DRM collector attributes it.
- ``/proc/PID/stat`` (identity: comm, ppid, start time in clock ticks, field 22), read once
  per process, when it first appears, and again when it exec'd (a wrapper's ``exec
  llama-server`` keeps its pid): the pids the process-event connector saw exec since the
  last tick (``Tick.execs``), or without it every tick during a process's first 5 s.
- ``/proc/PID/cmdline`` only for a process whose comm or executable (``readlink
  /proc/PID/exe``, when comm alone does not say) could be an inference server's
  (collectors/tracking.py ``could_be_server``: a known program, vLLM's or sglang's
  renamed processes, Python), redacted and kept only when it is one; any other
  process's argv is read when it is first tracked (a GPU holder, the top N), so a process
  that comes and goes between two rescans costs one ``stat`` read (issue 32, churn).
- ``/proc/PID/status`` (kB): RssAnon, RssFile, RssShmem, VmSwap, VmHWM, VmLck, Uid - for
  tracked processes, every tick; it costs ~20 us whatever the process size. Only those
  lines (and State) are picked out (``_fs.pick_kv``), and while they are the same bytes as
  last tick's the same ``ProcessMemory`` and ``ProcessInfo`` objects are handed out again
  (an idle process is not re-parsed or rebuilt: issue 32 item 3).
- ``/proc/PID/statm`` (pages): resident size of every process, to rank the top N, every
  ``rescan_s`` (and the first tick).
- ``/proc/PID/cwd`` (a link, ``readlink`` only, once per tracked process): the directory
  relative paths on its command line are relative to.
- ``/proc/PID/smaps_rollup`` (kB): Pss, for one tracked process per tick at most, each
  at most every ``pss_interval_s``: it walks the page tables (sources.md section 4.3).

Tracked = inference servers by argv (collectors/tracking.py; Python processes are also
checked for a loaded libtorch in ``/proc/PID/maps`` during their first 10 minutes) and
every process a GPU collector saw holding memory this tick, all of them whatever
``max_tracked`` says (issue 29: nothing holding GPU memory is dropped), then the top N by
resident memory while fewer than ``max_tracked`` are tracked. What the cap leaves out of
the top N is counted in ``Reading.untracked`` (processes and their resident bytes), for
``status`` and ``/metrics``. A process that vanishes or is denied
mid-scan is skipped; a tracked one that is gone is reported in ``Reading.exited``, and so
is one that exited but is still listed, unreaped (``State: Z``): never a live process,
with its exit code or signal from ``/proc/PID/stat`` field 52 when that is readable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from collectors import _fs, cgroup
from collectors.base import (
    CgroupMemory,
    CollectorOptions,
    DeviceSample,
    ProcessInfo,
    ProcessMemory,
    Reading,
    Roots,
    Tick,
    Untracked,
)
from collectors.redact import redact_argv
from collectors.tracking import could_be_server, engine_of, is_python

if TYPE_CHECKING:
    from collectors.base_rare import ExitedProcess, HiddenProcess

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS_HZ = os.sysconf("SC_CLK_TCK")
TORCH_CHECK_WINDOW_S = 600.0
# A process this young is checked for an exec every tick (its comm changed): a wrapper
# (``sh -c '...; exec llama-server'``, a unit's start script) keeps its pid and start time.
# With the process-event connector running, only the pids it saw exec are re-read
# (``Tick.execs``), whatever their age.
EXEC_CHECK_WINDOW_S = 5.0
_HIDEPID_HINT = "/proc is mounted with hidepid=; run vramscope as root or in the proc gid"
# the only lines read of /proc/meminfo and /proc/PID/status (``_fs.pick_kv``)
MEMINFO_KEYS = (
    b"MemTotal",
    b"MemAvailable",
    b"MemFree",
    b"Shmem",
    b"Unevictable",
    b"Mlocked",
    b"Hugepagesize",
    b"HugePages_Total",
    b"HugePages_Free",
    b"SwapTotal",
    b"SwapFree",
)
STATUS_KEYS = (b"State", b"Uid", b"VmHWM", b"VmLck", b"RssAnon", b"RssFile", b"RssShmem", b"VmSwap")


@dataclass(slots=True)
class _Proc:
    """What we remember about one process between ticks."""

    ino: int
    start_ticks: int
    ppid: int
    comm: str
    argv: tuple[str, ...] | None  # redacted; None: not read yet (not a server)
    engine: str | None
    python: bool
    rss_bytes: int = 0
    torch_checked: bool = False
    uid: int | None = None
    pss_read_ms: int | None = None
    cwd: str | None = None
    cwd_read: bool = False
    zombie: bool = False  # exited, not reaped: reported once in Reading.exited
    young_until_ms: int = 0  # its stat re-read each tick till then, for an exec (no connector)
    # last tick's status lines and what was built of them, reused while equal (issue 32)
    status: dict[str, bytes] | None = None
    row: ProcessMemory | None = None
    info: ProcessInfo | None = None


def parse_stat(data: bytes) -> tuple[str, int, int] | None:
    """``/proc/PID/stat`` -> (comm, ppid, start_ticks). comm may hold spaces and ')'."""
    open_paren, close_paren = data.find(b"("), data.rfind(b")")
    if open_paren < 0 or close_paren < open_paren:
        return None
    comm = data[open_paren + 1 : close_paren].decode("utf-8", "replace")
    rest = data[close_paren + 2 :].split()
    try:
        return comm, int(rest[1]), int(rest[19])
    except (IndexError, ValueError):
        return None


def parse_cmdline(data: bytes) -> tuple[str, ...]:
    """NUL-separated argv; a process that rewrote its title may use spaces instead."""
    parts = data.rstrip(b"\0").split(b"\0")
    if len(parts) == 1 and b" " in parts[0]:
        parts = parts[0].split()
    return tuple(p.decode("utf-8", "replace") for p in parts if p)


def host_device(meminfo: bytes) -> DeviceSample:
    """The host RAM pool as a device, from ``/proc/meminfo`` text."""
    f = _fs.pick_kv(meminfo, MEMINFO_KEYS)
    total = _fs.kib_field(f, "MemTotal")
    available = _fs.kib_field(f, "MemAvailable")
    page = _fs.kib_field(f, "Hugepagesize")
    hp_total, hp_free = _count(f, "HugePages_Total"), _count(f, "HugePages_Free")
    return DeviceSample(
        device_id="host",
        collector="procfs",
        vendor="host",
        name="Host RAM",
        memory_kind="host",
        total_bytes=total,
        used_bytes=None if total is None or available is None else total - available,
        free_bytes=_fs.kib_field(f, "MemFree"),
        available_bytes=available,
        shmem_bytes=_fs.kib_field(f, "Shmem"),
        unevictable_bytes=_fs.kib_field(f, "Unevictable"),
        mlocked_bytes=_fs.kib_field(f, "Mlocked"),
        hugepages_total_bytes=None if page is None or hp_total is None else hp_total * page,
        hugepages_free_bytes=None if page is None or hp_free is None else hp_free * page,
        swap_total_bytes=_fs.kib_field(f, "SwapTotal"),
        swap_free_bytes=_fs.kib_field(f, "SwapFree"),
    )


def _count(fields: dict[str, bytes], key: str) -> int | None:
    try:
        return int(fields[key])
    except (KeyError, ValueError):
        return None


def parse_status(data: bytes, pid: int) -> tuple[ProcessMemory, int | None]:
    """``/proc/PID/status`` -> the host memory row and the real uid."""
    return status_row(_fs.pick_kv(data, STATUS_KEYS), pid)


def status_row(f: dict[str, bytes], pid: int) -> tuple[ProcessMemory, int | None]:
    """:func:`parse_status` of the status file's fields, parsed once (``_fs.pick_kv``)."""
    uid_field = f.get("Uid", b"").split()
    uid_raw = uid_field[0] if uid_field else b""
    uid = int(uid_raw) if uid_raw.isdigit() and len(uid_raw) <= 10 else None  # u32
    row = ProcessMemory(
        pid=pid,
        device_id="host",
        rss_anon_bytes=_fs.kib_field(f, "RssAnon"),
        rss_file_bytes=_fs.kib_field(f, "RssFile"),
        rss_shmem_bytes=_fs.kib_field(f, "RssShmem"),
        swap_bytes=_fs.kib_field(f, "VmSwap"),
        hwm_bytes=_fs.kib_field(f, "VmHWM"),
        locked_bytes=_fs.kib_field(f, "VmLck"),
    )
    return row, uid


def read_cwd(link: str) -> str | None:
    """The target of ``/proc/PID/cwd`` as text (``readlink`` only: never followed, and a
    recorded tree's link replays as the recorded path); None when denied or gone."""
    try:
        target = _fs.readlink(link)
    except OSError:
        return None
    return target if target.startswith("/") and len(target) <= 4096 else None


def parse_state(status: bytes) -> str | None:
    """The one-letter state of ``/proc/PID/status`` (``State:\tZ (zombie)`` -> "Z")."""
    return state_of(_fs.pick_kv(status, (b"State",)))


def state_of(fields: dict[str, bytes]) -> str | None:
    """:func:`parse_state` of the status file's fields."""
    value = fields.get("State", b"")
    return value[:1].decode("ascii", "replace") if value else None


def parse_exit_status(stat: bytes) -> tuple[int | None, int | None]:
    """(exit code, signal) from ``/proc/PID/stat`` field 52 ``exit_code``, a wait(2)
    status (Linux >= 3.5): ``code << 8`` for a normal exit, the signal number for a kill.
    (None, None) when the field is absent or not a number."""
    close_paren = stat.rfind(b")")
    rest = stat[close_paren + 2 :].split() if close_paren >= 0 else []
    try:
        status = int(rest[49])  # field 52; rest starts at field 3
    except (IndexError, ValueError):
        return None, None
    if status & 0x7F:
        return None, status & 0x7F
    return (status >> 8) & 0xFF, None


def parse_pss(data: bytes) -> int | None:
    return _fs.kib_field(_fs.pick_kv(data, (b"Pss",)), "Pss")


class ProcfsCollector:
    """Host pool + tracked processes from ``/proc``. Keeps per-process caches between ticks."""

    name = "procfs"

    def __init__(self, roots: Roots, options: CollectorOptions) -> None:
        self.roots = roots
        self.options = options
        self._known: dict[int, _Proc] = {}
        self._tracked: dict[int, tuple[int, int]] = {}  # pid -> (start_ticks, last_seen_ms)
        self._top: set[int] = set()
        self._last_rescan_ms: int | None = None
        self._boot_ms = self._read_boot_ms()
        self._cgroups = cgroup.memory_hierarchy(roots)
        self.argv_reads = 0  # /proc/PID/cmdline reads, for tests and benches
        self.stat_reads = 0  # /proc/PID/stat reads, for tests and benches
        self.rows_built = 0  # ProcessMemory rows parsed from a changed status, for tests
        self.infos_built = 0  # ProcessInfo objects built (else last tick's), for tests

    def close(self) -> None:
        self._known.clear()
        self._tracked.clear()

    def _read_boot_ms(self) -> int | None:
        stat = _fs.try_read_bytes(self.roots.proc / "stat")
        for line in (stat or b"").splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == b"btime" and fields[1].isdigit():
                return int(fields[1]) * 1000
        return None

    def _started_at_ms(self, start_ticks: int) -> int | None:
        if self._boot_ms is None:
            return None
        return self._boot_ms + start_ticks * 1000 // CLOCK_TICKS_HZ

    def collect(self, tick: Tick) -> Reading:
        meminfo = _fs.read_bytes(self.roots.proc / "meminfo")  # missing /proc is a fault
        host = host_device(meminfo)
        pids = tick.pids()
        self._refresh_identities(pids, tick.now_ms, tick.execs)
        due = self._last_rescan_ms is None or (
            tick.now_ms - self._last_rescan_ms >= self.options.rescan_s * 1000
        )
        if due:
            self._rescan(tick.now_ms)
            self._last_rescan_ms = tick.now_ms
        exited = self._exits(tick.now_ms)  # before _read_tracked re-registers reused PIDs
        reasons = self._choose_tracked(tick.gpu_pids)
        infos, rows, hidden, zombies = self._read_tracked(reasons, tick.now_ms)
        exited += zombies
        limits = []
        seen: dict[str, CgroupMemory | None] = {}  # servers share cgroups: read once
        for info in infos:  # servers only: their cgroup binds a load before host RAM does
            if info.engine is not None and self._cgroups is not None:
                path = cgroup.pid_cgroup(self.roots, self._cgroups, info.pid)
                if path is None:
                    continue
                if path not in seen:
                    seen[path] = cgroup.read_limit(self._cgroups, path)
                found = seen[path]
                if found is not None:
                    from collectors.base_rare import ProcessCgroup  # seldom: issue 32

                    limits.append(ProcessCgroup(info.pid, found))
        return Reading(
            devices=(host,),
            processes=tuple(infos),
            memory=tuple(rows),
            hidden=tuple(hidden),
            exited=tuple(exited),
            cgroups=tuple(limits),
            untracked=self._untracked(reasons),
        )

    def _refresh_identities(
        self, pids: dict[int, int], now_ms: int, execs: frozenset[int] | None = None
    ) -> None:
        """Read stat + cmdline of processes not seen before (or whose inode changed), and
        of those that exec'd since (their comm changed): the pids in ``execs`` when the
        process-event connector says which, else every young one (issue 32, churn)."""
        known = self._known
        for pid in [p for p in known if p not in pids]:
            del known[pid]
        proc = self.roots.proc
        for pid, ino in pids.items():
            entry = known.get(pid)
            if (
                entry is not None
                and entry.ino == ino
                and (pid not in execs if execs is not None else not self._young(entry, now_ms))
            ):
                continue
            try:
                self.stat_reads += 1
                parsed = parse_stat(_fs.read_bytes(f"{proc}/{pid}/stat"))
                if parsed is None:
                    continue
                comm, ppid, start_ticks = parsed
                if (
                    entry is not None
                    and entry.start_ticks == start_ticks
                    and (entry.comm == comm or entry.zombie)
                ):
                    entry.ino = ino  # same process, not exec'd (inode recycled by procfs)
                    continue
                known[pid] = self._identify(pid, ino, comm, ppid, start_ticks)
            except OSError:  # gone, or denied (hidepid): not this tick
                if entry is None or entry.ino != ino:
                    known.pop(pid, None)
                # else: a young process re-checked for an exec; it is still listed, so
                # it stays known (a later read says whether it is gone or hidden)
                continue

    def _identify(self, pid: int, ino: int, comm: str, ppid: int, start_ticks: int) -> _Proc:
        """A new process: its argv is read only when its comm or executable could be an
        inference server's, and redacted and kept only when it is one (recognised on the raw
        argv: redaction never makes a server of a process, and the redacted argv is
        recognised again, as before). Raises OSError when the process is gone or denied."""
        entry = _Proc(ino, start_ticks, ppid, comm, None, None, comm.startswith("python"))
        started = self._started_at_ms(start_ticks)
        if started is not None:  # computed once, not each tick for each process
            entry.young_until_ms = started + int(EXEC_CHECK_WINDOW_S * 1000)
        if not could_be_server(comm) and not could_be_server(self._exe_name(pid)):
            return entry
        self.argv_reads += 1
        raw = parse_cmdline(_fs.read_bytes(f"{self.roots.proc}/{pid}/cmdline"))
        entry.python = is_python(comm, raw)
        if engine_of(comm, raw) is not None:
            entry.argv = redact_argv(raw)
            entry.engine = engine_of(comm, entry.argv)
        return entry

    def _exe_name(self, pid: int) -> str:
        """The base name of ``/proc/PID/exe``'s target; "" when unreadable (a kernel thread,
        another user's process, a recorded tree without it): unknown."""
        try:
            target = _fs.readlink(f"{self.roots.proc}/{pid}/exe")
        except OSError:
            return ""
        return os.path.basename(target.removesuffix(" (deleted)"))

    def _tracked_argv(self, pid: int, entry: _Proc) -> tuple[str, ...]:
        """The redacted argv of a tracked process, read on its first tracked tick when it
        was not read as a server's (a GPU holder, one of the top N); () when unreadable."""
        if entry.argv is None:
            self.argv_reads += 1
            raw = _fs.try_read_bytes(f"{self.roots.proc}/{pid}/cmdline")
            entry.argv = redact_argv(parse_cmdline(raw or b""))
            entry.engine = entry.engine or engine_of(entry.comm, entry.argv)
        return entry.argv

    def _young(self, entry: _Proc, now_ms: int) -> bool:
        return now_ms < entry.young_until_ms

    def _rescan(self, now_ms: int) -> None:
        """Rank every process by resident memory (statm); look for torch in Python ones."""
        proc = self.roots.proc
        for pid, entry in self._known.items():
            try:
                statm = _fs.read_bytes(f"{proc}/{pid}/statm").split()
                entry.rss_bytes = int(statm[1]) * PAGE_BYTES
            except (OSError, IndexError, ValueError):
                entry.rss_bytes = 0
            if entry.python and entry.engine is None and not entry.torch_checked:
                self._check_torch(pid, entry, now_ms)
        ranked = sorted(self._known.items(), key=lambda kv: kv[1].rss_bytes, reverse=True)
        self._top = {pid for pid, e in ranked[: self.options.top_n] if e.rss_bytes > 0}

    def _check_torch(self, pid: int, entry: _Proc, now_ms: int) -> None:
        maps = _fs.try_read_bytes(f"{self.roots.proc}/{pid}/maps")
        if maps is not None and b"libtorch" in maps:
            entry.engine = "torch"
        started = self._started_at_ms(entry.start_ticks)
        if started is None or now_ms - started > TORCH_CHECK_WINDOW_S * 1000:
            entry.torch_checked = True

    def _choose_tracked(self, gpu_pids: set[int]) -> dict[int, list[str]]:
        """pid -> reasons: every inference server and GPU holder, then the top N while
        fewer than max_tracked are tracked."""
        reasons: dict[int, list[str]] = {}
        limit = self.options.max_tracked
        groups = (
            (
                "inference",
                [p for p, e in self._known.items() if e.engine is not None and not e.zombie],
            ),
            ("gpu", sorted(p for p in gpu_pids if p in self._known and not self._known[p].zombie)),
            (
                "top",
                sorted(
                    (p for p in self._top if p in self._known),
                    key=lambda p: -self._known[p].rss_bytes,
                ),
            ),
        )
        for reason, group in groups:
            for pid in group:
                if pid in reasons:
                    reasons[pid].append(reason)
                elif reason != "top" or len(reasons) < limit:
                    reasons[pid] = [reason]
        return reasons

    def _untracked(self, reasons: dict[int, list[str]]) -> Untracked:
        """The top-N processes max_tracked left out, and what they hold resident."""
        left = [
            e
            for pid in self._top
            if pid not in reasons and (e := self._known.get(pid)) is not None and not e.zombie
        ]
        return Untracked(len(left), sum(e.rss_bytes for e in left))

    def _read_tracked(
        self, reasons: dict[int, list[str]], now_ms: int
    ) -> tuple[list[ProcessInfo], list[ProcessMemory], list[HiddenProcess], list[ExitedProcess]]:
        infos: list[ProcessInfo] = []
        zombies: list[ExitedProcess] = []
        rows: list[ProcessMemory] = []
        hidden: list[HiddenProcess] = []
        proc = self.roots.proc
        pss_budget = self.options.pss_per_tick
        pss_order = sorted(reasons, key=lambda p: self._known[p].pss_read_ms or -1)
        pss_pids: set[int] = set()
        for pid in pss_order:
            read_ms = self._known[pid].pss_read_ms
            if len(pss_pids) < pss_budget and (
                read_ms is None or now_ms - read_ms >= self.options.pss_interval_s * 1000
            ):
                pss_pids.add(pid)
        for pid, why in reasons.items():
            entry = self._known[pid]
            try:
                fields = _fs.pick_kv(_fs.read_bytes(f"{proc}/{pid}/status"), STATUS_KEYS)
                row, uid = self._status_row(entry, fields, pid)
            except PermissionError:
                from collectors.base_rare import HiddenProcess  # seldom: issue 32

                hidden.append(
                    HiddenProcess(
                        pid,
                        "permission denied reading /proc/PID/status",
                        comm=entry.comm,
                        hint=_HIDEPID_HINT,
                    )
                )
                continue
            except OSError:
                continue  # exited between listing and reading
            if state_of(fields) == "Z":  # exited; its parent has not reaped it
                zombies.append(self._zombie(pid, entry, uid, now_ms))
                continue
            if pid in pss_pids:
                entry.pss_read_ms = now_ms  # also when denied: never starve the others
                rollup = _fs.try_read_bytes(f"{proc}/{pid}/smaps_rollup")
                if rollup is not None:
                    row = replace(row, pss_bytes=parse_pss(rollup))
            entry.uid = uid
            argv = self._tracked_argv(pid, entry)
            if not entry.cwd_read:  # once: a server resolves its paths at start
                entry.cwd_read = True
                entry.cwd = read_cwd(f"{proc}/{pid}/cwd")
            infos.append(self._info(pid, entry, uid, argv, tuple(why)))
            rows.append(row)
            self._tracked[pid] = (entry.start_ticks, now_ms)
        return infos, rows, hidden, zombies

    def _status_row(
        self, entry: _Proc, fields: dict[str, bytes], pid: int
    ) -> tuple[ProcessMemory, int | None]:
        """:func:`status_row`, or last tick's row when the status lines it is made of are
        the same bytes (an idle process: most of them, most ticks)."""
        if entry.row is not None and fields == entry.status:
            return entry.row, entry.uid
        row, uid = status_row(fields, pid)
        entry.status, entry.row = fields, row
        self.rows_built += 1
        return row, uid

    def _info(
        self, pid: int, entry: _Proc, uid: int | None, argv: tuple[str, ...], why: tuple[str, ...]
    ) -> ProcessInfo:
        """The process's :class:`ProcessInfo`: last tick's object while nothing in it
        changed (the rest of it is the entry's identity, fixed until an exec replaces it)."""
        info = entry.info
        if (
            info is not None
            and info.uid == uid
            and info.argv is argv
            and info.engine == entry.engine
            and info.reasons == why
            and info.cwd == entry.cwd
        ):
            return info
        info = ProcessInfo(
            pid=pid,
            start_ticks=entry.start_ticks,
            started_at_ms=self._started_at_ms(entry.start_ticks),
            ppid=entry.ppid,
            uid=uid,
            comm=entry.comm,
            argv=argv,
            engine=entry.engine,
            reasons=why,
            cwd=entry.cwd,
        )
        entry.info = info
        self.infos_built += 1
        return info

    def _zombie(self, pid: int, entry: _Proc, uid: int | None, now_ms: int) -> ExitedProcess:
        """A zombie is an exit: reported once, with what ``/proc/PID/stat`` shows."""
        from collectors.base_rare import ExitedProcess  # seldom: issue 32 item 4

        entry.zombie = True
        _, last_seen_ms = self._tracked.pop(pid, (entry.start_ticks, now_ms))
        stat = _fs.try_read_bytes(f"{self.roots.proc}/{pid}/stat") or b""
        # field 52 is 0 for a reader without ptrace access to it: trusted only for our own
        # processes (or as root)
        readable = os.geteuid() in (0, uid)
        code, signal = parse_exit_status(stat) if readable else (None, None)
        if code is not None:
            what = f"exited with code {code}"
        elif signal is not None:
            what = f"killed by signal {signal}"
        else:
            what = "exited (exit status unreadable)"
        return ExitedProcess(
            pid,
            entry.start_ticks,
            last_seen_ms,
            how=f"{what}; not reaped by its parent (state Z)",
            comm=entry.comm,
            state="Z",
            exit_code=code,
            exit_signal=signal,
        )

    def _exits(self, now_ms: int) -> list[ExitedProcess]:
        """Tracked processes that are gone (or whose PID now belongs to another process)."""
        exited = []
        for pid, (start_ticks, last_seen_ms) in list(self._tracked.items()):
            entry = self._known.get(pid)
            if entry is not None and entry.start_ticks == start_ticks:
                continue
            from collectors.base_rare import ExitedProcess  # seldom: issue 32 item 4

            exited.append(ExitedProcess(pid, start_ticks, last_seen_ms))
            del self._tracked[pid]
        return exited
