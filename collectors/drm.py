"""DRM collector: AMD (amdgpu) and Intel (i915, xe) GPUs through sysfs and DRM fdinfo.

Works without ROCm or any vendor library: everything comes from files.

Sources (all under the injected :class:`~collectors.base.Roots`):

* Devices: ``sys/class/drm/cardN`` (primary nodes only; ``card1-HDMI-A-1`` connectors are
  skipped), ``device/uevent`` for ``DRIVER=``, ``PCI_ID=`` and ``PCI_SLOT_NAME=``, and
  ``device/drm/`` for the card's render node (``renderD128``).
* amdgpu totals: ``device/mem_info_{vram,vis_vram,gtt}_{total,used}``, one decimal integer
  in **bytes** each (amdgpu_vram_mgr.c / amdgpu_gtt_mgr.c); ``device/gpu_busy_percent``
  (percent); ``device/product_name`` (FRU, often absent); hwmon ``temp1_input``
  (millidegrees C) and ``power1_average`` or ``power1_input`` (microwatts);
  ``device/pp_dpm_mclk``, the memory clock's DPM levels (``1: 456Mhz *``, the current one
  marked ``*``; amdgpu_pm.c), in MHz as the driver counts them (GDDR6: half the data rate
  a vendor's spec sheet shows).
* GTT ceiling: ``sys/module/ttm/parameters/pages_limit`` in 4 KiB pages (0644, world
  readable); ``gtt_ceiling_bytes = min(gtt_total, pages_limit * 4096)``, else gtt_total.
* xe discrete VRAM size: ``device/tileN/physical_vram_size_bytes`` (bytes, xe_tile_sysfs.c;
  the *physical* size, which includes reserved/stolen pages, so it slightly overstates what
  is allocatable). i915 publishes no VRAM total in mainline; xe and i915 publish no
  "VRAM used" at all, so those stay ``None``. Integrated Intel (PCI ``0000:00:02.0``) is
  ``unified`` with totals unknown.
* Per process: ``proc/PID/fd/*`` links to ``/dev/dri/renderD*`` / ``/dev/dri/card*``, and
  only for those ``proc/PID/fdinfo/FD`` (Documentation/gpu/drm-usage-stats.rst).

APU detection (amdgpu), most authoritative first; each layer only ever says "APU":

1. KFD topology ``sys/class/kfd/kfd/topology/nodes/*/properties``: the node that matches the
   card (``domain`` + ``location_id`` = bus<<8|devfn, or ``drm_render_minor``) has both
   ``cpu_cores_count > 0`` and ``simd_count > 0`` (a combined CPU+GPU HSA node).
2. The PCI device id is in :data:`AMD_APU_DEVICE_IDS` (names from pci.ids).
3. glances' heuristic: an hwmon ``in1_input`` (northbridge voltage) exists.

An APU is ``memory_kind="unified"`` with ``total = vram_total + gtt_total`` and
``used = vram_used + gtt_used`` (carve-out + GTT: the model lives in GTT); a dGPU is
``dedicated`` with total/used = VRAM. ``free = total - used`` when both are known.

fdinfo rules (units, regions, de-duplication):

* ``key:<whitespace>value`` lines; values ``<uint>`` bytes, ``<uint> KiB``, ``<uint> MiB``
  (the same key can change unit between samples) or old ``kB``. amdgpu prints
  ``drm-memory-gtt: \\t`` (space before the tab): whitespace is stripped. Malformed lines
  and unknown keys are ignored; garbage values never raise.
* Per region: ``drm-resident-<r>`` if present, else legacy ``drm-memory-<r>``, else
  ``drm-total-<r>`` (total counts buffers that need not be backed yet).
* Region -> field: amdgpu ``vram``/``gtt``/``cpu`` -> ``vram_bytes``/``gtt_bytes``/
  ``cpu_bytes``; i915 ``localN`` -> vram, ``system0`` -> gtt (GPU buffers in system RAM);
  xe ``vramN`` -> vram (summed), ``gtt`` -> gtt, ``system`` -> cpu. Stolen, gds, gws, oa
  and doorbell regions are ignored. amdgpu on kernels 5.14-5.18 printed ``pdev:``,
  ``pasid:``, ``vram mem:``/``gtt mem:``/``cpu mem:`` in kB; those map the same way.
* One DRM client is counted once: key ``(device, drm-client-id)``, or ``(device, pasid)``
  on the old format; a client reached through several fds or processes (dup, fork,
  SCM_RIGHTS) is attributed to the lowest pid. Distinct clients are summed per (pid,
  device). fdinfo is matched to a device by ``drm-pdev``, else by the fd's device node,
  else to the only device. Rows are emitted for pids whose attributed memory is > 0.

Permissions: fd and fdinfo need ptrace read access (same uid, root or CAP_SYS_PTRACE). A
denied inference server (by comm/cmdline, world-readable), or a process whose DRM link was
seen but whose fdinfo was not, is reported as a :class:`HiddenProcess` with the fix.
Processes that exit mid-scan are skipped silently.

Cost: every process is fd-scanned on the first tick and then every ``rescan_s``; other
ticks scan only known DRM holders, hidden ones, ``tick.gpu_pids``, pids new since the last
tick (or whose ``/proc/PID`` inode changed) and pids first seen less than 30 s ago.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from collectors import tracking
from collectors._fs import (
    GONE,
    exists,
    read_bytes,
    readlink,
    try_read_bytes,
    try_read_int,
    try_read_text,
)
from collectors._fs import listdir as _fs_listdir
from collectors.base import (
    CollectorOptions,
    DeviceSample,
    HiddenProcess,
    MemoryKind,
    NoData,
    ProcessMemory,
    Reading,
    Roots,
    Tick,
)
from collectors.probes import CARD_RE, DRIVERS, parse_uevent

PAGE_BYTES = 4096  # ttm.pages_limit is in 4 KiB pages (sources.md 3.3)
YOUNG_MS = 30_000  # a server opens the GPU shortly after exec
INTEL_IGPU_SLOT = "0000:00:02.0"  # Intel integrated graphics always sits at 00:02.0

# AMD APU PCI device ids (vendor 0x1002) -> pci.ids name. Read in pci.ids mirrors
# (pciutils/pciids, https://pci-ids.ucw.cz): 1586, 150e, 1114, 15bf, 1681, 164e; the
# others are the same database's entries for older APUs.
AMD_APU_DEVICE_IDS: dict[int, str] = {
    0x1586: "Strix Halo [Radeon 8050S / 8060S]",
    0x150E: "Strix [Radeon 880M / 890M]",
    0x1114: "Krackan [Radeon 840M / 860M]",
    0x15BF: "Phoenix1 [Radeon 740M / 760M / 780M]",
    0x15C8: "Phoenix2",
    0x1681: "Rembrandt [Radeon 680M]",
    0x164E: "Raphael",
    0x13C0: "Granite Ridge",
    0x1506: "Mendocino",
    0x163F: "VanGogh",
    0x1638: "Cezanne",
    0x164C: "Lucienne",
    0x15E7: "Barcelo",
    0x1636: "Renoir",
    0x15D8: "Picasso/Raven 2",
    0x15DD: "Raven Ridge",
}


def _apu_name(pci_id: str | None) -> str | None:
    """``AMD Strix Halo [...]`` for a known APU id, else None."""
    try:
        name = AMD_APU_DEVICE_IDS.get(int((pci_id or "").partition(":")[2], 16))
    except ValueError:
        return None
    return f"AMD {name}" if name else None


HIDDEN_REASON = "permission denied reading /proc/{pid}/fdinfo (GPU memory not attributable)"
HIDDEN_HINT = (
    "fdinfo needs ptrace read access to the process: run vramscope as root or grant "
    "CAP_SYS_PTRACE (systemd: AmbientCapabilities=CAP_SYS_PTRACE)"
)

_UNITS: dict[bytes, int] = {
    b"": 1,
    b"b": 1,
    b"kib": 1024,
    b"kb": 1024,  # old amdgpu "vram mem:\t%llu kB"
    b"mib": 1024**2,
    b"gib": 1024**3,
}
_CARD_RE = CARD_RE
_STATS = ("resident", "memory", "total")  # preference order per region
_OLD_AMDGPU = {"vram mem": "vram", "gtt mem": "gtt", "cpu mem": "cpu"}  # kernels 5.14-5.18


# ---------------------------------------------------------------------------------------
# Pure parsing


@dataclass(frozen=True, slots=True)
class ClientMemory:
    """One DRM client as its fdinfo describes it; byte fields are ``None`` when absent."""

    driver: str | None = None
    pdev: str | None = None
    client_id: int | None = None
    pasid: int | None = None
    vram_bytes: int | None = None
    gtt_bytes: int | None = None
    cpu_bytes: int | None = None

    def total_bytes(self) -> int:
        return sum(v for v in (self.vram_bytes, self.gtt_bytes, self.cpu_bytes) if v)


def parse_size(value: bytes | str) -> int | None:
    """``"123"``, ``"4 KiB"``, ``"5 MiB"``, ``"6 kB"`` -> bytes; ``None`` if malformed."""
    raw = value.encode("ascii", "replace") if isinstance(value, str) else value
    parts = raw.split()
    if not parts or len(parts) > 2:
        return None
    number = parts[0]
    unit = parts[1].lower() if len(parts) == 2 else b""
    if not number.isdigit() or len(number) > 20 or unit not in _UNITS:  # u64: 20 digits
        return None
    return int(number) * _UNITS[unit]


# "%d: %uMhz %s\n" per level, "*" on the current one; renoir-style APUs add an unnumbered
# "   %uMhz *" line when the current clock is no level (amdgpu swsmu *_print_clk_levels).
_DPM_LEVEL_RE = re.compile(rb"(?:(?:\d{1,3}|S):\s*)?(\d{1,7})\s*mhz\s*(\*?)", re.IGNORECASE)
_DPM_MAX_BYTES = 4096  # sysfs shows at most a page; a table has a handful of lines


def parse_dpm_current_mhz(data: bytes) -> float | None:
    """The current level of an amdgpu ``pp_dpm_*`` table (``0: 96Mhz\\n1: 456Mhz *``):
    the MHz of the line marked ``*``. None when no line (or lines disagreeing) is marked,
    the figure is 0, or the text is not such a table."""
    current: set[int] = set()
    for line in data[:_DPM_MAX_BYTES].splitlines():
        line = line.strip()
        if not line:
            continue
        match = _DPM_LEVEL_RE.fullmatch(line)
        if match is None:
            return None  # not a DPM table: no figure rather than a guess
        if match.group(2):
            current.add(int(match.group(1)))
    if len(current) != 1:
        return None
    (mhz,) = current
    return float(mhz) if mhz > 0 else None


def _parse_uint(value: bytes) -> int | None:
    value = value.strip()
    return int(value) if value.isdigit() and len(value) <= 20 else None  # u64: 20 digits


def region_field(driver: str | None, region: str) -> str | None:
    """Which ``ProcessMemory`` field a driver's fdinfo memory region goes to, or ``None``."""
    if driver in (None, "amdgpu") and region in ("vram", "gtt", "cpu"):
        return region
    if driver in (None, "i915"):
        if region.startswith("local") and region[5:].isdigit():
            return "vram"
        if region == "system0":
            return "gtt"
    if driver in (None, "xe"):
        if region.startswith("vram") and region[4:].isdigit():
            return "vram"
        if region == "gtt":
            return "gtt"
        if region == "system":
            return "cpu"
    return None


