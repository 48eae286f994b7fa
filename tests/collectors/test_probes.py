"""collectors/probes.py: the DRM and amdsmi collectors are imported only once their probe
finds their hardware, and say exactly what they said before until then (issue 32 item 4).

Each case runs in a fresh interpreter where it checks what was imported: this test
process has long imported both collectors itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from collectors.base import CollectorOptions, NoData, Roots, Tick
from collectors.drm import DrmCollector

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "drm"
NOW_MS = 1_750_000_000_000

CHILD = """
import json, sys
from pathlib import Path
from collectors.base import CollectorOptions, NoData, Roots, Tick
from collectors.registry import REGISTRY
tree = Path(sys.argv[1])
if len(sys.argv) > 2:  # an installed amdsmi package whose library is not loaded
    import types
    fake = types.ModuleType("amdsmi")
    def amdsmi_init(*args):
        raise RuntimeError("driver not loaded")
    fake.amdsmi_init = amdsmi_init
    sys.modules["amdsmi"] = fake
roots = Roots(proc=tree / "proc", sys=tree / "sys")
out = {}
for spec in REGISTRY:
    if spec.name not in ("drm", "amdsmi"):
        continue
    collector = spec.factory(roots, CollectorOptions())
    before = "collectors." + spec.name in sys.modules
    try:
        reading = collector.collect(Tick(roots, now_ms=1_750_000_000_000))
        said = {"devices": sorted(d.device_id for d in reading.devices)}
    except NoData as exc:
        said = {"nodata": str(exc)}
    collector.close()
    out[spec.name] = {
        "name": collector.name, "loaded_before": before,
        "loaded_after": "collectors." + spec.name in sys.modules, **said,
    }
print(json.dumps(out))
"""


def run_registry(tree: Path, *, amdsmi_package: bool = False) -> dict[str, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), *(["amdsmi"] if amdsmi_package else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def no_drm_tree(tmp_path: Path) -> Path:
    """An NVIDIA card only: DRM lists it, but no driver the DRM collector reads."""
    (tmp_path / "sys/class/drm/card0/device").mkdir(parents=True)
    (tmp_path / "sys/class/drm/card0/device/uevent").write_text(
        "DRIVER=nvidia\nPCI_SLOT_NAME=0000:01:00.0\n"
    )
    (tmp_path / "sys/class/drm/card0-HDMI-A-1").mkdir()
    (tmp_path / "proc").mkdir()
    return tmp_path


def test_without_their_hardware_neither_collector_is_imported(tmp_path: Path) -> None:
    tree = no_drm_tree(tmp_path)
    got = run_registry(tree)
    drm, amd = got["drm"], got["amdsmi"]
    assert drm["name"] == "drm" and amd["name"] == "amdsmi"
    assert not drm["loaded_after"] and not amd["loaded_after"]
    # the same NoData the real collector raises on this tree, word for word
    roots = Roots(proc=tree / "proc", sys=tree / "sys")
    try:
        DrmCollector(roots, CollectorOptions()).collect(Tick(roots, now_ms=NOW_MS))
    except NoData as exc:
        assert drm["nodata"] == str(exc)
    else:
        raise AssertionError("the real DRM collector found a device on an NVIDIA-only tree")
    assert "amdsmi is not installed" in str(amd["nodata"])


def test_an_amd_card_loads_the_drm_collector_and_it_reads_the_card(tmp_path: Path) -> None:
    """The other side: with an amdgpu card under sys/class/drm the probe hands over to the
    real collector, which reads the same devices it reads on its own."""
    got = run_registry(FIXTURES / "strix-halo")
    drm = got["drm"]
    assert not drm["loaded_before"] and drm["loaded_after"]
    roots = Roots(proc=FIXTURES / "strix-halo/proc", sys=FIXTURES / "strix-halo/sys")
    direct = DrmCollector(roots, CollectorOptions()).collect(Tick(roots, now_ms=NOW_MS))
    assert drm["devices"] == sorted(d.device_id for d in direct.devices) != []


def test_an_unreadable_drm_folder_is_no_device(tmp_path: Path) -> None:
    roots = Roots(proc=tmp_path / "proc", sys=tmp_path / "nothing-here")
    from collectors.probes import drm_absent

    assert drm_absent(roots) == f"no amdgpu/i915/xe device under {roots.sys / 'class/drm'}"


def test_an_installed_amdsmi_package_loads_the_amdsmi_collector(tmp_path: Path) -> None:
    """With the package importable the real collector runs: its own init failure, not the
    probe's "not installed", is what the tick reports."""
    got = run_registry(no_drm_tree(tmp_path), amdsmi_package=True)
    amd = got["amdsmi"]
    assert amd["loaded_after"] and not got["drm"]["loaded_after"]
    assert amd["nodata"] == "amdsmi: amdsmi_init failed: RuntimeError: driver not loaded"
