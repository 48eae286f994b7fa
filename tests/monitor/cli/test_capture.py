"""`vramscope capture`: the tree holds what the collectors read, replays to the same
reading, and keeps secrets, environ and foreign file targets off it."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from collectors.base import Roots
from monitor.cli.capture import OMITTED_LINK, CaptureError, capture
from monitor.daemon.sampler import Sampler

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "drm"
SECRET = "sk-capture-secret-1234"


def reading(roots: Roots) -> dict[str, object]:
    """One sample, without the time-dependent parts."""
    sampler = Sampler(roots)
    try:
        snap = sampler.sample(ts_ms=1_700_000_000_000)
    finally:
        sampler.close()
    return {
        "devices": sorted(json.dumps(dataclasses.asdict(d), sort_keys=True) for d in snap.devices),
        "processes": sorted(
            json.dumps(dataclasses.asdict(p), sort_keys=True) for p in snap.processes
        ),
        "memory": sorted(json.dumps(dataclasses.asdict(m), sort_keys=True) for m in snap.memory),
        "hidden": sorted(json.dumps(dataclasses.asdict(h), sort_keys=True) for h in snap.hidden),
    }


@pytest.mark.parametrize("name", ["strix-halo", "rx7900xtx", "intel-xe", "old-fdinfo"])
def test_a_capture_of_a_tree_replays_to_the_same_reading(tmp_path: Path, name: str) -> None:
    source = Roots(proc=FIXTURES / name / "proc", sys=FIXTURES / name / "sys")
    result = capture(source, tmp_path / "cap", nvml=False)
    assert result.files >= 3 and result.collectors["drm"] == "ok"
    replay = Roots(proc=tmp_path / "cap" / "proc", sys=tmp_path / "cap" / "sys")
    assert reading(replay) == reading(source)
    targets = {os.readlink(x) for x in (tmp_path / "cap").rglob("*") if x.is_symlink()}
    assert any(t.startswith("/dev/dri/") for t in targets)
    assert targets - {OMITTED_LINK} == {t for t in targets if t.startswith("/dev/dri/")}
    if name == "strix-halo":  # its terminals and eventfds are read, and not kept
        assert OMITTED_LINK in targets and result.dropped > 0
    manifest = json.loads((tmp_path / "cap" / "capture.json").read_text())
    assert manifest["schema"] == "vramscope.capture/1" and manifest["files"] == result.files


def test_a_capture_of_this_machine_keeps_secrets_off(tmp_path: Path) -> None:
    """A real process that looks like llama-server, with a secret on its command line and
    in its environment, and a file descriptor open on a private file."""
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    private = tmp_path / "private-notes.txt"
    private.write_text("x")
    code = "import os, time; f = open(os.environ['NOTES']); time.sleep(60)"
    child = subprocess.Popen(
        [str(exe), "-c", code, "--api-key", SECRET, "-m", "/m/x.gguf"],
        env={**os.environ, "HF_TOKEN": SECRET, "NOTES": str(private)},
    )
    try:
        time.sleep(0.5)
        result = capture(Roots(), tmp_path / "cap", nvml=False)
    finally:
        child.kill()
        child.wait()
    cap = tmp_path / "cap"
    assert result.redacted_cmdlines >= 1 and result.collectors["procfs"] == "ok"
    cmdline = (cap / "proc" / str(child.pid) / "cmdline").read_bytes()
    assert b"<redacted>" in cmdline and b"--api-key" in cmdline
    for path in cap.rglob("*"):
        assert path.name != "environ"
        if path.is_symlink():
            target = os.readlink(path)
            if path.name == "cwd":  # a working directory: kept, relative -m paths need it
                assert target.startswith("/") and "private-notes" not in target
                continue
            assert target == OMITTED_LINK or target.startswith("/dev/dri/")
        elif path.is_file() and os.access(path, os.R_OK):
            data = path.read_bytes()
            assert SECRET.encode() not in data, path
            assert b"private-notes" not in data, path
    # The capture samples like the machine did: the same host total, the server tracked.
    replay = Roots(proc=cap / "proc", sys=cap / "sys")
    sampler = Sampler(replay)
    snap = sampler.sample()
    sampler.close()
    live_total = next(d.total_bytes for d in reading_devices(Roots()) if d.device_id == "host")
    assert next(d.total_bytes for d in snap.devices if d.device_id == "host") == live_total
    server = next(p for p in snap.processes if p.pid == child.pid)
    assert server.engine == "llama.cpp" and SECRET not in " ".join(server.argv)


def reading_devices(roots: Roots):  # noqa: ANN201
    sampler = Sampler(roots)
    try:
        return sampler.sample().devices
    finally:
        sampler.close()


def test_capture_refuses_a_used_folder_and_archives(tmp_path: Path) -> None:
    source = Roots(proc=FIXTURES / "strix-halo" / "proc", sys=FIXTURES / "strix-halo" / "sys")
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(CaptureError, match="not empty"):
        capture(source, used, nvml=False)
    assert (used / "keep.txt").read_text() == "mine"  # nothing lost
    result = capture(source, tmp_path / "box", nvml=False, archive=True)
    assert result.archive == tmp_path / "box.tar.gz"
    with tarfile.open(result.archive) as tar:
        names = tar.getnames()
    assert "box/proc/meminfo" in names and "box/capture.json" in names


def test_capture_command(tmp_path: Path) -> None:
    fixture = FIXTURES / "strix-halo"
    roots = ["--proc-root", str(fixture / "proc"), "--sys-root", str(fixture / "sys")]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "monitor", "capture", *args, *roots],
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = run(str(tmp_path / "c"), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["files"] > 10 and doc["collectors"]["drm"] == "ok"
    again = run(str(tmp_path / "c"))
    assert again.returncode == 2
    assert again.stderr.strip().startswith("vramscope: error:") and "not empty" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    human = run(str(tmp_path / "d"))
    assert human.returncode == 0 and "vramscope status --proc-root" in human.stdout


# -- hostile folders: never write through a link (issue 14, item 1) ---------------------

STRIX = Roots(proc=FIXTURES / "strix-halo" / "proc", sys=FIXTURES / "strix-halo" / "sys")


@pytest.fixture
def victim(tmp_path: Path) -> dict[str, Path]:
    """A private file and an empty folder an attacker would like root to write into."""
    secrets = tmp_path / "victim"
    secrets.mkdir()
    private = secrets / "shadow"
    private.write_text("root:private\n")
    private.chmod(0o600)
    empty = tmp_path / "victim-dir"
    empty.mkdir()
    return {"file": private, "dir": empty, "chosen": empty / "created-by-root"}


def untouched(victim: dict[str, Path]) -> None:
    assert victim["file"].read_text() == "root:private\n"
    assert victim["file"].stat().st_mode & 0o777 == 0o600
    assert list(victim["dir"].iterdir()) == []


def plant_during_sample(monkeypatch: pytest.MonkeyPatch, plant) -> None:  # noqa: ANN001
    """Run ``plant`` after capture checked its folder and before it writes: the race."""
    from monitor.daemon.sampler import Sampler as RealSampler

    original = RealSampler.sample

    def sample(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        plant()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RealSampler, "sample", sample)


@pytest.mark.parametrize(
    "where", ["proc-dir", "sys-dir", "file-inside", "manifest", "manifest-dangling"]
)
def test_links_planted_during_a_capture_are_never_followed(
    tmp_path: Path, victim: dict[str, Path], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    out = tmp_path / "cap"

    def plant() -> None:
        if where == "proc-dir":
            (out / "proc").symlink_to(victim["dir"])
        elif where == "sys-dir":
            (out / "sys").symlink_to(victim["dir"])
        elif where == "file-inside":
            (out / "proc").mkdir()
            (out / "proc" / "meminfo").symlink_to(victim["file"])
        elif where == "manifest":
            (out / "capture.json").symlink_to(victim["file"])
        else:
            (out / "capture.json").symlink_to(victim["chosen"])

    plant_during_sample(monkeypatch, plant)
    with pytest.raises(CaptureError) as err:
        capture(STRIX, out, nvml=False)
    assert "\n" not in str(err.value)
    untouched(victim)


def test_a_folder_that_is_a_link_is_refused(tmp_path: Path, victim: dict[str, Path]) -> None:
    link = tmp_path / "cap"
    link.symlink_to(victim["dir"])
    with pytest.raises(CaptureError, match="link"):
        capture(STRIX, link, nvml=False)
    untouched(victim)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_an_empty_folder_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(CaptureError, match="owned by"):
        capture(STRIX, theirs, nvml=False)
    assert list(theirs.iterdir()) == []


def test_an_empty_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(CaptureError, match="writable"):
        capture(STRIX, shared, nvml=False)
    assert list(shared.iterdir()) == []


def test_an_empty_folder_of_ours_is_still_accepted(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    result = capture(STRIX, mine, nvml=False)
    assert (mine / "proc" / "meminfo").is_file() and result.files > 10


@pytest.mark.parametrize("dangling", [False, True])
def test_an_archive_path_that_is_a_link_is_never_written(
    tmp_path: Path, victim: dict[str, Path], dangling: bool
) -> None:
    (tmp_path / "box.tar.gz").symlink_to(victim["chosen"] if dangling else victim["file"])
    with pytest.raises(CaptureError, match="box.tar.gz"):
        capture(STRIX, tmp_path / "box", nvml=False, archive=True)
    untouched(victim)


def test_the_archive_holds_links_as_links_and_unreadable_files_empty(tmp_path: Path) -> None:
    result = capture(STRIX, tmp_path / "box", nvml=False, archive=True)
    assert result.archive is not None and result.archive.stat().st_mode & 0o022 == 0
    with tarfile.open(result.archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        links = [m for m in members.values() if m.issym()]
        assert links and all(
            m.linkname.startswith("/dev/dri/") or m.linkname == OMITTED_LINK for m in links
        )
        meminfo = tar.extractfile("box/proc/meminfo")
        assert meminfo is not None
        assert meminfo.read() == (tmp_path / "box" / "proc" / "meminfo").read_bytes()
    assert members["box"].isdir() and members["box/proc"].isdir()


def test_the_command_refuses_planted_links_with_one_line(
    tmp_path: Path, victim: dict[str, Path]
) -> None:
    fixture = FIXTURES / "strix-halo"
    roots = ["--proc-root", str(fixture / "proc"), "--sys-root", str(fixture / "sys")]
    (tmp_path / "box.tar.gz").symlink_to(victim["file"])
    (tmp_path / "linked").symlink_to(victim["dir"])
    for folder, extra in ((tmp_path / "box", ["--archive"]), (tmp_path / "linked", [])):
        done = subprocess.run(
            [sys.executable, "-m", "monitor", "capture", str(folder), *extra, *roots],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("vramscope: error:")
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    untouched(victim)


def test_the_printed_replay_command_runs(tmp_path: Path) -> None:
    """Run exactly the `replay:` line the capture printed, from another folder: a capture
    taken from a relative folder whose name has a space, with only procfs enabled (so
    nothing under /sys was read), still replays."""
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    config = tmp_path / "config.toml"
    config.write_text('[collectors]\nenabled = ["procfs"]\n')
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "capture",
            "my box",
            "--no-nvml",
            "--config",
            str(config),
            "--proc-root",
            str(FIXTURES / "strix-halo" / "proc"),
            "--sys-root",
            str(FIXTURES / "strix-halo" / "sys"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=work,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert (work / "my box" / "sys").is_dir()  # nothing under /sys was read: still there
    line = next(x for x in done.stdout.splitlines() if x.startswith("replay: "))
    argv = shlex.split(line.removeprefix("replay: "))
    assert argv[:2] == ["vramscope", "status"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    replay = subprocess.run(
        [sys.executable, "-m", "monitor", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=elsewhere,
        env=env,
    )
    assert replay.returncode == 0, replay.stderr
    assert "host" in replay.stdout.lower()
