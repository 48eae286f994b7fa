"""`vramscope predict` inside a real memory cgroup: a launch is bound by its cgroup's room,
not by host RAM (issue 18: "FITS, 17.95 GiB to spare" for a 2.11 GiB launch in a 1 GiB
cgroup, OOM-killed 10 s later)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cli_runner
import gguf_models as g
import pytest
from memcg import make_cgroup

from collectors.base import CgroupMemory, DeviceSample, ProcessInfo, ProcessMemory, Roots
from collectors.cgroup import memory_hierarchy, pid_limit, read_limit

ROOT = Path(__file__).resolve().parents[3]
GIB, MIB = 1024**3, 1024**2


def two_gib_model(tmp: Path) -> str:
    """Qwen3-8B's shape cut to 4 layers, Q8_0: ~2 GiB of weights (sparse on disk)."""
    metadata, tensors = g.qwen3_8b(n_layer=4)
    return str(g.write_model(tmp / "small.gguf", "qwen3", metadata, tensors, vocab_size=151936)[0])


def predict(*args: str, procs: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``vramscope predict --json ...``, joined to the cgroup ``procs`` before it starts."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "monitor", "predict", "--json", *args]
    if procs is not None:
        argv = ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def host_of(doc: dict) -> dict:
    return next(d for d in doc["devices"] if d["device_id"] == "host")


def test_a_launch_in_a_1_gib_cgroup_is_oom_though_host_ram_has_room(tmp_path: Path) -> None:
    """The cgroup binds, not host RAM; inside it the verdict follows the kernel's memcg
    reclaim: weights read into anonymous memory (-lm none) must fit, so OOM (exit 1);
    mmap'd weights (-nr: kept mapped on every CPU) are clean page cache the kernel evicts
    instead of killing, so the launch loads but thrashes (exit 4)."""
    meminfo = Path("/proc/meminfo").read_text()
    available = (
        int(next(x for x in meminfo.splitlines() if x.startswith("MemAvailable")).split()[1]) * 1024
    )
    if available < 4 * GIB:
        pytest.skip("this test needs 4 GiB of host RAM available to show the FITS case")
    model = two_gib_model(tmp_path)
    base = ["--", "llama-server", "-m", model, "-c", "4096", "-np", "1", "--cache-ram", "0"]
    read_in, mapped = [*base, "-lm", "none"], [*base, "-nr"]
    group, procs = make_cgroup(1 * GIB)
    try:
        inside = predict(*read_in, procs=procs)
        from_outside = predict("--cgroup", str(group), *read_in)
        thrash = predict(*mapped, procs=procs)
    finally:
        group.rmdir()
    assert inside.returncode == 1, inside.stderr + inside.stdout
    doc = json.loads(inside.stdout)
    host = host_of(doc)
    assert doc["verdict"] == "oom"
    assert host["binding"] == f"cgroup /{group.name}"
    assert 1.9 * GIB < host["need_bytes"] < 2.6 * GIB  # the weights read into the heap
    assert host["evictable_bytes"] == 0 and host["must_fit_bytes"] == host["need_bytes"]
    assert host["room_bytes"] < 1 * GIB  # the cgroup's limit less what predict itself holds
    assert any(group.name in n for n in doc["notes"])
    assert any("reclaimable page cache" in n for n in doc["notes"])  # the room, in parts
    # --cgroup names the same cgroup from outside it
    assert from_outside.returncode == 1, from_outside.stderr
    other = host_of(json.loads(from_outside.stdout))
    assert other["binding"] == f"cgroup /{group.name}" and other["room_bytes"] <= 1 * GIB
    # mapped: what must fit (KV, compute, output) does, the weights do not stay resident
    assert thrash.returncode == 4, thrash.stderr + thrash.stdout
    mapped_host = host_of(json.loads(thrash.stdout))
    assert mapped_host["verdict"] == "thrash"
    assert mapped_host["must_fit_bytes"] < mapped_host["room_bytes"] < mapped_host["need_bytes"]
    assert mapped_host["not_resident_bytes"] > 0.5 * GIB
    # outside the cgroup (this test runs without a memory limit) the same launch fits
    outside = predict(*read_in)
    assert outside.returncode == 0, outside.stderr + outside.stdout
    free = host_of(json.loads(outside.stdout))
    assert free["verdict"] in ("fits", "tight") and free["room_bytes"] > 3 * GIB


def test_the_tightest_ancestor_binds(tmp_path: Path) -> None:
    """A parent with 1 GiB, a child with 4 GiB: the child's launch has at most 1 GiB."""
    parent, _ = make_cgroup(1 * GIB)
    child = parent / "child"
    try:
        child.mkdir()
        limit_file = "memory.max" if (child / "memory.max").exists() else "memory.limit_in_bytes"
        (child / limit_file).write_text(str(4 * GIB))
        h = memory_hierarchy(Roots())
        assert h is not None
        rel = "/" + str(child.relative_to(h.mount))
        found = read_limit(h, rel)
        assert found is not None and found.path == f"/{parent.name}"
        assert found.memory_max_bytes == 1 * GIB
        assert found.room_bytes is not None and found.room_bytes <= 1 * GIB
    finally:
        child.rmdir()
        parent.rmdir()


def test_a_recorded_tree_answers_like_the_live_one(tmp_path: Path) -> None:
    """cgroup v2 files under --sys-root/--proc-root: "max" is no limit, a parent's binds."""
    sys_root, proc_root = tmp_path / "sys", tmp_path / "proc"
    cg = sys_root / "fs/cgroup"
    unit = cg / "system.slice/llama-swap.service"
    unit.mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpu io memory pids\n")
    (cg / "system.slice/memory.max").write_text("max\n")
    (cg / "system.slice/memory.high").write_text("max\n")
    (cg / "system.slice/memory.current").write_text(str(9 * GIB))
    (unit / "memory.max").write_text(str(12 * GIB))
    (unit / "memory.high").write_text(str(10 * GIB))
    (unit / "memory.current").write_text(str(7 * GIB))
    (proc_root / "4242").mkdir(parents=True)
    (proc_root / "4242/cgroup").write_text("0::/system.slice/llama-swap.service\n")
    roots = Roots(proc_root, sys_root)
    found = pid_limit(roots, memory_hierarchy(roots), 4242)
    assert found == CgroupMemory("/system.slice/llama-swap.service", 12 * GIB, 10 * GIB, 7 * GIB)
    assert found.room_bytes == 5 * GIB


def test_status_json_carries_a_servers_cgroup_and_predict_judges_llama_swaps(
    tmp_path: Path,
) -> None:
    """A recorded state: llama-swap in a 6 GiB unit with 5 GiB charged; host RAM has 40 GiB.
    ``predict MODEL_ID`` judges the model against llama-swap's cgroup."""
    from collectors.base import ProcessCgroup, Snapshot
    from monitor.report.status import to_json

    model = two_gib_model(tmp_path)
    swap = ProcessInfo(
        900,
        1,
        None,
        1,
        0,
        "llama-swap",
        ("llama-swap", "--config", "x"),
        "llama-swap",
        ("inference",),
    )
    limit = CgroupMemory("/system.slice/llama-swap.service", 6 * GIB, None, 5 * GIB)
    hostdev = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 24 * GIB, available_bytes=40 * GIB
    )
    snap = Snapshot(
        1_800_000_000_000,
        (hostdev,),
        (swap,),
        (ProcessMemory(900, "host", rss_anon_bytes=20 * MIB),),
        (),
        (),
        (),
        cgroups=(ProcessCgroup(900, limit),),
    )
    doc = to_json(snap)
    assert doc["processes"][0]["cgroup"] == {
        "path": "/system.slice/llama-swap.service",
        "memory_max_bytes": 6 * GIB,
        "memory_high_bytes": None,
        "memory_current_bytes": 5 * GIB,
        "reclaimable_bytes": None,
    }
    state = tmp_path / "state.json"
    state.write_text(json.dumps(doc))
    config = tmp_path / "swap.yaml"
    config.write_text(
        f"models:\n  small:\n    cmd: llama-server -m {model} -c 4096 -np 1 "
        "--cache-ram 0 -lm none --port ${PORT}\n"
    )
    result = predict("--state", str(state), "--swap-config", str(config), "small")
    assert result.returncode == 1, result.stderr + result.stdout
    host = host_of(json.loads(result.stdout))
    assert host["binding"] == "cgroup /system.slice/llama-swap.service"
    assert host["room_bytes"] == 1 * GIB
    assert any(
        "llama-swap (pid 900) runs in the memory cgroup" in n
        for n in json.loads(result.stdout)["notes"]
    )
    # with MemoryHigh= 5.5 GiB the load passes it: named, but it is not the kill limit
    doc["processes"][0]["cgroup"]["memory_high_bytes"] = int(5.5 * GIB)
    state.write_text(json.dumps(doc))
    notes = json.loads(
        predict("--state", str(state), "--swap-config", str(config), "small").stdout
    )["notes"]
    assert any("memory.high (MemoryHigh=) 5.5 GiB" in n and "throttles" in n for n in notes)


