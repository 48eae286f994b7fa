"""Post-mortems that fit the budget (issue 29 point 4), from real database files the store
wrote and real kernel log lines: the members of the killed cgroup, the cause and the fixes
in terms of its limit, "last seen" that is a measurement, and a report of bounded size."""

from __future__ import annotations

from pathlib import Path

from collectors.base import DeviceEvent, DeviceSample, ProcessInfo, ProcessMemory, Snapshot
from monitor.analysis.postmortem import build
from monitor.report.postmortem import render_html, render_text
from monitor.store.database import Store

GIB = 1024**3
MIB = 1024**2
T0 = 1_800_000_000_000
HOST = DeviceSample(
    "host", "procfs", "host", "Host RAM", "host", 64 * GIB, 20 * GIB, available_bytes=44 * GIB
)


def server(pid: int, comm: str = "llama-server") -> ProcessInfo:
    return ProcessInfo(
        pid, pid * 10, None, 1, 0, comm, (comm, "-m", "/models/x.gguf"), "llama.cpp", ("inference",)
    )


def tick(ts: int, procs: dict[int, int], events: tuple = ()) -> Snapshot:
    return Snapshot(
        ts,
        (HOST,),
        tuple(server(p) for p in procs),
        tuple(ProcessMemory(p, "host", rss_anon_bytes=b) for p, b in procs.items()),
        (),
        (),
        (),
        events,
    )


