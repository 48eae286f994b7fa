"""The memory picture of each device: capacity, who uses what, and what a new load can get.

Built from a :class:`~collectors.base.Snapshot` (live, a recorded ``status --json`` file,
or a moment in the database). Rules (sources.md sections 3-4, estimation.md section 1):

- dedicated GPU: ceiling = total - reserved; a new load can get ``total - used - margin``;
- AMD APU (unified, GTT): GPU buffers come from the GTT pool and from host RAM at once, so
  a new load can get whichever binds first of ``gtt_ceiling - gtt_used`` (+ free VRAM
  carve-out) and the host's ``MemAvailable``, minus the margin;
- NVIDIA unified (GB10/Jetson): the pool is host RAM: ``MemAvailable - margin``;
- host: ``MemAvailable - margin`` (page cache counts as available: it is reclaimable);
- a launch in a memory cgroup (systemd ``MemoryMax=``, a container, llama-swap's unit) gets
  host memory only up to the cgroup's room, ``memory.max - memory.current`` of the tightest
  ancestor (collectors/cgroup.py): where that is below ``MemAvailable`` the cgroup binds,
  for the host and for a unified pool alike.

``others_bytes`` is device use not attributed to any tracked or hidden process (other
users' processes, the display, CUDA contexts NVML does not list): :func:`unattributed_bytes`,
the one place it is computed. A hidden process (a pid in another PID namespace that NVML
still reports) is a row of its own with its bytes, never folded into "others".
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.base import (
    CgroupMemory,
    DeviceSample,
    ProcessInfo,
    ProcessMemory,
    Snapshot,
    Untracked,
)

if TYPE_CHECKING:
    from collectors.base_rare import HiddenProcess
from monitor.errors import InputError
from monitor.units import GIB

DEFAULT_MARGIN_BYTES = GIB // 2


@dataclass(frozen=True, slots=True)
class ProcessUse:
    """One process's part of one device: VRAM+GTT on a GPU, RssAnon+RssShmem on the host
    (its mmap'd file pages are page cache, counted as available). Not its measured total
    (monitor/analysis/measured.py): views that show this part name it."""

    pid: int
    name: str  # comm, or engine + model file name when known
    bytes: int
    engine: str | None = None
    argv: tuple[str, ...] = ()
    hidden: bool = False  # a process we cannot see here (another PID namespace)
    cgroup_path: str | None = None  # its limiting memory cgroup, when it has one


@dataclass(frozen=True, slots=True)
class DevicePicture:
    device_id: str
    name: str | None
    memory_kind: str
    capacity_bytes: int | None
    used_bytes: int | None
    reserved_bytes: int | None
    free_bytes: int | None
    available_bytes: int | None  # what a new allocation can get now, before the margin
    margin_bytes: int
    processes: tuple[ProcessUse, ...] = ()
    others_bytes: int | None = None
    binding: str = ""  # which limit binds: "VRAM", "GTT", "MemAvailable", "cgroup /path"

    @property
    def headroom_bytes(self) -> int | None:
        """What a new load may take: available minus the safety margin."""
        if self.available_bytes is None:
            return None
        return self.available_bytes - self.margin_bytes


@dataclass(frozen=True, slots=True)
class Picture:
    ts_ms: int
    devices: dict[str, DevicePicture] = field(default_factory=dict)

    def get(self, device_id: str) -> DevicePicture | None:
        return self.devices.get(device_id)


def _label(info: ProcessInfo | None, pid: int) -> tuple[str, str | None, tuple[str, ...]]:
    if info is None:
        return f"pid {pid}", None, ()
    model = next((a for a in info.argv if a.endswith(".gguf")), None)
    name = f"{info.comm} ({Path(model).name})" if model else info.comm
    return name, info.engine, info.argv


def unattributed_bytes(used_bytes: int | None, attributed_bytes: int) -> int | None:
    """Device memory in use that no process we list accounts for ("others").

    ``used_bytes`` is the device's used figure as its collector gives it, and the driver's
    reserve is never taken from it again: NVML's v2 ``used`` already excludes ``reserved``
    (``total = used + free + reserved``), and where only v1 answers, ``used`` includes the
    reserve while ``reserved`` is unknown (sources.md 1.4). ``attributed_bytes`` is what
    the tracked and the hidden processes hold. Never negative (the figures are read at
    slightly different instants); ``None`` when ``used`` is unknown.
    """
    if used_bytes is None:
        return None
    return max(0, used_bytes - attributed_bytes)


def servers_cgroup(snap: Snapshot) -> CgroupMemory | None:
    """The memory cgroup limit the tracked servers run under that leaves the least room
    (``snap.cgroups``, sampled each tick by collectors/cgroup.py; room = max - (current -
    reclaimable page cache), as memcg reclaim works); None when none runs under a limit.
    A box whose servers all run in llama-swap's unit or a container gets host memory up
    to that room, not up to MemAvailable (:func:`host_room` takes the smaller)."""
    limited = [c.cgroup for c in snap.cgroups if c.cgroup.room_bytes is not None]
    return min(limited, key=lambda c: (c.room_bytes or 0, c.path), default=None)


def host_room(host: DeviceSample | None, cgroup: CgroupMemory | None) -> tuple[int | None, str]:
    """(what a new load can get of host RAM, which limit binds): ``MemAvailable`` or the
    launch's cgroup room, whichever is smaller."""
    available = host.available_bytes if host is not None else None
    room = cgroup.room_bytes if cgroup is not None else None
    if room is not None and (available is None or room < available):
        return room, f"cgroup {cgroup.path}" if cgroup is not None else ""
    return available, "MemAvailable"


def _device_picture(
    d: DeviceSample,
    rows: list[ProcessMemory],
    infos: dict[int, ProcessInfo],
    host: DeviceSample | None,
    margin: int,
    hidden: Sequence[HiddenProcess] = (),
    cgroup: CgroupMemory | None = None,
    cgroup_of: dict[int, str] | None = None,
) -> DevicePicture:
    uses = []
    for m in rows:
        if d.memory_kind == "host":
            held = (m.rss_anon_bytes or 0) + (m.rss_shmem_bytes or 0)
        else:
            held = (m.vram_bytes or 0) + (m.gtt_bytes or 0)
        if held:
            name, engine, argv = _label(infos.get(m.pid), m.pid)
            uses.append(
                ProcessUse(
                    m.pid, name, held, engine, argv, cgroup_path=(cgroup_of or {}).get(m.pid)
                )
            )
    for h in hidden:
        if h.used_bytes:
            uses.append(ProcessUse(h.pid, f"pid {h.pid} (hidden)", h.used_bytes, hidden=True))
    uses.sort(key=lambda u: -u.bytes)
    used = d.used_bytes
    others = unattributed_bytes(used, sum(u.bytes for u in uses))
    binding = ""
    available: int | None = None
    host_available, host_binding = host_room(host, cgroup)
    if d.memory_kind == "host":
        available, binding = host_room(d, cgroup)
    elif d.memory_kind == "unified" and d.gtt_total_bytes is not None:
        ceiling = d.gtt_ceiling_bytes or d.gtt_total_bytes
        gtt_room = max(0, ceiling - (d.gtt_used_bytes or 0))
        vram_room = max(0, (d.vram_total_bytes or 0) - (d.vram_used_bytes or 0))
        candidates = [(gtt_room + vram_room, "GTT")]
        if host_available is not None:
            candidates.append((host_available, host_binding))
        available, binding = min(candidates)
    elif d.memory_kind == "unified":
        available, binding = host_available, host_binding
    elif d.total_bytes is not None and used is not None:
        available = d.total_bytes - used - (d.reserved_bytes or 0)
        binding = "VRAM"
    return DevicePicture(
        device_id=d.device_id,
        name=d.name,
        memory_kind=d.memory_kind,
        capacity_bytes=d.total_bytes,
        used_bytes=used,
        reserved_bytes=d.reserved_bytes,
        free_bytes=d.free_bytes,
        available_bytes=available,
        margin_bytes=margin,
        processes=tuple(uses),
        others_bytes=others,
        binding=binding,
    )


def picture_from_snapshot(
    snap: Snapshot, margin_bytes: int = DEFAULT_MARGIN_BYTES, cgroup: CgroupMemory | None = None
) -> Picture:
    """``cgroup``: the memory cgroup limit the new load will run under (None: none)."""
    infos = {p.pid: p for p in snap.processes}
    host = next((d for d in snap.devices if d.device_id == "host"), None)
    by_device: dict[str, list[ProcessMemory]] = {}
    for m in snap.memory:
        by_device.setdefault(m.device_id, []).append(m)
    cgroup_of = {c.pid: c.cgroup.path for c in snap.cgroups}
    hidden: dict[str, list[HiddenProcess]] = {}
    for h in snap.hidden:
        if h.device_id is not None and h.used_bytes:
            hidden.setdefault(h.device_id, []).append(h)
    devices = {
        d.device_id: _device_picture(
            d,
            by_device.get(d.device_id, []),
            infos,
            host,
            margin_bytes,
            hidden.get(d.device_id, []),
            cgroup,
            cgroup_of,
        )
        for d in snap.devices
    }
    return Picture(snap.ts_ms, devices)


# a field's annotation (collectors/base.py, as written) -> the JSON values it takes
_SCALARS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "int | None": (int, type(None)),
    "float": (int, float),
    "float | None": (int, float, type(None)),
    "str": (str,),
    "str | None": (str, type(None)),
    "MemoryKind": (str,),
    "bool | None": (bool, type(None)),
}