def test_doctor_shows_each_servers_cgroup_and_warns_near_the_limit() -> None:
    from collectors.base import ProcessCgroup, Snapshot
    from monitor.cli.doctor import cgroup_checks

    server = ProcessInfo(77, 1, None, 1, 0, "llama-server", ("llama-server",), "llama.cpp")
    calm = CgroupMemory("/system.slice/a.service", 8 * GIB, 6 * GIB, 2 * GIB)
    full = CgroupMemory("/system.slice/a.service", 8 * GIB, None, int(7.6 * GIB))
    (ok,) = cgroup_checks(
        Snapshot(0, (), (server,), (), (), (), (), cgroups=(ProcessCgroup(77, calm),))
    )
    assert ok.level == "info" and "2.00 GiB charged, max 8.00, high 6.00 GiB" in ok.detail
    (warn,) = cgroup_checks(
        Snapshot(0, (), (server,), (), (), (), (), cgroups=(ProcessCgroup(77, full),))
    )
    assert warn.level == "warn" and "95% of its max" in warn.detail


def test_a_cgroup_or_unit_that_is_not_there_is_one_line_exit_2(tmp_path: Path) -> None:
    if memory_hierarchy(Roots()) is None:
        pytest.skip("no memory cgroup controller here")
    model = two_gib_model(tmp_path)
    launch = ["--", "llama-server", "-m", model, "-c", "4096"]
    # (on a v1 or hybrid box /sys/fs/cgroup/X is outside the memory controller's mount)
    for args, says in (
        (["--cgroup", "/sys/fs/cgroup/vramscope-no-such"], "cgroup"),
        (["--cgroup", "/system.slice/../../etc"], "no such cgroup"),
        (["--unit", "../x"], "expected a systemd unit name"),
        (["--unit", "vramscope-no-such.service"], "--unit vramscope-no-such"),
    ):
        result = predict(*args, *launch)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("vramscope: error: ") and says in result.stderr
        assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_status_json_shows_a_live_servers_cgroup_limit(tmp_path: Path) -> None:
    """A process that looks like llama-server, started inside a 1 GiB memory cgroup:
    `vramscope status --json` names its cgroup with the limit and the charge."""
    group, procs = make_cgroup(1 * GIB)
    program = tmp_path / "llama-server"  # comm, exe's link and argv[0] say llama-server
    program.symlink_to("/bin/sleep")
    join_then_sleep = (
        "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
        "os.execv(sys.argv[2], [sys.argv[2], '120'])"
    )
    server = subprocess.Popen([sys.executable, "-c", join_then_sleep, str(procs), str(program)])
    try:
        doc = None
        for _ in range(50):  # until it has joined and exec'd (polled, generous)
            if Path(f"/proc/{server.pid}/comm").read_bytes() == b"llama-server\n":
                break
            subprocess.run(["sleep", "0.1"])
        result = cli_runner.vramscope("status", "--json")
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
    finally:
        server.kill()
        server.wait()
        group.rmdir()
    row = next(p for p in doc["processes"] if p["pid"] == server.pid)
    assert row["engine"] == "llama.cpp"
    cg = row["cgroup"]
    assert cg["path"] == f"/{group.name}" and cg["memory_max_bytes"] == 1 * GIB
    assert 0 < cg["memory_current_bytes"] < 1 * GIB