def kill_event(ts: int, pid: int, anon_kb: int = GIB // 1024) -> DeviceEvent:
    return DeviceEvent(
        ts,
        "host",
        "oom_kill",
        "critical",
        f"Out of memory: Killed process {pid} (llama-server)",
        {
            "pid": pid,
            "comm": "llama-server",
            "constraint": "CONSTRAINT_NONE",
            "anon_rss_kb": anon_kb,
        },
    )


def test_last_seen_is_the_last_nonzero_measurement(tmp_path: Path) -> None:
    """Issue 29.4 point 4: "last seen 0 B" beside "2.4 GiB measured just before it died";
    the samples taken while it died read 0, and "last seen" is the last nonzero one."""
    db = tmp_path / "v.db"
    store = Store.open(db)
    ts = T0
    for _ in range(5):
        store.write(tick(ts, {100: int(2.4 * GIB)}))
        ts += 1000
    store.write(tick(ts, {100: 0}))  # sampled while dying: already unmapped
    store.write(tick(ts + 1000, {100: 0}, events=(kill_event(ts + 1000, 100),)))
    store.close()
    doc = build(db)
    assert doc["victim"]["last_measured"] == {"host": int(2.4 * GIB)}
    row = next(line for line in render_text(doc, 100).splitlines() if line.startswith("  host"))
    assert "0 B" not in row and row.count("2.40 GiB") >= 2, row


def test_the_events_of_the_window_are_capped(tmp_path: Path) -> None:
    """Issue 29.4 point 5: a window with 10,000 events gave a 12,621-line report; at most
    50 are shown, the nearest the death, then "and N more" by kind."""
    db = tmp_path / "v.db"
    store = Store.open(db)
    for chunk in range(10):
        noise = tuple(
            DeviceEvent(
                T0 + chunk * 1000 + i // 100,
                "host",
                "log_line",
                "info",
                f"slot update_slots: id 0 | task {chunk * 1000 + i} | noise",
                {"pid": 100},
            )
            for i in range(1000)
        )
        store.write(tick(T0 + chunk * 1000, {100: GIB}, events=noise))
    store.write(tick(T0 + 20_000, {100: GIB}, events=(kill_event(T0 + 20_000, 100),)))
    store.close()
    doc = build(db)
    assert len(doc["other_events"]) == 50
    assert doc["other_events_omitted"] == 9950
    text = render_text(doc, 100)
    assert len(text.splitlines()) < 400, len(text.splitlines())
    assert "and 9950 more (9950 log_line)." in text
    html = render_html(doc)
    assert len(html) < 200_000, len(html)
    assert "and 9950 more" in html
    # an older document with every event in it is capped by the renderer too
    doc["other_events"] = [
        {"ts_ms": T0 + i, "kind": "log_line", "message": "x"} for i in range(10_000)
    ]
    doc.pop("other_events_omitted")
    assert len(render_text(doc, 100).splitlines()) < 400


# --------------------------------------------------------------------------- a cgroup kill

LIMIT = 3 * GIB
EMBD = 653 * MIB
GPU = DeviceSample("nvml:GPU-0", "nvml", "nvidia", "RTX 4060", "dedicated", 8 * GIB, 2 * GIB)


def big_model(tmp: Path) -> str:
    """Qwen3-8B's shape cut to 4 layers and a 32k vocabulary, Q8_0: ~1 GiB of weights
    (sparse on disk); at -c 98304 with --no-mmap the launch needs ~2.7 GiB."""
    import gguf_models as g

    metadata, tensors = g.qwen3_8b(n_layer=4, n_vocab=32000)
    path = g.write_model(tmp / "big.gguf", "qwen3", metadata, tensors, vocab_size=32000)[0]
    return str(path)


def kernel_kill(ts_ms: int, pid: int, anon_kb: int, usage_line: bool = True) -> DeviceEvent:
    """The kernel's own lines of a memcg OOM kill (mm/oom_kill.c, mm/memcontrol.c formats as
    in tests/fixtures/kernlog/oom-memcg-dmesg-5x.txt), parsed as the daemon parses them."""
    from dataclasses import replace

    from monitor.logs.kernel import parse_lines
    from monitor.logs.kmsg import to_device_events

    limit_kb = LIMIT // 1024
    lines = [
        "[ 9000.100000] llama-server invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, "
        "oom_score_adj=0",
        f"[ 9000.100010] memory: usage {limit_kb}kB, limit {limit_kb}kB, failcnt 812",
        f"[ 9000.100020] memory+swap: usage {limit_kb}kB, limit 9007199254740988kB, failcnt 0",
        "[ 9000.100030] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
        f"mems_allowed=0,oom_memcg=/llm,task_memcg=/llm,task=llama-server,pid={pid},uid=0",
        f"[ 9000.100040] Memory cgroup out of memory: Killed process {pid} (llama-server) "
        f"total-vm:9000000kB, anon-rss:{anon_kb}kB, file-rss:4096kB, shmem-rss:0kB, UID:0 "
        "pgtables:6000kB oom_score_adj:0",
    ]
    if not usage_line:  # a record whose "memory: usage" line was lost (a ring overrun)
        lines = [line for line in lines if "memory: usage" not in line]
    kills = [e for e in to_device_events(parse_lines(lines), ts_ms) if e.kind == "oom_kill"]
    assert len(kills) == 1 and kills[0].data["constraint"] == "CONSTRAINT_MEMCG"
    return replace(kills[0], ts_ms=ts_ms)


def cgroup_db(
    tmp: Path,
    big_argv: tuple[str, ...],
    kill_anon_kb: int,
    cwd: str | None,
    usage_line: bool = True,
    gpu_at_kill: bool = False,
) -> Path:
    """Ten 1 s ticks: embd (pid 100, 653 MiB) and big (pid 200, growing to what the kernel
    record says) in /llm (3 GiB), other (pid 300, 4 GiB) in /other; then the kill of 200."""
    from collectors.base import CgroupMemory, ProcessCgroup

    def proc(pid: int, argv: tuple[str, ...]) -> ProcessInfo:
        return ProcessInfo(pid, pid * 10, None, 1, 0, "llama-server", argv, "llama.cpp", (), cwd)

    procs = (
        proc(100, ("llama-server", "-m", "/models/embd.gguf", "--embedding")),
        proc(200, big_argv),
        proc(300, ("llama-server", "-m", "/models/other.gguf")),
    )
    llm = CgroupMemory("/llm", LIMIT, None, 2 * GIB, 0)
    other = CgroupMemory("/other", 8 * GIB, None, 4 * GIB, 0)
    db = tmp / "v.db"
    store = Store.open(db)
    for i in range(10):
        big = (kill_anon_kb * 1024) * (i + 1) // 10
        memory = (
            ProcessMemory(100, "host", rss_anon_bytes=EMBD, rss_file_bytes=12 * MIB),
            ProcessMemory(200, "host", rss_anon_bytes=big, rss_file_bytes=4 * MIB),
            ProcessMemory(300, "host", rss_anon_bytes=4 * GIB),
            ProcessMemory(100, GPU.device_id, vram_bytes=512 * MIB),  # not charged to /llm
        )
        cgroups = (ProcessCgroup(100, llm), ProcessCgroup(200, llm), ProcessCgroup(300, other))
        snap = Snapshot(T0 + i * 1000, (HOST, GPU), procs, memory, (), (), (), (), cgroups)
        store.write(snap)
    kill = kernel_kill(T0 + 10_000, 200, kill_anon_kb, usage_line)
    at_kill = (HOST, GPU) if gpu_at_kill else (HOST,)
    store.write(Snapshot(T0 + 10_000, at_kill, procs[::2], (), (), (), (), (kill,)))
    store.close()
    return db


def test_a_cgroup_kill_names_every_member_and_the_budget(tmp_path: Path) -> None:
    """Issue 29.4 point 1: two llama-servers in a 3 GiB cgroup, the second killed while
    loading. The post-mortem names the embedding server that held 653 MiB of the same
    budget, with its anon / file / GPU split, says the cause as the budget, and charts
    that cgroup's members and its limit only (not the server of another cgroup)."""
    model = big_model(tmp_path)
    argv = ("llama-server", "-m", model, "-c", "98304", "--no-mmap")
    db = cgroup_db(tmp_path, argv, 2_400 * 1024, None)
    doc = build(db, pid=200, cgroup_version=1)
    budget = doc["cgroup_budget"]
    members = {m["pid"]: m for m in budget["members"]}
    assert set(members) == {100, 200}  # 300 is in /other
    assert members[100] | {"cgroup": None} == members[100] | {
        "cgroup": None,
        "anon_bytes": EMBD,
        "file_bytes": 12 * MIB,
        "shmem_bytes": 0,
        "gpu_bytes": 512 * MIB,
        "victim": False,
    }
    assert members[200]["anon_bytes"] == 2_400 * MIB and members[200]["victim"]
    assert (
        "In memory cgroup /llm: embd 653 MiB + big 2.7 GiB (its need by its estimate) > "
        "3.0 GiB limit; at the kill its members held embd 665 MiB + big 2.3 GiB."
    ) in doc["cause"]
    text = render_text(doc, 100)
    assert "Members of cgroup /llm at the kill" in text
    embd_row = next(line for line in text.splitlines() if "embd" in line and "pid 100" in line)
    assert "anon 653.0 MiB, file 12.0 MiB, shmem 0 B, GPU 512.0 MiB" in embd_row, embd_row
    svg = render_html(doc).split("<svg", 1)[1].split("</svg>", 1)[0]
    assert "pid 100 llama-server" in svg and "pid 200 llama-server (victim)" in svg
    assert "pid 300" not in svg
    assert "cgroup /llm limit: 3.00 GiB" in svg


def test_the_fixes_are_predicts_sized_to_the_budget(tmp_path: Path) -> None:
    """Issue 29.4 point 2: the fix said "raise MemoryMax= to at least 11.7 GiB" (every
    cache at its ceiling) and omitted predict's launch fixes. Now: predict's own fixes
    for the victim's launch with the cgroup's limit less the other members as its room,
    and raising the limit to the sum that was needed, named for the cgroup version."""
    from monitor.analysis.predict_fixes import suggest  # noqa: F401  (the fixes are its)

    model = big_model(tmp_path)
    argv = ("llama-server", "-m", model, "-c", "98304", "--no-mmap")
    db = cgroup_db(tmp_path, argv, 2_400 * 1024, None)
    v1 = build(db, pid=200, cgroup_version=1)
    changes = [f["change"] for f in v1["cgroup_budget"]["fixes"]]
    assert any(c.startswith("-c ") and "(the largest that fits)" in c for c in changes), changes
    assert "stop embd (pid 100)" in changes, changes
    fix = v1["fix"]
    assert "To fit the 3.0 GiB budget of /llm, any one of:" in fix
    minimum = v1["cgroup_budget"]["minimum_limit_bytes"]
    need = v1["cgroup_budget"]["need_bytes"]
    assert minimum == EMBD + need  # the sum that was needed: embd's anon + big's need
    assert 3 * GIB < minimum < 3.5 * GIB, minimum
    assert "raise memory.limit_in_bytes of /llm to at least 3." in fix
    assert "MemoryMax" not in fix and "11." not in fix
    v2 = build(db, pid=200, cgroup_version=2)
    assert "raise MemoryMax= (memory.max) of /llm to at least 3." in v2["fix"]
    assert f"{-(-minimum // MIB)}M:" in v2["fix"]
    # the -c fix fits the budget by predict's own judgement
    from monitor.analysis.predict_verdicts import judge  # noqa: F401

    c_fix = next(f for f in v1["cgroup_budget"]["fixes"] if f["change"].startswith("-c "))
    assert c_fix["verdict"] == "fits" and c_fix["frees_bytes"] > 0


def test_a_growth_kill_bounds_the_cache_that_grew_from_its_log_line(tmp_path: Path) -> None:
    """Issue 29.4 point 3: a server killed when its prompt cache grew got "at least
    1.4 GiB" though the daemon tails its log. The fix is --cache-ram N, N sized so the
    full cache fits the budget, with the log line it comes from."""
    model = big_model(tmp_path)
    log = tmp_path / "big.log"
    log.write_text(
        "0.42.101.912 W srv        update:  - cache state: 11 prompts, 1100.000 MiB "
        "(limits: 8192.000 MiB, 4096 tokens, 8589934592 est)\n"
    )
    import os

    os.chown(log, os.geteuid(), os.getegid())
    argv = ("llama-server", "-m", model, "-c", "8192", "--no-mmap", "--log-file", "big.log")
    db = cgroup_db(tmp_path, argv, 2_400 * 1024, str(tmp_path))
    doc = build(db, pid=200, cgroup_version=2)
    fixes = doc["cgroup_budget"]["fixes"]
    cache = next(f for f in fixes if f["change"].startswith("--cache-ram "))
    n = int(cache["change"].split()[1])
    assert 0 < n < 1100, n  # sized to fit: less than the 1100 MiB it grew to
    assert "cache state: 11 prompts, 1100.000 MiB" in cache["evidence"]
    assert "prompt cache had grown to 1.1 GiB" in doc["cause"]
    assert f"--cache-ram {n}" in doc["fix"] and "cache state: 11 prompts" in doc["fix"]
    # the limit that holds it: embd + the load + the cache that grew, full (--cache-ram's
    # default 8192 MiB); the cache that did not grow is not counted
    budget = doc["cgroup_budget"]
    assert budget["minimum_limit_bytes"] == EMBD + budget["need_bytes"]
    assert "at load + its prompt cache full, 8.0 GiB" in doc["fix"]


def test_without_the_records_limit_line_the_sampled_limit_is_the_budget(tmp_path: Path) -> None:
    """The kernel record without its "memory: usage ..., limit ..." line: the limit the
    daemon last sampled on the killed cgroup (memory.limit_in_bytes / memory.max) is the
    budget, in the cause, the fixes and the chart."""
    model = big_model(tmp_path)
    argv = ("llama-server", "-m", model, "-c", "98304", "--no-mmap")
    db = cgroup_db(tmp_path, argv, 2_400 * 1024, None, usage_line=False)
    doc = build(db, pid=200, cgroup_version=2)
    assert doc["victim"]["kernel"]["memcg_limit_bytes"] is None
    assert doc["cgroup_budget"]["limit_bytes"] == LIMIT
    assert "> 3.0 GiB limit" in doc["cause"]
    assert "raise MemoryMax= (memory.max) of /llm to at least 3." in doc["fix"]
    assert "cgroup /llm limit: 3.00 GiB" in render_html(doc)


def test_the_victims_layers_go_where_its_ngl_put_them(tmp_path: Path) -> None:
    """The launch is estimated with the box's GPUs at the kill: with -ngl 0 all of it is
    host memory charged to the cgroup; with its layers on the 8 GiB GPU only what stays on
    the CPU is, so the budget's need (and the limit to raise to) is far smaller; and for
    -ngl 0 the fixes include predict's "-ngl N" (more layers on the GPU)."""
    model = big_model(tmp_path)
    needs, fixes = {}, {}
    for ngl in ("0", "99"):
        argv = ("llama-server", "-m", model, "-c", "98304", "--no-mmap", "-ngl", ngl)
        folder = tmp_path / ngl
        folder.mkdir()
        db = cgroup_db(folder, argv, 2_400 * 1024, None, gpu_at_kill=True)
        budget = build(db, pid=200, cgroup_version=2)["cgroup_budget"]
        needs[ngl], fixes[ngl] = budget["need_bytes"], budget["fixes"]
    assert needs["0"] > 2 * GIB
    assert needs["99"] < needs["0"] / 4, needs
    # and predict's fix for a host that is short beside a GPU with room: more layers there
    more = [f for f in fixes["0"] if "more layers on the GPU" in f["change"]]
    assert more and more[0]["verdict"] == "fits", fixes["0"]