def parse_fdinfo(data: bytes) -> ClientMemory:
    """DRM fdinfo text -> :class:`ClientMemory`. Never raises on malformed input."""
    fields: dict[str, bytes] = {}
    regions: dict[str, dict[str, int]] = {}  # region -> stat -> bytes
    for line in data.splitlines():
        key_b, found, value = line.partition(b":")
        if not found:
            continue
        key = key_b.strip().decode("ascii", "replace")
        value = value.strip()
        if key.startswith("drm-") and key.count("-") >= 2:
            _, stat, region = key.split("-", 2)
            if stat in _STATS:
                size = parse_size(value)
                if size is not None:
                    regions.setdefault(region, {})[stat] = size
                continue
        if key in _OLD_AMDGPU:
            size = parse_size(value)
            if size is not None:
                regions.setdefault(_OLD_AMDGPU[key], {})["memory"] = size
            continue
        fields[key] = value

    driver_raw = fields.get("drm-driver")
    driver = driver_raw.decode("ascii", "replace") if driver_raw else None
    if driver is None and "pasid" in fields:
        driver = "amdgpu"  # the 5.14-5.18 amdgpu format has no drm-driver key
    pdev_raw = fields.get("drm-pdev") or fields.get("pdev")
    pdev = pdev_raw.decode("ascii", "replace").lower() if pdev_raw else None
    sums: dict[str, int] = {}
    for region, stats in regions.items():
        field_name = region_field(driver, region)
        if field_name is None:
            continue
        size = next(stats[s] for s in _STATS if s in stats)
        sums[field_name] = sums.get(field_name, 0) + size
    client_id = _parse_uint(fields.get("drm-client-id", b""))
    pasid = _parse_uint(fields.get("pasid", b""))
    return ClientMemory(
        driver=driver,
        pdev=pdev,
        client_id=client_id,
        pasid=pasid,
        vram_bytes=sums.get("vram"),
        gtt_bytes=sums.get("gtt"),
        cpu_bytes=sums.get("cpu"),
    )


