"""One state of the box from every origin (issue 15 point 2).

A real tick is sampled on this machine: a process whose /proc reads ``llama-server -m
x.gguf``, a second one standing in for its draft, both on a GPU (the fake NVML driver,
tests/fakes/nvml_fake.py; only the C library is fake), and a third GPU process in another
PID namespace (a pid above pid_max: hidden). That tick is then written the ways a box is
recorded - into a real database by the daemon's writer, as a ``status --json`` file, and
served by a real HTTP API on loopback - and read back through :func:`box_state`: every
origin must give the same BoxState as the live one.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import fake_server
import nvml_fake
import pytest

from collectors.base import CollectorOptions, Roots
from monitor.analysis.state import (
    Daemon,
    DatabaseMoment,
    Live,
    Remote,
    StatusFile,
    box_state,
    chosen_origin,
)
from monitor.config import Config
from monitor.daemon.sampler import Sampler
from monitor.errors import UsageError
from monitor.http import HttpServer
from monitor.http.client import DaemonClient, RemoteError
from monitor.report.status import to_json
from monitor.store.database import Store, open_readonly

MIB = 1024**2
pytestmark = pytest.mark.usefixtures("fresh_pynvml")


def _pid_max() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text())


@pytest.fixture
def live(tmp_path: Path):  # noqa: ANN201
    """(the live BoxState, its Sampler still open): a llama-server and its draft on a GPU,
    and a hidden GPU process."""
    scenario = nvml_fake.load("rtx4060")
    scenario["devices"][0]["compute"].append({"pid": "ghost", "used": 300 * MIB})
    argv = ["llama-server", "-m", "x.gguf", "-c", "2048", "-np", "1"]
    with fake_server.running(argv, cwd=tmp_path) as server:
        draft = subprocess.Popen(["sleep", "600"])
        try:
            nvml_fake.install(
                scenario, {"llama": server.pid, "draft": draft.pid, "ghost": _pid_max() + 7}
            )
            sampler = Sampler(Roots(), CollectorOptions(pss_per_tick=0))
            try:
                state = box_state(Live(sampler=sampler))
                yield state, server.pid, draft.pid
            finally:
                sampler.close()
        finally:
            draft.kill()
            draft.wait()


def test_every_origin_gives_the_same_box_state(live, tmp_path: Path) -> None:
    state, server_pid, draft_pid = live
    snap = state.snapshot
    assert state.origin == "live" and state.live
    # the tick has what makes a box state worth comparing: a GPU, its processes, a hidden one
    gpu = next(d for d in snap.devices if d.device_id.startswith("nvml:"))
    on_gpu = {m.pid: m.vram_bytes for m in snap.memory if m.device_id == gpu.device_id}
    assert on_gpu[server_pid] == 6012534784 and on_gpu[draft_pid] == 1244659712
    assert [h.used_bytes for h in snap.hidden] == [300 * MIB]
    assert any(p.pid == server_pid and p.engine == "llama.cpp" for p in snap.processes)

    # the daemon's own tick (its HTTP API)
    assert box_state(Daemon(snap)) == state

    # a status --json file (--state FILE)
    status = tmp_path / "status.json"
    status.write_text(json.dumps(to_json(snap)))
    from_file = box_state(StatusFile(status))
    assert (from_file.origin, from_file.where) == ("file", str(status))
    assert from_file == state

    # a moment of the daemon's database (--at TIME): the writer's own tables, read back
    db = tmp_path / "v.db"
    store = Store.open(db)
    store.write(snap)
    store.close()
    from_db = box_state(DatabaseMoment(db, snap.ts_ms + 500))  # a moment just after it
    assert (from_db.origin, from_db.ts_ms) == ("database", snap.ts_ms)
    # what the database does not keep, unknown there rather than guessed: cgroup limits,
    # the CPU's features, what tracking left out, and of a hidden process only its device,
    # bytes and reason (not the advice text, nor a hidden process that holds no device
    # memory)
    assert from_db.snapshot.cgroups == () and from_db.snapshot.cpu_features is None
    assert from_file.snapshot.cpu_features == snap.cpu_features is not None
    assert from_db.snapshot.untracked is None
    assert from_file.snapshot.untracked == snap.untracked is not None
    recorded = replace(
        snap,
        cgroups=(),
        cpu_features=None,
        untracked=None,
        hidden=tuple(
            replace(h, hint=None, comm=None) for h in snap.hidden if h.device_id is not None
        ),
    )
    assert from_db == box_state(Daemon(recorded))
    conn = open_readonly(db)
    try:  # the same tick on an open connection (the post-mortem's way in)
        assert box_state(DatabaseMoment(None, snap.ts_ms, conn)) == from_db
    finally:
        conn.close()

    # a remote daemon: a real HTTP API on loopback serving that tick
    server = HttpServer("127.0.0.1:0", "tok-1", lambda: snap, db, Config(db_path=db))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.address[1]}"
        remote = box_state(Remote(DaemonClient(url, "tok-1")))
        assert (remote.origin, remote.where) == ("remote", url)
        assert remote == state
        with pytest.raises(RemoteError, match=r"HTTP 401 \(wrong token\)"):
            box_state(Remote(DaemonClient(url, "wrong")))
        with pytest.raises(RemoteError, match=r"HTTP 401 \(give --token\)"):
            box_state(Remote(DaemonClient(url)))
    finally:
        server.stop()


def test_a_different_box_is_a_different_state(live) -> None:
    """Equality is worth something: one byte more on one process is another state, and
    the margin the picture was drawn with is part of it."""
    state, server_pid, _ = live
    snap = state.snapshot
    memory = tuple(
        replace(m, vram_bytes=m.vram_bytes + 1) if m.pid == server_pid and m.vram_bytes else m
        for m in snap.memory
    )
    assert box_state(Daemon(replace(snap, memory=memory))) != state
    assert box_state(Daemon(snap), margin_bytes=state.margin_bytes + 1) != state
    assert box_state(Daemon(replace(snap, events=(), exited=(), runs=()))) == state


def test_the_options_choose_the_origin(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    assert chosen_origin(Roots(), None, db, state=tmp_path / "s.json", at="1000") == StatusFile(
        tmp_path / "s.json"
    )
    assert chosen_origin(Roots(), None, db, at="1000") == DatabaseMoment(db, 1000)
    assert isinstance(chosen_origin(Roots(), ("procfs",), db), Live)
    with pytest.raises(UsageError, match="cannot read the time"):
        chosen_origin(Roots(), None, db, at="yesterday-ish")


def test_a_live_origin_samples_with_the_sampler_its_edge_made() -> None:
    """analysis/ starts no collectors (the layers of docs/architecture.md): a command's
    live origin carries the one-tick sampler the command made, and none is refused."""
    from monitor.daemon.oneshot import OneShotSampler

    sampler = OneShotSampler(Roots(), ("procfs",))
    origin = chosen_origin(Roots(), ("procfs",), Path("v.db"), sampler=sampler)
    assert isinstance(origin, Live) and origin.sampler is sampler
    state = box_state(origin)
    assert state.origin == "live" and state.snapshot.ts_ms > 0
    with pytest.raises(TypeError, match="needs its sampler"):
        box_state(Live(Roots(), ("procfs",)))


def test_each_origin_fails_in_one_line(tmp_path: Path) -> None:
    from monitor.errors import InputError
    from monitor.store.database import StoreError

    with pytest.raises(InputError, match="cannot read the state file"):
        box_state(StatusFile(tmp_path / "missing.json"))
    with pytest.raises(StoreError, match="no database at"):
        box_state(DatabaseMoment(tmp_path / "missing.db", 1000))
    with pytest.raises(RemoteError, match="expected http://HOST:PORT"):
        DaemonClient("file:///etc/passwd")
