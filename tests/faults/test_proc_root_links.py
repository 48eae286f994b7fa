"""A crafted ``--proc-root`` / ``--sys-root`` tree (a capture someone sent, a bug report) is
read without leaving it: a symbolic link inside that points outside is not followed, a FIFO
or device node is not opened for reading, while links that stay inside the tree (as sysfs'
``device`` links do) and the fd links read with readlink keep working."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collectors import _fs
from collectors.base import Roots

SECRET = "TOPSECRET-7f3a"
SECRET_RSS_KIB = 4_242_424


def _stat_line(pid: int, comm: str) -> str:
    rest = ["S", "1"] + ["0"] * 17 + [str(1000 + pid)] + ["0"] * 30
    return f"{pid} ({comm}) {' '.join(rest)}\n"


def _status(rss_anon_kib: int) -> str:
    return (
        f"Name:\tllama-server\nUid:\t0\t0\t0\t0\nVmHWM:\t2048 kB\nVmLck:\t0 kB\n"
        f"RssAnon:\t{rss_anon_kib} kB\nRssFile:\t512 kB\nRssShmem:\t0 kB\nVmSwap:\t0 kB\n"
    )


def _process(d: Path, pid: int, argv: bytes) -> None:
    d.mkdir()
    (d / "stat").write_text(_stat_line(pid, "llama-server"))
    (d / "cmdline").write_bytes(argv)
    (d / "status").write_text(_status(1024))
    (d / "statm").write_text("1000 300 0 0 0 0 0\n")


@pytest.fixture
def crafted(tmp_path: Path) -> Path:
    """``tmp/tree/proc``: processes whose files link to secrets in ``tmp/outside``."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "cmdline").write_bytes(f"llama-server\0-m\0/models/{SECRET}.gguf\0".encode())
    (outside / "status").write_text(_status(SECRET_RSS_KIB))
    _process(outside / "pid", 303, f"llama-server\0-m\0/{SECRET}-dir.gguf\0".encode())
    proc = tmp_path / "tree" / "proc"
    proc.mkdir(parents=True)
    (tmp_path / "tree" / "sys").mkdir()
    (proc / "meminfo").write_text(
        "MemTotal: 1000000 kB\nMemFree: 500000 kB\nMemAvailable: 600000 kB\n"
    )
    (proc / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    _process(proc / "300", 300, b"llama-server\0-m\0/models/plain.gguf\0")
    _process(proc / "301", 301, b"")
    (proc / "301" / "cmdline").unlink()
    (proc / "301" / "cmdline").symlink_to(outside / "cmdline")  # absolute, outside
    _process(proc / "302", 302, b"llama-server\0-m\0/models/b.gguf\0")
    (proc / "302" / "status").unlink()
    (proc / "302" / "status").symlink_to("../../../outside/status")  # relative, escaping
    (proc / "303").symlink_to(outside / "pid")  # a whole process directory outside
    _process(proc / "304", 304, b"")
    (proc / "304" / "cmdline").unlink()
    os.mkfifo(proc / "304" / "cmdline")  # opening it for reading would wait forever
    return proc


def test_status_does_not_read_through_links_leaving_the_proc_root(crafted: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "status",
            "--json",
            "--proc-root",
            str(crafted),
            "--sys-root",
            str(crafted.parent / "sys"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert str(SECRET_RSS_KIB * 1024) not in result.stdout
    doc = json.loads(result.stdout)
    pids = {p["pid"] for p in doc["processes"]}
    assert 300 in pids  # the honest process of the tree is still there
    assert not pids & {301, 303}  # identity unreadable: not shown


def test_links_inside_the_root_are_followed_and_fd_links_read(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    device = sys_root / "devices" / "pci0000:00" / "0000:c5:00.0"
    device.mkdir(parents=True)
    (device / "uevent").write_text("DRIVER=amdgpu\n")
    card = sys_root / "class" / "drm" / "card0"
    card.mkdir(parents=True)
    (card / "device").symlink_to("../../../devices/pci0000:00/0000:c5:00.0")
    fd = tmp_path / "proc" / "7" / "fd"
    fd.mkdir(parents=True)
    (fd / "3").symlink_to("/dev/dri/renderD128")
    (tmp_path / "secret").write_text(SECRET)
    (card / "leak").symlink_to(tmp_path / "secret")
    Roots(proc=tmp_path / "proc", sys=sys_root)

    assert _fs.read_bytes(card / "device" / "uevent") == b"DRIVER=amdgpu\n"
    assert _fs.listdir(card / "device") == ["uevent"]
    assert _fs.readlink(fd / "3") == "/dev/dri/renderD128"
    with pytest.raises(OSError):
        _fs.read_bytes(card / "leak")
    assert _fs.try_read_text(card / "leak") is None
    assert not _fs.exists(card / "leak")


def test_environ_cmdline_and_doctor_reads_stay_inside_the_tree(tmp_path: Path) -> None:
    """The readers outside the collectors (the allow-listed environment, estimate --pid's
    command line, doctor's own status) keep to the tree too: a link out is not followed."""
    from collectors import _fs
    from collectors.base import Roots
    from monitor.cli.estimate import EstimateError, argv_of
    from monitor.config import Config
    from monitor.servers import read_llama_env

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "environ").write_bytes(b"LLAMA_ARG_CTX_SIZE=4242\0")
    (outside / "cmdline").write_bytes(b"llama-server\0-m\0/secret/model.gguf\0")
    proc = tmp_path / "tree" / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "environ").symlink_to(outside / "environ")
    (proc / "77" / "cmdline").symlink_to(outside / "cmdline")
    roots = Roots(proc=proc, sys=tmp_path / "tree" / "sys")
    assert _fs.read_bytes(outside / "environ")  # readable when named directly
    assert read_llama_env(roots.proc, 77) == {}
    cfg = Config(db_path=tmp_path / "v.db", roots=roots)
    try:
        argv, _env = argv_of(cfg, 77)
    except EstimateError as exc:
        assert "cannot read the command line of pid 77" in str(exc)
    else:
        raise AssertionError(f"read through a link out of the tree: {argv}")