def _checked(record: Any) -> Any:
    """``record`` (a collectors dataclass built from a recorded document) when each scalar
    field holds a value of its annotated type (a bool is no number), else InputError naming
    the field: a text where a byte count belongs would break the arithmetic later."""
    for f in dataclasses.fields(record):
        allowed = _SCALARS.get(str(f.type))
        value = getattr(record, f.name)
        if allowed is None:
            continue
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise InputError(
                f"{type(record).__name__}.{f.name} is {type(value).__name__} "
                f"{str(value)[:40]!r}, expected {f.type}"
            )
    return record


def snapshot_from_status_json(doc: dict[str, Any]) -> Snapshot:
    """A recorded ``vramscope status --json`` document back into a Snapshot (InputError
    when a scalar field holds a value of another type)."""
    snap = _snapshot_from_status_json(doc)
    if type(snap.ts_ms) is not int:
        raise InputError(f"ts_ms is {type(snap.ts_ms).__name__}, expected int")
    for record in (*snap.devices, *snap.processes, *snap.memory, *snap.hidden):
        _checked(record)
    for record in (*(c.cgroup for c in snap.cgroups), *snap.time_to_oom):
        _checked(record)
    return snap


def _snapshot_from_status_json(doc: dict[str, Any]) -> Snapshot:
    if doc.get("schema") != "vramscope.status/1":
        raise InputError(
            "not a vramscope status --json document (schema "
            f"{doc.get('schema')!r}, expected 'vramscope.status/1')"
        )
    device_fields = set(DeviceSample.__dataclass_fields__)
    devices = tuple(
        DeviceSample(**{k: v for k, v in d.items() if k in device_fields}) for d in doc["devices"]
    )
    infos, rows = [], []
    for p in doc["processes"]:
        infos.append(
            ProcessInfo(
                pid=p["pid"],
                start_ticks=p["start_ticks"],
                started_at_ms=p.get("started_at_ms"),
                ppid=p.get("ppid"),
                uid=p.get("uid"),
                comm=p["comm"],
                argv=tuple(p["argv"]),
                engine=p.get("engine"),
                reasons=tuple(p.get("reasons", ())),
                cwd=p.get("cwd"),
            )
        )
        for device_id, fields in p.get("memory", {}).items():
            rows.append(ProcessMemory(pid=p["pid"], device_id=device_id, **fields))
    from collectors.base_rare import HiddenProcess, OomForecast, ProcessCgroup

    hidden_fields = set(HiddenProcess.__dataclass_fields__)
    hidden = tuple(
        HiddenProcess(**{k: v for k, v in h.items() if k in hidden_fields})
        for h in doc.get("hidden", ())
    )
    cgroup_fields = set(CgroupMemory.__dataclass_fields__)
    cgroups = tuple(
        ProcessCgroup(
            p["pid"], CgroupMemory(**{k: v for k, v in p["cgroup"].items() if k in cgroup_fields})
        )
        for p in doc["processes"]
        if isinstance(p.get("cgroup"), dict)
    )
    features = doc.get("cpu_features")
    cpu = (
        tuple(str(f)[:32] for f in features[:16])
        if isinstance(features, list) and all(isinstance(f, str) for f in features)
        else None
    )
    forecast_fields = set(OomForecast.__dataclass_fields__)
    forecasts = tuple(
        OomForecast(**{k: v for k, v in f.items() if k in forecast_fields})
        for f in doc.get("time_to_oom") or ()
        if isinstance(f, dict) and forecast_fields <= set(f)
    )
    return Snapshot(
        doc["ts_ms"],
        devices,
        tuple(infos),
        tuple(rows),
        hidden,
        (),
        (),
        cgroups=cgroups,
        cpu_features=cpu,
        time_to_oom=forecasts,
        untracked=_untracked_of(doc.get("untracked")),
        router_env=_router_env_of(doc["processes"]),
    )


