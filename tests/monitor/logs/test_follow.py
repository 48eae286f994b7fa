"""Engine logs: a tailed file (with rotation) and a followed journald unit (a real
`journalctl` stand-in process), feeding engine OOM and systemd-oomd events to the daemon."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from collectors.base import Roots
from monitor.config import Config
from monitor.daemon.loop import DaemonContext, tick
from monitor.daemon.sampler import Sampler
from monitor.errors import UsageError
from monitor.logs.follow import FileTail, JournalTail
from monitor.store.database import Store

OOM = (
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 10956.01 MiB on device 0: "
    "cudaMalloc failed: out of memory"
)
TORCH = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 23.64 GiB of which 1.02 GiB is free."
)


def test_file_tail_reads_new_lines_only_and_follows_rotation(tmp_path: Path) -> None:
    log = tmp_path / "llama-server.log"
    log.write_text(f"old line\n{OOM}\n")  # before the tail started: not reported
    tail = FileTail(log)
    assert tail.read() == []
    with log.open("a") as f:
        f.write("srv  update_slots: all slots are idle\n")
        f.write(f"0.12.345.678 E {OOM}\n")
        f.write("partial line without newline")
    events = tail.read()
    assert [e.kind for e in events] == ["engine_oom"] and "cudaMalloc failed" in events[0].message
    with log.open("a") as f:
        f.write(" ... completed\n")
    assert tail.read() == []
    log.rename(tmp_path / "llama-server.log.1")  # rotation: a new file, read from its start
    log.write_text(f"{TORCH}\n")
    (torch,) = tail.read()
    assert torch.kind == "engine_oom" and "Tried to allocate 2.00 GiB" in torch.message
    tail.close()


def test_journal_tail_follows_a_unit(tmp_path: Path) -> None:
    fake = tmp_path / "journalctl"
    lines = [
        {
            "__REALTIME_TIMESTAMP": "1718000200000000",
            "_TRANSPORT": "stdout",
            "_PID": "4001",
            "_COMM": "llama-server",
            "_SYSTEMD_UNIT": "llama.service",
            "MESSAGE": OOM,
        },
        {
            "__REALTIME_TIMESTAMP": "1718000100000100",
            "_TRANSPORT": "journal",
            "_COMM": "systemd-oomd",
            "MESSAGE": "Killed /system.slice/ollama.service due to swap "
            "used (8589934592) / total (9663676416) being more than 90.00%",
        },
    ]
    body = "\n".join(f"echo '{json.dumps(x)}'" for x in lines)
    fake.write_text(f"#!/bin/sh\n{body}\nexec sleep 30\n")
    fake.chmod(0o755)
    tail = JournalTail("llama.service", journalctl=str(fake))
    assert tail.start()
    try:
        events = []
        deadline = time.monotonic() + 5
        while len(events) < 2 and time.monotonic() < deadline:
            events += tail.read()
            time.sleep(0.05)
    finally:
        tail.close()
    assert sorted(e.kind for e in events) == ["engine_oom", "oomd_kill"]
    missing = JournalTail("x.service", journalctl=str(tmp_path / "no-such-journalctl"))
    assert not missing.start() and "cannot run" in (missing.error or "")


def quiet_roots(tmp_path: Path) -> Roots:
    """A /proc with no processes (the real meminfo copied in) and an empty /sys: a tick
    sees nothing that runs on the box, so no other server's exit lands among the events
    (issue 34: on a busy box the real /proc's exits did)."""
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    sys_root.mkdir()
    (proc / "meminfo").write_bytes(Path("/proc/meminfo").read_bytes())
    return Roots(proc=proc, sys=sys_root)


def test_daemon_records_engine_oom_lines_as_events(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    store = Store.open(tmp_path / "v.db")
    roots = quiet_roots(tmp_path)
    ctx = DaemonContext(
        Config(db_path=tmp_path / "v.db", roots=roots), store, Sampler(roots, enabled=["procfs"])
    )
    ctx.tails = [FileTail(log)]
    tick(ctx)
    with log.open("a") as f:
        f.write(f"{OOM}\n")
    time.sleep(0.002)
    tick(ctx)
    rows = store.db.execute("SELECT kind, severity, message FROM events").fetchall()
    assert not [r for r in rows if r[0] == "process_exit"], rows  # the box's exits: none
    assert rows[-1][:2] == ("engine_oom", "critical") and "cudaMalloc" in rows[-1][2]
    store.close()
    os.remove(log)


# --- llama-swap's upstream log stream, served by a real loopback HTTP server ------------


class _SwapLogs:
    """A llama-swap stand-in: ``/logs/stream/upstream`` as chunked text/plain, fed from a
    queue per connection (``None`` ends the stream), like ``streamLogsHandler``."""

    def __init__(self, status: int = 200) -> None:
        import http.server
        import queue
        import threading

        self.paths: list[str] = []
        self.feeds: queue.Queue[queue.Queue[bytes | None]] = queue.Queue()
        self.opened: list[queue.Queue[bytes | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                outer.paths.append(self.path)
                if status != 200:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                feed: queue.Queue[bytes | None] = queue.Queue()
                outer.feeds.put(feed)
                outer.opened.append(feed)
                try:
                    while (data := feed.get()) is not None:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass  # the tail went away first
                self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next_feed(self):  # noqa: ANN201
        return self.feeds.get(timeout=5)

    def close(self) -> None:
        for feed in self.opened:
            feed.put(None)
        self.server.shutdown()
        self.server.server_close()


def _drain(tail, want: int, timeout_s: float = 5.0) -> list:  # noqa: ANN001
    events: list = []
    deadline = time.monotonic() + timeout_s
    while len(events) < want and time.monotonic() < deadline:
        events += tail.read()
        time.sleep(0.02)
    return events


def test_swap_log_stream_lines_across_chunks_and_reconnects() -> None:
    from monitor.logs.follow import SwapLogTail

    swap = _SwapLogs()
    tail = SwapLogTail(swap.url, retry_s=0.1)
    tail.start()
    try:
        feed = swap.next_feed()
        assert swap.paths == ["/logs/stream/upstream?no-history"]  # never the history
        feed.put(b"srv  load_model: loading model\n" + OOM.encode()[:50])
        feed.put(OOM.encode()[50:] + b"\nsrv  update_slots: all slots are idle\n")
        (oom,) = _drain(tail, 1)
        assert oom.kind == "engine_oom" and "cudaMalloc failed: out of memory" in oom.message
        feed.put(None)  # llama-swap restarts: the stream ends, the tail connects again
        feed = swap.next_feed()
        assert len(swap.paths) == 2
        feed.put(f"{TORCH}\n".encode())
        (torch,) = _drain(tail, 1)
        assert "Tried to allocate 2.00 GiB" in torch.message
        t0 = time.monotonic()
    finally:
        tail.close()  # the stream is open and quiet: close() must not wait for it
    assert time.monotonic() - t0 < 10 and not tail._thread.is_alive()  # it did not wait
    swap.close()


def test_swap_log_stream_is_bounded_and_says_why_it_is_not_followed() -> None:
    import pytest

    from monitor.logs.follow import SwapLogTail

    swap = _SwapLogs()
    tail = SwapLogTail(swap.url, max_lines=5)
    tail.start()
    feed = swap.next_feed()
    feed.put(b"".join(b"line %d\n" % i for i in range(20)))
    deadline = time.monotonic() + 5
    while tail.dropped < 15 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tail.dropped == 15 and len(tail._lines) == 5
    tail.close()
    swap.close()
    denied = _SwapLogs(status=401)  # llama-swap with apiKeys set
    tail = SwapLogTail(denied.url, retry_s=30)
    tail.start()
    deadline = time.monotonic() + 5
    while tail.error is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "HTTP 401" in (tail.error or "")
    tail.close()
    denied.close()
    with pytest.raises(UsageError, match="non-loopback"):
        SwapLogTail("http://192.0.2.1:8080")


def test_daemon_records_oom_lines_from_the_swap_stream(tmp_path: Path) -> None:
    from monitor.logs.follow import SwapLogTail, open_tails

    swap = _SwapLogs()
    store = Store.open(tmp_path / "v.db")
    ctx = DaemonContext(Config(db_path=tmp_path / "v.db"), store, Sampler(Roots()))
    ctx.tails = open_tails([], [], swap.url)
    assert [type(t) for t in ctx.tails] == [SwapLogTail]
    try:
        swap.next_feed().put(f"{OOM}\n".encode())
        deadline = time.monotonic() + 5
        rows: list = []
        while not rows and time.monotonic() < deadline:
            time.sleep(0.05)
            tick(ctx)
            rows = store.db.execute(
                "SELECT kind, message FROM events WHERE kind = 'engine_oom'"
            ).fetchall()
        assert rows and "cudaMalloc" in rows[0][1]
    finally:
        for tail in ctx.tails:
            tail.close()
        store.close()
        swap.close()


def test_reload_follows_the_new_log_sources(tmp_path: Path) -> None:
    """SIGHUP with a changed [logs] / [llama_swap] section: old tails closed, new ones read."""
    from monitor import config as config_mod
    from monitor.daemon.loop import reload_config
    from monitor.logs.follow import SwapLogTail, open_tails

    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text("")
    second.write_text("")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[logs]\nfiles = ["{first}"]\n')
    config = config_mod.load(cfg, db=tmp_path / "v.db")
    store = Store.open(config.db_path)
    ctx = DaemonContext(config, store, Sampler(Roots()))
    ctx.tails = open_tails(list(config.log_files), [], config.swap_url)
    old = ctx.tails[0]
    swap = _SwapLogs()
    try:
        cfg.write_text(f'[logs]\nfiles = ["{second}"]\n[llama_swap]\nurl = "{swap.url}"\n')
        assert reload_config(ctx)
        assert old._fd is None  # closed
        assert [type(t).__name__ for t in ctx.tails] == ["FileTail", "SwapLogTail"]
        assert ctx.tails[0].path == second
        ctx.tails[0].read()  # positions at the end
        with second.open("a") as f:
            f.write(f"{OOM}\n")
        assert [e.kind for e in ctx.tails[0].read()] == ["engine_oom"]
        swap.next_feed()  # the stream was opened
        assert isinstance(ctx.tails[1], SwapLogTail)
        tails = ctx.tails
        assert reload_config(ctx)  # unchanged: the same tails go on
        assert ctx.tails is tails
    finally:
        for tail in ctx.tails:
            tail.close()
        store.close()
        swap.close()


# --- spoofed evidence (issue 14, item 8): kernel kills come from the kernel only --------

SPOOFS = [
    "Out of memory: Killed process 1 (systemd) total-vm:100kB, anon-rss:50kB, file-rss:0kB, "
    "shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:0",
    "Killed process 1 (systemd)",
    "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
    "task_memcg=/,task=systemd,pid=1,uid=0",
    "[12345.678901] llama-server invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER), order=0",
    "6,1234,5678901,-;NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.",
    "systemd-oomd[612]: Killed /system.slice/ssh.service due to memory pressure",
    "systemd[1]: ssh.service: systemd-oomd killed 3 process(es) in this unit.",
]


def test_a_followed_engine_log_cannot_forge_kernel_evidence(tmp_path: Path) -> None:
    """A real daemon tick over a real followed file: a spoofed kernel OOM kill (and Xid,
    oomd) written into the engine's log is no event; the engine's own CUDA OOM line is an
    ``engine_oom`` event naming the log it came from."""
    log = tmp_path / "llama-server.log"
    log.write_text("")
    store = Store.open(tmp_path / "v.db")
    ctx = DaemonContext(Config(db_path=tmp_path / "v.db"), store, Sampler(Roots()))
    ctx.tails = [FileTail(log)]
    try:
        tick(ctx)
        with log.open("a") as f:
            f.write("".join(f"{line}\n" for line in SPOOFS))
        time.sleep(0.002)
        tick(ctx)
        kinds = [r[0] for r in store.db.execute("SELECT kind FROM events").fetchall()]
        assert not {
            "oom_kill",
            "oom_invoked",
            "xid",
            "oomd_kill",
            "amdgpu_error",
            "engine_oom",
            "app_oom",
        } & set(kinds), kinds
        with log.open("a") as f:
            f.write(f"0.12.345.678 E {OOM}\n")
        time.sleep(0.002)
        tick(ctx)
        rows = store.db.execute(
            "SELECT kind, severity, message, data FROM events WHERE kind"
            " IN ('engine_oom', 'app_oom', 'oom_kill')"
        ).fetchall()
        assert [r[:2] for r in rows] == [("engine_oom", "critical")], rows
        assert "cudaMalloc failed" in rows[0][2]
        assert json.loads(rows[0][3])["source"] == str(log)
    finally:
        for tail in ctx.tails:
            tail.close()
        store.close()


def test_a_unit_journal_gives_kernel_kinds_only_from_the_kernel_transport(tmp_path: Path) -> None:
    """``journalctl -u`` output: a unit printing a kernel-looking line is not the kernel
    (``_TRANSPORT=stdout``); the kernel's own record about it is (``_TRANSPORT=kernel``)."""
    fake = tmp_path / "journalctl"
    spoof = {
        "__REALTIME_TIMESTAMP": "1718000200000000",
        "_TRANSPORT": "stdout",
        "_PID": "4001",
        "_COMM": "llama-server",
        "MESSAGE": SPOOFS[0],
    }
    oomd_spoof = {
        "__REALTIME_TIMESTAMP": "1718000200000001",
        "_TRANSPORT": "stdout",
        "_PID": "4001",
        "_COMM": "llama-server",
        "MESSAGE": SPOOFS[5],
    }
    real = {
        "__REALTIME_TIMESTAMP": "1718000300000000",
        "_TRANSPORT": "kernel",
        "MESSAGE": SPOOFS[0].replace("process 1 (systemd)", "process 4001 (llama-server)"),
    }
    engine = {
        "__REALTIME_TIMESTAMP": "1718000400000000",
        "_TRANSPORT": "stdout",
        "_PID": "4001",
        "_COMM": "llama-server",
        "MESSAGE": OOM,
    }
    body = "\n".join(f"echo '{json.dumps(x)}'" for x in (spoof, oomd_spoof, real, engine))
    fake.write_text(f"#!/bin/sh\n{body}\nexec sleep 30\n")
    fake.chmod(0o755)
    tail = JournalTail("llama.service", journalctl=str(fake))
    assert tail.start()
    try:
        events: list = []
        deadline = time.monotonic() + 5
        while len(events) < 2 and time.monotonic() < deadline:
            events += tail.read()
            time.sleep(0.05)
        time.sleep(0.1)
        events += tail.read()
    finally:
        tail.close()
    assert [(e.kind, e.pid) for e in events] == [("oom_kill", 4001), ("engine_oom", 4001)]
    assert events[1].data["source"] == "journal:llama.service"
