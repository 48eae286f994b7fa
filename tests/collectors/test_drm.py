"""DRM collector: golden fixture trees, the fdinfo parser, de-duplication, scan cost.

Fixture trees live in tests/fixtures/drm/<scenario>/ (see each SOURCE.md for provenance).
``--update-golden`` rewrites their expected.json from the collector's output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from unprivileged import DROP_DAC_CAPS, NOBODY, reachable_by_nobody

from collectors import drm
from collectors.base import CollectorOptions, NoData, Reading, Roots, Tick
from collectors.drm import (
    ClientMemory,
    ClientRef,
    DrmCollector,
    attribute_clients,
    parse_fdinfo,
    parse_size,
    pci_location,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drm"
NOW_MS = 1_750_000_000_000
KiB, MiB, GiB = 1024, 1024**2, 1024**3


def as_json(reading: Reading) -> dict[str, object]:
    return json.loads(json.dumps(dataclasses.asdict(reading)))


def collect(tree: Path, now_ms: int = NOW_MS) -> tuple[Reading, Tick]:
    roots = Roots(proc=tree / "proc", sys=tree / "sys")
    tick = Tick(roots, now_ms=now_ms)
    return DrmCollector(roots, CollectorOptions()).collect(tick), tick


def check_golden(scenario: str, got: dict[str, object], update: bool) -> None:
    path = FIXTURES / scenario / "expected.json"
    if update:
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
        return
    assert got == json.loads(path.read_text()), f"{scenario}: run with --update-golden?"


# ---------------------------------------------------------------------------------------
# Golden scenarios


@pytest.mark.parametrize("scenario", ["strix-halo", "rx7900xtx", "intel-xe", "old-fdinfo"])
def test_golden(scenario: str, update_golden: bool) -> None:
    reading, tick = collect(FIXTURES / scenario)
    check_golden(scenario, as_json(reading), update_golden)
    assert tick.gpu_pids == {m.pid for m in reading.memory}


def _memory(reading: Reading) -> dict[tuple[int, str], tuple[int | None, ...]]:
    return {(m.pid, m.device_id): (m.vram_bytes, m.gtt_bytes, m.cpu_bytes) for m in reading.memory}


def test_strix_halo_meaning() -> None:
    """The numbers the fixture means, stated independently of the golden file."""
    reading, _ = collect(FIXTURES / "strix-halo")
    (dev,) = reading.devices
    assert dev.device_id == "drm:0000:c5:00.0" and dev.memory_kind == "unified"
    assert dev.vram_total_bytes == 512 * MiB and dev.gtt_total_bytes == 96 * GiB
    assert dev.total_bytes == 512 * MiB + 96 * GiB
    assert dev.gtt_ceiling_bytes == 23068672 * 4096  # ttm.pages_limit (88 GiB) < GTT
    mem = _memory(reading)
    # llama-server: two fds, one drm-client-id -> counted once (fd 5, the lowest fd).
    assert mem[(2412, dev.device_id)] == (294 * MiB, 73547120 * KiB, 8 * KiB)
    assert 70 * GiB < 73547120 * KiB < 71 * GiB
    assert set(mem) == {(1890, dev.device_id), (2101, dev.device_id), (2412, dev.device_id)}


def test_rx7900xtx_fork_attributed_to_parent() -> None:
    reading, _ = collect(FIXTURES / "rx7900xtx")
    (dev,) = reading.devices
    assert dev.memory_kind == "dedicated" and dev.total_bytes == 25753026560
    assert dev.name == "AMD Radeon RX 7900 XTX"
    mem = _memory(reading)
    assert mem[(2001, dev.device_id)] == (20390 * MiB, 2 * MiB, 0)
    assert mem[(3100, dev.device_id)] == (1843212 * KiB, 64 * MiB, 0)
    assert (3104, dev.device_id) not in mem  # the forked child shares client 88


def test_intel_xe_meaning() -> None:
    reading, _ = collect(FIXTURES / "intel-xe")
    igpu, dgpu = reading.devices
    assert (igpu.memory_kind, igpu.total_bytes, igpu.used_bytes) == ("unified", None, None)
    assert (dgpu.memory_kind, dgpu.total_bytes, dgpu.used_bytes) == ("dedicated", 12 * GiB, None)
    mem = _memory(reading)
    assert mem[(6001, dgpu.device_id)] == (9523 * MiB, 192 * KiB, 8 * MiB)
    assert mem[(6001, igpu.device_id)] == (None, 2 * MiB, None)
    assert mem[(1420, igpu.device_id)] == (None, 120832 * KiB, None)  # stolen ignored


def test_old_fdinfo_meaning() -> None:
    reading, _ = collect(FIXTURES / "old-fdinfo")
    (dev,) = reading.devices
    assert dev.gtt_ceiling_bytes == dev.gtt_total_bytes == 24 * GiB  # no ttm pages_limit
    mem = _memory(reading)
    assert mem[(5120, dev.device_id)] == (8912896 * KiB, 12288 * KiB, 0)  # 2 fds, 1 pasid
    assert mem[(1200, dev.device_id)] == (65536 * KiB, 8192 * KiB, 0)


# ---------------------------------------------------------------------------------------
# Permission denied: a real EACCES on a copy of the tree


_CHILD = """
import dataclasses, json, os, sys
from pathlib import Path
from collectors.base import CollectorOptions, Roots, Tick
from collectors.drm import DrmCollector
tree = Path(sys.argv[1])
try:
    os.listdir(tree / "proc/1800/fd")
    effective = False