def _router_env_of(rows: list[Any]) -> tuple[tuple[int, tuple[tuple[str, str], ...]], ...]:
    """The routers and children the document recorded (monitor/servers/router.py)."""
    from monitor.servers.router import recorded_env

    out = []
    for row in rows:
        if isinstance(row, dict) and type(row.get("pid")) is int:
            pairs = recorded_env(row)
            if pairs:
                out.append((row["pid"], pairs))
    return tuple(out)


def _untracked_of(doc: object) -> Untracked | None:
    """The status JSON's ``untracked`` (None when absent or malformed: unknown)."""
    if not isinstance(doc, dict):
        return None
    n, held = doc.get("processes"), doc.get("bytes")
    if type(n) is not int or type(held) is not int or n < 0 or held < 0:
        return None
    return Untracked(n, held)


MAX_STATE_BYTES = 16 * 1024 * 1024  # a status --json of thousands of processes is < 4 MiB


def _read_state_file(path: Path) -> bytes:
    """The file's bytes: opened O_NOFOLLOW|O_NONBLOCK (no link, no FIFO that blocks),
    a regular file, at most MAX_STATE_BYTES. Raises InputError (one line)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = "a symbolic link (not followed)" if exc.errno == errno.ELOOP else exc.strerror
        raise InputError(f"cannot read the state file {path}: {why}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"cannot read the state file {path}: not a regular file")
        data = f.read(MAX_STATE_BYTES + 1)
    if len(data) > MAX_STATE_BYTES:
        raise InputError(
            f"the state file {path} is over {MAX_STATE_BYTES // (1024 * 1024)} MiB: "
            "not a vramscope status --json document"
        )
    return data


_JSON_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}


def load_state(path: Path) -> Snapshot:
    """``predict --state FILE``: a recorded ``vramscope status --json``; anything else
    (not JSON, a list, a string, a document of another shape) is one InputError line."""
    import json  # only for a state file: a live look never parses JSON

    data = _read_state_file(path)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, too deep
        raise InputError(f"cannot read the state file {path}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        kind = _JSON_KINDS.get(type(doc), "null")
        raise InputError(
            f"the state file {path} is a JSON {kind}, not a vramscope status --json "
            "document (an object)"
        )
    try:
        return snapshot_from_status_json(doc)
    except InputError as exc:
        raise InputError(f"the state file {path}: {exc}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        why = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else "a part of the wrong shape"
        raise InputError(
            f"the state file {path} is not a whole vramscope status --json document ({why})"
        ) from None