def parse_kfd_properties(data: bytes) -> dict[str, int]:
    """KFD topology ``properties``: ``name value`` lines (kfd_topology.c ``%s %u``)."""
    out: dict[str, int] = {}
    for line in data.decode("ascii", "replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and len(parts[1]) <= 20:
            out[parts[0]] = int(parts[1])
    return out


def pci_location(slot: str) -> tuple[int, int] | None:
    """``"0000:c5:00.0"`` -> (domain, location_id = bus<<8 | dev<<3 | fn), as KFD has it."""
    m = re.fullmatch(r"([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", slot)
    if m is None:
        return None
    domain, bus, dev, fn = (int(g, 16) for g in m.groups())
    return domain, (bus << 8) | (dev << 3) | fn


@dataclass(frozen=True, slots=True)
class ClientRef:
    """One DRM fd of one process, as seen in ``/proc/PID/fdinfo/FD``."""

    pid: int
    fd: int
    device_id: str
    memory: ClientMemory


def attribute_clients(refs: list[ClientRef]) -> list[ProcessMemory]:
    """De-duplicate clients and sum them per (pid, device), lowest pid wins a shared client.

    Key: ``(device, drm-client-id)``, else ``(device, pasid)`` (old amdgpu), else the fd
    itself (nothing to de-duplicate on). Pids whose attributed total is 0 get no row.
    """
    clients: dict[tuple[object, ...], ClientRef] = {}
    for ref in sorted(refs, key=lambda r: (r.pid, r.fd)):
        mem = ref.memory
        key: tuple[object, ...]
        if mem.client_id is not None:
            key = (ref.device_id, "client", mem.client_id)
        elif mem.pasid is not None:
            key = (ref.device_id, "pasid", mem.pasid)
        else:
            key = (ref.device_id, "fd", ref.pid, ref.fd)
        clients.setdefault(key, ref)  # sorted by pid: the first is the lowest pid

    sums: dict[tuple[int, str], list[int | None]] = {}
    for ref in clients.values():
        acc = sums.setdefault((ref.pid, ref.device_id), [None, None, None])
        for i, value in enumerate(
            (ref.memory.vram_bytes, ref.memory.gtt_bytes, ref.memory.cpu_bytes)
        ):
            if value is not None:
                acc[i] = (acc[i] or 0) + value
    rows = []
    for (pid, device_id), (vram, gtt, cpu) in sorted(sums.items()):
        if (vram or 0) + (gtt or 0) + (cpu or 0) > 0:
            rows.append(
                ProcessMemory(pid, device_id, vram_bytes=vram, gtt_bytes=gtt, cpu_bytes=cpu)
            )
    return rows


# ---------------------------------------------------------------------------------------
# Devices


@dataclass(frozen=True, slots=True)
class DrmDevice:
    """What does not change between ticks about one DRM GPU."""

    device_id: str
    card: Path  # sys/class/drm/cardN
    driver: str
    vendor: str
    pci_slot: str | None
    pci_id: str | None  # "1002:1586"
    name: str
    memory_kind: MemoryKind
    nodes: tuple[str, ...]  # "card0", "renderD128"
    hwmon: Path | None


def _listdir(path: Path) -> list[str]:
    try:
        return _fs_listdir(path)
    except OSError:
        return []


def _kfd_nodes(sys_root: Path) -> list[dict[str, int]]:
    nodes_dir = sys_root / "class/kfd/kfd/topology/nodes"
    out = []
    for name in sorted(_listdir(nodes_dir)):
        data = try_read_bytes(nodes_dir / name / "properties")
        if data:
            out.append(parse_kfd_properties(data))
    return out


def _kfd_says_apu(nodes: list[dict[str, int]], slot: str | None, render_minors: set[int]) -> bool:
    loc = pci_location(slot) if slot else None
    for props in nodes:
        if props.get("simd_count", 0) <= 0:
            continue
        by_pci = loc is not None and (props.get("domain"), props.get("location_id")) == loc
        by_minor = props.get("drm_render_minor") in render_minors
        if (by_pci or by_minor) and props.get("cpu_cores_count", 0) > 0:
            return True
    return False


def _is_amd_apu(
    pci_id: str | None,
    slot: str | None,
    nodes: tuple[str, ...],
    kfd: list[dict[str, int]],
    hwmon: Path | None,
) -> bool:
    minors = {int(n[7:]) for n in nodes if n.startswith("renderD") and n[7:].isdigit()}
    if _kfd_says_apu(kfd, slot, minors):
        return True
    if pci_id:
        try:
            if int(pci_id.partition(":")[2], 16) in AMD_APU_DEVICE_IDS:
                return True
        except ValueError:
            pass
    return hwmon is not None and exists(hwmon / "in1_input")


def _discover(roots: Roots) -> list[DrmDevice]:
    drm_dir = roots.sys / "class/drm"
    kfd: list[dict[str, int]] | None = None
    devices: dict[str, DrmDevice] = {}
    for name in sorted(_listdir(drm_dir), key=lambda n: (len(n), n)):
        if not _CARD_RE.fullmatch(name):
            continue
        card = drm_dir / name
        uevent_data = try_read_bytes(card / "device/uevent")
        if uevent_data is None:
            continue
        uevent = parse_uevent(uevent_data)
        driver = uevent.get("DRIVER", "")
        if driver not in DRIVERS:
            continue
        slot = uevent.get("PCI_SLOT_NAME", "").lower() or None
        pci_id = uevent.get("PCI_ID", "").lower() or None
        device_id = f"drm:{slot or name}"
        if device_id in devices:
            continue
        nodes = tuple(sorted(_listdir(card / "device/drm")))
        hwmons = sorted(_listdir(card / "device/hwmon"))
        hwmon = card / "device/hwmon" / hwmons[0] if hwmons else None
        vendor = DRIVERS[driver]
        kind: MemoryKind
        if driver == "amdgpu":
            if kfd is None:
                kfd = _kfd_nodes(roots.sys)
            apu = _is_amd_apu(pci_id, slot, nodes, kfd, hwmon)
            kind = "unified" if apu else "dedicated"
            product = (try_read_text(card / "device/product_name") or "").strip()
            label = product or _apu_name(pci_id) or f"AMD GPU {pci_id or name}"
        else:
            kind = "unified" if slot == INTEL_IGPU_SLOT else "dedicated"
            label = f"Intel GPU {pci_id or name}"
        devices[device_id] = DrmDevice(
            device_id, card, driver, vendor, slot, pci_id, label, kind, nodes, hwmon
        )
    return list(devices.values())


def _sum_ints(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def pool_totals(
    memory_kind: str,
    vram_total: int | None,
    vram_used: int | None,
    gtt_total: int | None,
    gtt_used: int | None,
) -> tuple[int | None, int | None, int | None]:
    """(total, used, free) of what an AMD GPU can address: VRAM on a dGPU, carve-out VRAM
    + GTT on an APU (nvtop #428's rule; the parts stay in their own fields)."""
    if memory_kind == "unified":
        total, used = _sum_ints([vram_total, gtt_total]), _sum_ints([vram_used, gtt_used])
    else:
        total, used = vram_total, vram_used
    free = total - used if total is not None and used is not None else None
    return total, used, free


def _sample(dev: DrmDevice, ttm_pages: int | None) -> DeviceSample:
    """Read one device's totals (bytes), utilisation, temperature and power."""
    d = dev.card / "device"
    vram_total = vram_used = vis_total = vis_used = gtt_total = gtt_used = None
    ceiling = util = temp = power = mem_clock = None
    if dev.driver == "amdgpu":
        vram_total = try_read_int(d / "mem_info_vram_total")
        vram_used = try_read_int(d / "mem_info_vram_used")
        vis_total = try_read_int(d / "mem_info_vis_vram_total")
        vis_used = try_read_int(d / "mem_info_vis_vram_used")
        gtt_total = try_read_int(d / "mem_info_gtt_total")
        gtt_used = try_read_int(d / "mem_info_gtt_used")
        ceiling = gtt_total
        if gtt_total is not None and ttm_pages is not None:
            ceiling = min(gtt_total, ttm_pages * PAGE_BYTES)
        # gpu_busy_percent and hwmon take a runtime-PM reference: on a suspended dGPU
        # they would wake it every tick. Memory counters do not; they are read anyway.
        asleep = (try_read_text(d / "power/runtime_status") or "").strip() == "suspended"
        busy = None if asleep else try_read_int(d / "gpu_busy_percent")
        util = float(busy) if busy is not None else None
        if not asleep:  # pp_dpm_* asks the SMU: it takes the runtime-PM reference too
            table = try_read_bytes(d / "pp_dpm_mclk")
            mem_clock = parse_dpm_current_mhz(table) if table is not None else None
        if dev.hwmon is not None and not asleep:
            milli_c = try_read_int(dev.hwmon / "temp1_input")
            temp = milli_c / 1000 if milli_c is not None else None
            micro_w = try_read_int(dev.hwmon / "power1_average")
            if micro_w is None:
                micro_w = try_read_int(dev.hwmon / "power1_input")
            power = micro_w / 1_000_000 if micro_w is not None else None
    elif dev.driver == "xe":
        tiles = sorted(n for n in _listdir(d) if n.startswith("tile") and n[4:].isdigit())
        sizes = [try_read_int(d / t / "physical_vram_size_bytes") for t in tiles]
        vram_total = _sum_ints(sizes) if sizes else None

    total, used, free = pool_totals(dev.memory_kind, vram_total, vram_used, gtt_total, gtt_used)
    return DeviceSample(
        device_id=dev.device_id,
        collector="drm",
        vendor=dev.vendor,
        name=dev.name,
        memory_kind=dev.memory_kind,
        total_bytes=total,
        used_bytes=used,
        free_bytes=free,
        pci_bus_id=dev.pci_slot,
        vram_total_bytes=vram_total,
        vram_used_bytes=vram_used,
        vis_vram_total_bytes=vis_total,
        vis_vram_used_bytes=vis_used,
        gtt_total_bytes=gtt_total,
        gtt_used_bytes=gtt_used,
        gtt_ceiling_bytes=ceiling,
        util_pct=util,
        temp_c=temp,
        power_w=power,
        mem_clock_mhz=mem_clock,
    )


# ---------------------------------------------------------------------------------------
# Processes


def _list_fds(fd_dir: str) -> list[str]:
    """Names in ``proc/PID/fd``; raises PermissionError and the ``GONE`` errors."""
    return _fs_listdir(fd_dir)


def _is_drm_link(target: str) -> bool:
    return target.startswith(("/dev/dri/renderD", "/dev/dri/card"))


@dataclass(frozen=True, slots=True)
class _PidScan:
    refs: tuple[ClientRef, ...] = ()
    holds_drm: bool = False
    denied: bool = False  # fd listing denied
    denied_device: str | None = None  # a DRM link seen, its fdinfo denied
    denied_fdinfo: bool = False


class DrmCollector:
    """Device totals from sysfs, per-process GPU memory from DRM fdinfo."""

    name = "drm"

    def __init__(self, roots: Roots, options: CollectorOptions) -> None:
        self.roots = roots
        self.options = options
        self._devices: list[DrmDevice] | None = None
        self._by_pdev: dict[str, DrmDevice] = {}
        self._by_node: dict[str, DrmDevice] = {}
        self._last_full_ms: int | None = None
        self._prev_pids: dict[int, int] = {}
        self._first_seen: dict[int, int] = {}  # pid -> ms, for pids appearing after tick 1
        self._drm_pids: dict[int, tuple[ClientRef, ...]] = {}  # pid -> its DRM fds
        self._hidden: dict[int, HiddenProcess] = {}
        self._engine_cache: dict[tuple[int, int], tuple[str, str | None]] = {}

    def close(self) -> None:
        self._devices = None
        self._drm_pids.clear()
        self._hidden.clear()
        self._engine_cache.clear()
        self._first_seen.clear()
        self._prev_pids = {}

    # -- devices --------------------------------------------------------------------

    def _load_devices(self) -> list[DrmDevice]:
        devices = _discover(self.roots)
        self._devices = devices
        self._by_pdev = {d.pci_slot: d for d in devices if d.pci_slot}
        self._by_node = {node: d for d in devices for node in d.nodes}
        return devices

    def _device_for(self, memory: ClientMemory | None, target: str) -> DrmDevice | None:
        if memory is not None and memory.pdev and memory.pdev in self._by_pdev:
            return self._by_pdev[memory.pdev]
        node = target.rsplit("/", 1)[-1]
        if node in self._by_node:
            return self._by_node[node]
        devices = self._devices or []
        return devices[0] if len(devices) == 1 else None

    # -- one tick -------------------------------------------------------------------

    def collect(self, tick: Tick) -> Reading:
        now = tick.now_ms
        full = self._last_full_ms is None or now - self._last_full_ms >= (
            self.options.rescan_s * 1000
        )
        devices = self._load_devices() if full or self._devices is None else self._devices
        if not devices:
            raise NoData(f"no amdgpu/i915/xe device under {self.roots.sys / 'class/drm'}")
        ttm_pages = try_read_int(self.roots.sys / "module/ttm/parameters/pages_limit")
        samples = tuple(_sample(d, ttm_pages) for d in devices)

        pids = tick.pids()
        new = {p for p, ino in pids.items() if self._prev_pids.get(p) != ino}
        if self._last_full_ms is not None:  # on the first tick nothing counts as young
            for pid in new:
                self._first_seen[pid] = now
        self._first_seen = {
            p: t for p, t in self._first_seen.items() if p in pids and now - t < YOUNG_MS
        }
        if full:
            self._last_full_ms = now
            candidates = set(pids)
        else:
            candidates = (
                set(self._drm_pids)
                | set(self._hidden)
                | set(tick.gpu_pids)
                | new
                | set(self._first_seen)
            )

        for pid in candidates:
            self._drm_pids.pop(pid, None)
            self._hidden.pop(pid, None)
            scan = self._scan_pid(pid)
            if scan.holds_drm:
                self._drm_pids[pid] = scan.refs
            found = self._hidden_for(pid, pids.get(pid, 0), scan)
            if found is not None:
                self._hidden[pid] = found
        # forget processes that are gone
        for table in (self._drm_pids, self._hidden):
            for pid in [p for p in table if p not in pids]:
                del table[pid]
        self._engine_cache = {k: v for k, v in self._engine_cache.items() if k[0] in pids}
        self._prev_pids = dict(pids)

        refs = [ref for held in self._drm_pids.values() for ref in held]
        memory = attribute_clients(refs)
        tick.gpu_pids.update(m.pid for m in memory)
        hidden = tuple(sorted(self._hidden.values(), key=lambda h: h.pid))
        return Reading(devices=samples, memory=tuple(memory), hidden=hidden)

    def _scan_pid(self, pid: int) -> _PidScan:
        base = f"{self.roots.proc}/{pid}"  # str paths: pathlib costs ~5 us a join
        try:
            names = _list_fds(f"{base}/fd")
        except PermissionError:
            return _PidScan(denied=True)
        except (*GONE, OSError):
            return _PidScan()
        refs: list[ClientRef] = []
        holds = False
        denied_device: str | None = None
        denied_fdinfo = False
        for name in names:
            if not name.isdigit():
                continue
            try:
                target = readlink(f"{base}/fd/{name}")
            except PermissionError:
                return _PidScan(denied=True)
            except OSError:  # fd closed meanwhile, or the process exited
                continue
            if not _is_drm_link(target):
                continue
            holds = True
            try:
                data = read_bytes(f"{base}/fdinfo/{name}")
            except PermissionError:
                dev = self._device_for(None, target)
                denied_fdinfo = True
                denied_device = denied_device or (dev.device_id if dev else None)
                continue
            except OSError:
                continue
            memory = parse_fdinfo(data)
            dev = self._device_for(memory, target)
            if dev is not None:
                refs.append(ClientRef(pid, int(name), dev.device_id, memory))
        return _PidScan(tuple(refs), holds, False, denied_device, denied_fdinfo)

    def _hidden_for(self, pid: int, inode: int, scan: _PidScan) -> HiddenProcess | None:
        if not (scan.denied or scan.denied_fdinfo):
            return None
        comm, engine = self._identity(pid, inode)
        if scan.denied_fdinfo or engine is not None:
            return HiddenProcess(
                pid=pid,
                reason=HIDDEN_REASON.format(pid=pid),
                device_id=scan.denied_device,
                comm=comm or None,
                hint=HIDDEN_HINT,
            )
        return None

    def _identity(self, pid: int, inode: int) -> tuple[str, str | None]:
        """(comm, engine) from world-readable ``comm`` and ``cmdline``; cached per process."""
        key = (pid, inode)
        cached = self._engine_cache.get(key)
        if cached is not None:
            return cached
        base = self.roots.proc / str(pid)
        comm = (try_read_text(base / "comm") or "").strip()
        raw = try_read_bytes(base / "cmdline") or b""
        argv = tuple(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
        result = (comm, tracking.engine_of(comm, argv))
        self._engine_cache[key] = result
        return result