except PermissionError:
    effective = True
roots = Roots(proc=tree / "proc", sys=tree / "sys")
reading = DrmCollector(roots, CollectorOptions()).collect(Tick(roots, now_ms=int(sys.argv[2])))
print(json.dumps({"effective": effective, "reading": dataclasses.asdict(reading)}))
"""


@pytest.fixture
def denied_tree() -> Iterator[Path]:
    """permission-denied copied to a world-traversable dir, denied.txt paths chmod 000."""
    src = FIXTURES / "permission-denied"
    top = Path(tempfile.mkdtemp(prefix="vramscope-drm-", dir="/tmp"))
    tree = top / "tree"
    shutil.copytree(src, tree, symlinks=True)
    os.chmod(top, 0o755)
    for dirpath, _dirnames, filenames in os.walk(tree):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o644)
    denied = [
        line.strip()
        for line in (src / "denied.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for rel in denied:
        os.chmod(tree / rel, 0)
    try:
        yield tree
    finally:
        for rel in denied:
            os.chmod(tree / rel, 0o755)
        shutil.rmtree(top)


def _run_child(tree: Path, prelude: str, **kwargs: object) -> dict[str, object] | str:
    """Run the collector in a child process; its parsed output, or why it did not run."""
    proc = subprocess.run(
        [sys.executable, "-c", prelude + _CHILD, str(tree), str(NOW_MS)],
        capture_output=True,
        text=True,
        cwd="/",
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        **kwargs,  # type: ignore[call-overload]
    )
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    out: dict[str, object] = json.loads(proc.stdout)
    if not out["effective"]:
        return "chmod 000 did not deny access to the child"
    return out


def test_permission_denied(denied_tree: Path, update_golden: bool) -> None:
    """A real EACCES. As root (which ignores modes), the collection runs in a child that is
    either uid 65534 (when the interpreter is reachable by it) or root without
    CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH; as non-root it runs in-process."""
    if os.geteuid() == 0:
        reasons = []
        out: dict[str, object] | str = "not tried"
        checkout = Path(drm.__file__).resolve().parents[1]
        python = Path(sys.executable).resolve()
        if reachable_by_nobody(checkout) and reachable_by_nobody(python.parent):
            out = _run_child(denied_tree, "", user=NOBODY, group=NOBODY, extra_groups=[])
        else:
            reasons.append(f"uid {NOBODY} cannot reach {python}")
        if isinstance(out, str):
            reasons.append(out)
            out = _run_child(denied_tree, DROP_DAC_CAPS)
        if isinstance(out, str):
            pytest.skip("no way to produce a real EACCES here: " + "; ".join([*reasons, out]))
        got = json.loads(json.dumps(out["reading"]))
    else:
        try:
            os.listdir(denied_tree / "proc/1800/fd")
            pytest.skip("chmod 000 does not deny access here (CAP_DAC_OVERRIDE?)")
        except PermissionError:
            pass
        reading, _ = collect(denied_tree)
        got = as_json(reading)
    check_golden("permission-denied", got, update_golden)
    hidden = {h["pid"]: h for h in got["hidden"]}  # type: ignore[union-attr]
    assert set(hidden) == {1800, 2200}  # sshd (900) is denied too but is no GPU suspect
    assert hidden[1800]["comm"] == "llama-server" and "CAP_SYS_PTRACE" in hidden[1800]["hint"]
    assert hidden[2200]["device_id"] == "drm:0000:2d:00.0"
    assert [m["pid"] for m in got["memory"]] == [2500]  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------
# Pure parser


def test_parse_size_units() -> None:
    assert parse_size(b"123") == 123
    assert parse_size(b"4 KiB") == 4096
    assert parse_size(b"5 MiB") == 5 * MiB
    assert parse_size(b"6 kB") == 6 * 1024
    assert parse_size("7 GiB") == 7 * GiB
    for bad in (b"", b"x", b"-1", b"12 parsecs", b"1.5 MiB", b"1 2 3", b"0x10"):
        assert parse_size(bad) is None


def test_unit_may_change_between_samples() -> None:
    a = parse_fdinfo(b"drm-driver:\tamdgpu\ndrm-resident-gtt:\t1024 KiB\n")
    b = parse_fdinfo(b"drm-driver:\tamdgpu\ndrm-resident-gtt:\t1 MiB\n")
    c = parse_fdinfo(b"drm-driver:\tamdgpu\ndrm-resident-gtt:\t1048576\n")
    assert a.gtt_bytes == b.gtt_bytes == c.gtt_bytes == MiB


def test_amdgpu_space_before_tab_quirk_and_legacy_alias() -> None:
    m = parse_fdinfo(
        b"drm-driver:\tamdgpu\ndrm-memory-vram:\t10 KiB\n"
        b"drm-memory-gtt: \t20 KiB\ndrm-memory-cpu: \t30 KiB\n"
    )
    assert (m.vram_bytes, m.gtt_bytes, m.cpu_bytes) == (10 * KiB, 20 * KiB, 30 * KiB)


def test_preference_resident_then_memory_then_total() -> None:
    m = parse_fdinfo(
        b"drm-driver:\tamdgpu\n"
        b"drm-total-vram:\t9 MiB\ndrm-memory-vram:\t8 MiB\n"
        b"drm-resident-vram:\t7 MiB\n"
        b"drm-total-gtt:\t6 MiB\ndrm-memory-gtt: \t5 MiB\n"
        b"drm-total-cpu:\t4 MiB\n"
    )
    assert (m.vram_bytes, m.gtt_bytes, m.cpu_bytes) == (7 * MiB, 5 * MiB, 4 * MiB)


def test_unknown_keys_malformed_lines_and_garbage() -> None:
    m = parse_fdinfo(
        b"pos:\t0\nflags:\t02\nno colon here\n:\n\xff\xfe:\xff\n"
        b"drm-driver:\tamdgpu\ndrm-client-id:\tnot-a-number\n"
        b"drm-resident-vram:\tlots\ndrm-resident-gtt:\t3 KiB\n"
        b"drm-resident-gds:\t99\ndrm-frobnicate-vram:\t1\n"
        b"drm-engine-gfx:\t123 ns\namd-evicted-vram:\t5 KiB\n"
    )
    assert m.client_id is None
    assert (m.vram_bytes, m.gtt_bytes, m.cpu_bytes) == (None, 3 * KiB, None)
    assert parse_fdinfo(b"") == ClientMemory()
    assert parse_fdinfo(bytes(range(256)) * 4).vram_bytes is None


def test_region_mapping_i915_and_xe() -> None:
    i915 = parse_fdinfo(
        b"drm-driver:\ti915\ndrm-resident-local0:\t2 MiB\n"
        b"drm-resident-local1:\t3 MiB\ndrm-resident-system0:\t4 MiB\n"
        b"drm-resident-stolen-system0:\t5 MiB\n"
    )
    assert (i915.vram_bytes, i915.gtt_bytes, i915.cpu_bytes) == (5 * MiB, 4 * MiB, None)
    xe = parse_fdinfo(
        b"drm-driver:\txe\ndrm-total-vram0:\t2 MiB\ndrm-total-vram1:\t3 MiB\n"
        b"drm-total-gtt:\t4 KiB\ndrm-total-system:\t5 KiB\n"
        b"drm-total-stolen:\t6 MiB\ndrm-total-cycles-rcs:\t7655183225\n"
        b"drm-cycles-rcs:\t28257900\n"
    )
    assert (xe.vram_bytes, xe.gtt_bytes, xe.cpu_bytes) == (5 * MiB, 4 * KiB, 5 * KiB)


def test_old_amdgpu_format() -> None:
    m = parse_fdinfo(
        b"pos:\t0\nflags:\t02100002\nmnt_id:\t24\npdev:\t0000:0B:00.0\n"
        b"pasid:\t32769\nvram mem:\t100 kB\ngtt mem:\t200 kB\ncpu mem:\t0 kB\n"
        b"gfx0:\t12.5%\ncompute0:\t87.45%\n"
    )
    assert (m.driver, m.pdev, m.pasid, m.client_id) == ("amdgpu", "0000:0b:00.0", 32769, None)
    assert (m.vram_bytes, m.gtt_bytes, m.cpu_bytes) == (100 * KiB, 200 * KiB, 0)


def test_pci_location_matches_kfd_location_id() -> None:
    assert pci_location("0000:c5:00.0") == (0, 0xC500)
    assert pci_location("0001:03:02.1") == (1, (3 << 8) | (2 << 3) | 1)
    assert pci_location("garbage") is None


# ---------------------------------------------------------------------------------------
# De-duplication


def _ref(
    pid: int,
    fd: int,
    client: int | None,
    vram: int,
    pasid: int | None = None,
    dev: str = "drm:0000:03:00.0",
) -> ClientRef:
    return ClientRef(
        pid, fd, dev, ClientMemory(driver="amdgpu", client_id=client, pasid=pasid, vram_bytes=vram)
    )


def test_dedup_shared_client_goes_to_lowest_pid() -> None:
    rows = attribute_clients(
        [
            _ref(300, 7, 88, 100),
            _ref(200, 9, 88, 100),
            _ref(200, 4, 88, 100),
            _ref(200, 5, 89, 50),
            _ref(300, 8, 90, 10),
        ]
    )
    assert [(r.pid, r.vram_bytes) for r in rows] == [(200, 150), (300, 10)]


def test_dedup_is_per_device_and_falls_back_to_pasid_then_fd() -> None:
    rows = attribute_clients(
        [
            _ref(1, 3, 5, 10, dev="drm:a"),
            _ref(1, 4, 5, 20, dev="drm:b"),  # same id, 2 devices
            _ref(2, 3, None, 7, pasid=32769),
            _ref(2, 6, None, 7, pasid=32769),  # dup, old fmt
            _ref(3, 3, None, 1),
            _ref(3, 4, None, 1),  # nothing to key on: each fd counts
        ]
    )
    got = {(r.pid, r.device_id): r.vram_bytes for r in rows}
    assert got == {
        (1, "drm:a"): 10,
        (1, "drm:b"): 20,
        (2, "drm:0000:03:00.0"): 7,
        (3, "drm:0000:03:00.0"): 2,
    }


def test_zero_memory_clients_get_no_row() -> None:
    assert attribute_clients([_ref(5, 3, 1, 0)]) == []


# ---------------------------------------------------------------------------------------
# Robustness and cost


@pytest.fixture
def rx_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "rx"
    shutil.copytree(FIXTURES / "rx7900xtx", tree, symlinks=True)
    return tree


def _add_drm_fd(tree: Path, pid: int, fd: int, client: int, vram_kib: int) -> None:
    base = tree / "proc" / str(pid)
    (base / "fd").mkdir(parents=True, exist_ok=True)
    (base / "fdinfo").mkdir(parents=True, exist_ok=True)
    if not (base / "comm").exists():
        (base / "comm").write_text("newproc\n")
        (base / "cmdline").write_bytes(b"newproc\0")
    os.symlink("/dev/dri/renderD128", base / "fd" / str(fd))
    (base / "fdinfo" / str(fd)).write_text(
        f"drm-driver:\tamdgpu\ndrm-client-id:\t{client}\ndrm-pdev:\t0000:03:00.0\n"
        f"drm-memory-vram:\t{vram_kib} KiB\n"
    )


def test_pid_vanishing_mid_scan(rx_tree: Path) -> None:
    roots = Roots(proc=rx_tree / "proc", sys=rx_tree / "sys")
    tick = Tick(roots, now_ms=NOW_MS)
    assert 2001 in tick.pids()  # the listing is taken ...
    shutil.rmtree(rx_tree / "proc/2001")  # ... then the process exits
    tick._pids = {**tick.pids(), 424242: 1}  # and one that never had a directory
    reading = DrmCollector(roots, CollectorOptions()).collect(tick)
    assert {m.pid for m in reading.memory} == {3100}


def test_no_device_raises_nodata_before_scanning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sys/class/drm/card0/device").mkdir(parents=True)
    (tmp_path / "sys/class/drm/card0/device/uevent").write_text(
        "DRIVER=nvidia\nPCI_SLOT_NAME=0000:01:00.0\n"
    )
    (tmp_path / "proc").mkdir()

    def boom(path: Path) -> list[str]:
        raise AssertionError("scanned processes without a DRM device")

    monkeypatch.setattr(drm, "_list_fds", boom)
    roots = Roots(proc=tmp_path / "proc", sys=tmp_path / "sys")
    with pytest.raises(NoData, match="no amdgpu/i915/xe device under"):
        DrmCollector(roots, CollectorOptions()).collect(Tick(roots, now_ms=NOW_MS))


def test_partial_ticks_skip_unrelated_pids_until_rescan(
    rx_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scanned: list[int] = []
    real = drm._list_fds

    def counting(path: str) -> list[str]:
        scanned.append(int(Path(path).parent.name))
        return real(path)

    monkeypatch.setattr(drm, "_list_fds", counting)
    roots = Roots(proc=rx_tree / "proc", sys=rx_tree / "sys")
    coll = DrmCollector(roots, CollectorOptions(rescan_s=10.0))
    first = coll.collect(Tick(roots, now_ms=NOW_MS))
    assert sorted(scanned) == [1500, 2001, 3100, 3104]  # full scan
    assert {m.pid for m in first.memory} == {2001, 3100}

    # An old unrelated process (sshd) now opens the GPU; a new process appears too.
    _add_drm_fd(rx_tree, 1500, 9, client=700, vram_kib=1024)
    _add_drm_fd(rx_tree, 7777, 3, client=701, vram_kib=2048)
    scanned.clear()
    second = coll.collect(Tick(roots, now_ms=NOW_MS + 2_000))
    assert sorted(scanned) == [2001, 3100, 3104, 7777]  # DRM holders + the new pid only
    assert {m.pid for m in second.memory} == {2001, 3100, 7777}

    scanned.clear()
    third = coll.collect(Tick(roots, now_ms=NOW_MS + 4_000))
    assert 1500 not in scanned and 7777 in scanned  # 7777 is a DRM holder now
    assert 1500 not in {m.pid for m in third.memory}

    scanned.clear()
    fourth = coll.collect(Tick(roots, now_ms=NOW_MS + 10_000))  # rescan_s has passed
    assert 1500 in scanned
    assert {m.pid for m in fourth.memory} == {1500, 2001, 3100, 7777}


def test_young_and_gpu_pids_are_rescanned(rx_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scanned: list[int] = []
    real = drm._list_fds

    def counting(path: str) -> list[str]:
        scanned.append(int(Path(path).parent.name))
        return real(path)

    monkeypatch.setattr(drm, "_list_fds", counting)
    roots = Roots(proc=rx_tree / "proc", sys=rx_tree / "sys")
    coll = DrmCollector(roots, CollectorOptions(rescan_s=3600.0))
    coll.collect(Tick(roots, now_ms=NOW_MS))
    (rx_tree / "proc/8888/fd").mkdir(parents=True)  # a new process, no GPU yet
    coll.collect(Tick(roots, now_ms=NOW_MS + 1_000))
    _add_drm_fd(rx_tree, 8888, 4, client=702, vram_kib=4096)  # opens the GPU 5 s later
    scanned.clear()
    tick = Tick(roots, now_ms=NOW_MS + 6_000)
    tick.gpu_pids.add(1500)  # another collector (e.g. KFD) says 1500 uses the GPU
    reading = coll.collect(tick)
    assert 8888 in scanned and 1500 in scanned
    assert 8888 in {m.pid for m in reading.memory}
    scanned.clear()
    coll.collect(Tick(roots, now_ms=NOW_MS + 60_000))
    assert 1500 not in scanned  # no longer young, not a DRM holder, not in gpu_pids


# ---------------------------------------------------------------------------------------
# APU detection layers


def _amd_card(tree: Path, pci_id: str, slot: str = "0000:c5:00.0") -> Path:
    dev = tree / "sys/class/drm/card0/device"
    (dev / "drm/card0").mkdir(parents=True)
    (dev / "drm/renderD128").mkdir()
    (dev / "uevent").write_text(f"DRIVER=amdgpu\nPCI_ID={pci_id}\nPCI_SLOT_NAME={slot}\n")
    for name, value in (
        ("mem_info_vram_total", 8 * GiB),
        ("mem_info_vram_used", GiB),
        ("mem_info_gtt_total", 64 * GiB),
        ("mem_info_gtt_used", 2 * GiB),
    ):
        (dev / name).write_text(f"{value}\n")
    (tree / "proc").mkdir(exist_ok=True)
    return dev


def _kind(tree: Path) -> tuple[str, int | None]:
    reading, _ = collect(tree)
    return reading.devices[0].memory_kind, reading.devices[0].total_bytes


def test_apu_from_kfd_combined_node(tmp_path: Path) -> None:
    _amd_card(tmp_path, "1002:FFFF")  # an id the table does not know
    assert _kind(tmp_path) == ("dedicated", 8 * GiB)
    node = tmp_path / "sys/class/kfd/kfd/topology/nodes/0"
    node.mkdir(parents=True)
    (node / "properties").write_text(
        "cpu_cores_count 16\nsimd_count 80\nlocation_id 50432\ndomain 0\ndrm_render_minor 128\n"
    )
    assert _kind(tmp_path) == ("unified", 72 * GiB)


def test_kfd_node_of_another_card_does_not_count(tmp_path: Path) -> None:
    _amd_card(tmp_path, "1002:FFFF")
    node = tmp_path / "sys/class/kfd/kfd/topology/nodes/1"
    node.mkdir(parents=True)
    (node / "properties").write_text(
        "cpu_cores_count 16\nsimd_count 80\nlocation_id 768\ndomain 0\ndrm_render_minor 129\n"
    )
    assert _kind(tmp_path)[0] == "dedicated"


def test_apu_from_device_id_table_and_hwmon_heuristic(tmp_path: Path) -> None:
    _amd_card(tmp_path / "a", "1002:150E")  # Strix Point
    assert _kind(tmp_path / "a")[0] == "unified"
    dev = _amd_card(tmp_path / "b", "1002:FFFF")
    (dev / "hwmon/hwmon0").mkdir(parents=True)
    (dev / "hwmon/hwmon0/in1_input").write_text("998\n")  # northbridge voltage: an APU
    assert _kind(tmp_path / "b")[0] == "unified"


def test_unknown_values_stay_none(tmp_path: Path) -> None:
    dev = _amd_card(tmp_path, "1002:744C", slot="0000:03:00.0")
    (dev / "mem_info_vram_used").unlink()
    reading, _ = collect(tmp_path)
    sample = reading.devices[0]
    assert sample.used_bytes is None and sample.free_bytes is None
    assert sample.util_pct is None and sample.temp_c is None
    assert sample.gtt_ceiling_bytes == 64 * GiB  # no ttm pages_limit readable
    assert sample.name == "AMD GPU 1002:744c"


def test_a_runtime_suspended_gpu_is_not_woken(tmp_path: Path) -> None:
    """gpu_busy_percent/hwmon would wake it; only the memory counters are read."""
    import shutil

    tree = tmp_path / "rx"
    shutil.copytree(FIXTURES / "rx7900xtx", tree, symlinks=True)
    power = tree / "sys/class/drm/card0/device/power"
    power.mkdir(exist_ok=True)
    (power / "runtime_status").write_text("suspended\n")
    roots = Roots(proc=tree / "proc", sys=tree / "sys")
    (dev,) = DrmCollector(roots, CollectorOptions()).collect(Tick(roots, 1)).devices
    assert dev.util_pct is None and dev.temp_c is None and dev.power_w is None
    assert dev.mem_clock_mhz is None  # pp_dpm_mclk asks the SMU: not read either
    assert dev.vram_used_bytes is not None
    (power / "runtime_status").write_text("active\n")
    (awake,) = DrmCollector(roots, CollectorOptions()).collect(Tick(roots, 1)).devices
    assert awake.util_pct is not None and awake.mem_clock_mhz == 1249.0


# ---------------------------------------------------------------------------------------
# Memory clock: pp_dpm_mclk


# A real RX 7900 XTX table (radeon-profile issue 294), as the kernel prints it.
RX7900XTX_MCLK = b"0: 96Mhz *\n1: 456Mhz \n2: 772Mhz \n3: 1249Mhz \n"


@pytest.mark.parametrize(
    ("table", "mhz"),
    [
        (RX7900XTX_MCLK, 96.0),
        (b"0: 100Mhz \n1: 500Mhz \n2: 625Mhz *\n3: 900Mhz\n", 625.0),  # no trailing blank
        (b"0: 400MHz \n1: 933MHZ *\n", 933.0),  # the unit in any case
        (b"0: 400Mhz \n1: 933Mhz \n   600Mhz *\n", 600.0),  # renoir: current is no level
        (b"0: 500Mhz *\n1: 500Mhz *\n", 500.0),  # two levels, one clock
        (b"0: 96Mhz\n1: 456Mhz\n", None),  # no line marked current
        (b"0: 96Mhz *\n1: 456Mhz *\n", None),  # two different "current" clocks
        (b"0: 0Mhz *\n", None),  # 0 is no clock
        (b"", None),
        (b"\xff\xfe garbage *\n", None),
        (b"0: 96Mhz *\n<html>\n", None),  # not a DPM table
        (b"0: 96 GHz *\n", None),
        (b"0: " + b"9" * 5000 + b"Mhz *\n", None),  # bounded: cut lines are no figure
    ],
)
def test_parse_dpm_current_mhz(table: bytes, mhz: float | None) -> None:
    assert drm.parse_dpm_current_mhz(table) == mhz


def test_memory_clock_from_pp_dpm_mclk(rx_tree: Path) -> None:
    mclk = rx_tree / "sys/class/drm/card0/device/pp_dpm_mclk"
    reading, _ = collect(rx_tree)
    assert reading.devices[0].mem_clock_mhz == 1249.0  # the fixture's busy card: level 3
    mclk.write_bytes(RX7900XTX_MCLK)
    reading, _ = collect(rx_tree)
    assert reading.devices[0].mem_clock_mhz == 96.0
    mclk.write_bytes(b"no table here\n")
    reading, _ = collect(rx_tree)
    assert reading.devices[0].mem_clock_mhz is None
    assert reading.devices[0].power_w == 339.0  # the rest of the sample stands
    mclk.unlink()
    reading, _ = collect(rx_tree)
    assert reading.devices[0].mem_clock_mhz is None


def test_memory_clock_link_out_of_the_tree_is_not_followed(rx_tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"0: 777Mhz *\n")
    mclk = rx_tree / "sys/class/drm/card0/device/pp_dpm_mclk"
    mclk.unlink()
    os.symlink(outside, mclk)
    reading, _ = collect(rx_tree)
    assert reading.devices[0].mem_clock_mhz is None