def test_page_cache_a_cgroup_holds_is_room_not_use(tmp_path: Path) -> None:
    """A real cgroup reads a 256 MiB file: its charge grows by the page cache, but the
    kernel reclaims clean cache before it OOM-kills, so the room (what a new load can get)
    barely moves; the parts are in the note predict prints."""
    data = tmp_path / "cache.bin"
    with open(data, "wb") as f:
        f.write(os.urandom(1 << 20) * 256)
        f.flush()
        os.fsync(f.fileno())  # clean, then out of the cache: the reader charges it anew
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    group, procs = make_cgroup(1 * GIB)
    try:
        hier = memory_hierarchy(Roots())
        assert hier is not None
        path = "/" + group.name
        before = read_limit(hier, path)
        subprocess.run(
            ["sh", "-c", f'echo $$ > "{procs}" && exec cat "{data}" > /dev/null'], check=True
        )
        after = read_limit(hier, path)
    finally:
        group.rmdir()  # the reader has exited: the cgroup is empty
    assert before is not None and after is not None
    charged = (after.memory_current_bytes or 0) - (before.memory_current_bytes or 0)
    assert charged > 200 * MIB  # the file's pages are charged to the cgroup...
    assert (after.reclaimable_bytes or 0) > 200 * MIB  # ...as clean, reclaimable cache
    assert after.room_bytes is not None and before.room_bytes is not None
    assert abs(after.room_bytes - before.room_bytes) < 32 * MIB
    assert after.room_bytes > (after.memory_max_bytes or 0) - (after.memory_current_bytes or 0)
    assert "reclaimable page cache" in after.room_parts()
