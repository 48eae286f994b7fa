"""Remote predict cannot burn CPU, hang, or read files the caller could not (issue 28
item 3). Real files (sparse 100 GiB GGUFs, FIFOs, symlinks, a root-only 0600 model), a
real daemon on a loopback port, a real client process run as ``nobody``; the reader runs in
a subprocess under a hang guard, since the old code walks such headers for hours or blocks
forever in ``open``."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.http.deadline import Busy, DeadlineExceeded, DeadlineRunner
from tests.fakes import gguf_models as g
from tests.fakes.daemon_harness import ROOT, running

GUARD_S = 30.0  # hang guard: the old code is still walking (or blocked) when it fires
SPARSE_BYTES = 100 * 2**30
ARRAY, STRING = 9, 8  # gguf.GGUFValueType
SYSTEM_PYTHON = "/usr/bin/python3"  # reachable by nobody (the venv's lives under /root)


def _gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def sparse_string_array(path: Path, n_strings: int, length_bytes: int = 0) -> Path:
    """A GGUF whose one metadata key is an array of ``n_strings`` strings in a sparse
    100 GiB file: the first string's length is written, the rest of the file is a hole
    (zero lengths) unless ``length_bytes``: then every string claims that many bytes and
    each length field is written where the previous string ends."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    head += _gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, n_strings)
    with open(path, "wb") as f:
        f.write(head)
        if length_bytes:
            for i in range(min(n_strings, 2000)):
                f.seek(len(head) + i * (8 + length_bytes))
                f.write(struct.pack("<Q", length_bytes))
        f.truncate(SPARSE_BYTES)
    return path


READ_SCRIPT = """
import json, os, sys, time
from monitor.gguf.reader import GgufError, read_header
def rchar():
    for line in open("/proc/self/io"):
        if line.startswith("rchar:"):
            return int(line.split()[1])
before = rchar()
try:
    h = read_header(sys.argv[1])
    out = {"ok": True, "tensors": len(h.tensors)}
except GgufError as exc:
    out = {"ok": False, "error": str(exc)}
out["read_bytes"] = rchar() - before
print(json.dumps(out))
"""


def read_in_child(path: Path, prelude: str = "", *args: str) -> dict:
    """read_header(path) in a subprocess under GUARD_S: what it answered, or a hang."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", prelude + READ_SCRIPT, str(path), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=GUARD_S,
        )
    except subprocess.TimeoutExpired:
        return {"hang": f"still walking (or blocked) after {GUARD_S:.0f} s"}
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


# -- (a) the header walk is bounded whatever the file's size ---------------------------------


def test_a_sparse_header_claiming_12e9_empty_strings_is_refused_at_once(tmp_path: Path) -> None:
    # 12e9 strings x 8 bytes = 96 GB fits in the 100 GiB file: the size bounds pass it
    path = sparse_string_array(tmp_path / "hostile.gguf", 12_000_000_000)
    got = read_in_child(path)
    assert "hang" not in got, got  # the old code: "still walking after 30 s"
    assert got["ok"] is False
    assert "header metadata past 64 MiB/10M items" in got["error"], got


def test_a_header_that_reads_past_64_mib_is_refused(tmp_path: Path) -> None:
    # 2000 strings of 50 MiB each: every one is a seek and a fresh 1 MiB chunk read
    path = sparse_string_array(tmp_path / "long.gguf", 2000, length_bytes=50 * 2**20)
    got = read_in_child(path)
    assert "hang" not in got, got
    assert got["ok"] is False, got  # the old code read ~2 GiB and accepted the header
    assert "header metadata past 64 MiB/10M items" in got["error"], got
    assert got["read_bytes"] <= 70 * 2**20, got


# -- (b) splits: a FIFO or a link swapped in before the open --------------------------------


@pytest.fixture
def split_model(tmp_path: Path) -> list[Path]:
    metadata, tensors = g.qwen3_8b()
    return g.write_model(tmp_path / "m.gguf", "qwen3", metadata, tensors[:6], split=3)


SWAP_PRELUDE = """
import os, sys
_target, _swap_in = sys.argv[2], sys.argv[3]
_done = []
def _hook(event, args):
    # the moment the reader opens split 2 (after every check by name): swap it
    if event == "open" and not _done and str(args[0]).endswith(os.path.basename(_target)):
        _done.append(1)
        os.rename(_swap_in, _target)
sys.addaudithook(_hook)
"""


def test_split_2_swapped_for_a_fifo_at_open_is_refused_without_blocking(
    split_model: list[Path], tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = read_in_child(split_model[0], SWAP_PRELUDE, str(split_model[1]), str(fifo))
    assert "hang" not in got, got  # the old code: blocked in open() on the FIFO for good
    assert got["ok"] is False and got["error"].endswith("not a regular file"), got
    assert split_model[1].is_fifo()  # the swap did happen


def test_split_2_swapped_for_a_symlink_at_open_is_refused(
    split_model: list[Path], tmp_path: Path
) -> None:
    moved = tmp_path / "elsewhere.gguf"
    os.link(split_model[1], moved)  # the same split 2, under another name
    link = tmp_path / "link"
    link.symlink_to(moved)
    got = read_in_child(split_model[0], SWAP_PRELUDE, str(split_model[1]), str(link))
    assert "hang" not in got, got
    assert split_model[1].is_symlink()  # the swap did happen
    assert got["ok"] is False, got  # the old code followed it and read the header
    assert "is a symbolic link" in got["error"], got


def test_a_split_that_is_a_fifo_is_refused(split_model: list[Path]) -> None:
    split_model[2].unlink()
    os.mkfifo(split_model[2])
    got = read_in_child(split_model[0])
    assert got["ok"] is False and got["error"].endswith("not a regular file"), got


def test_a_model_symlinked_into_place_is_still_read(
    split_model: list[Path], tmp_path: Path
) -> None:
    """The Hugging Face cache stores every .gguf as a link into blobs/: followed once, on
    purpose (a link swapped in later is refused, above)."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    for i, p in enumerate(split_model):
        p.rename(blobs / f"sha{i}")
        p.symlink_to(blobs / f"sha{i}")
    got = read_in_child(split_model[0])
    assert got["ok"] is True and got["tensors"] == 6, got


# -- (c) HTTP predicts: model_dirs and the caller's own rights ------------------------------


def write_qwen3(path: Path) -> Path:
    metadata, tensors = g.qwen3_8b()
    return g.write_model(path, "qwen3", metadata, tensors)[0]  # sparse tensor data


@pytest.fixture
def models() -> Iterator[Path]:
    """A folder nobody can search (tmp_path's parents are 0700), with a world-readable
    model and a root-only (0600) copy."""
    folder = Path(tempfile.mkdtemp(prefix="vramscope-models-"))
    try:
        folder.chmod(0o755)
        write_qwen3(folder / "public.gguf").chmod(0o644)
        write_qwen3(folder / "secret.gguf").chmod(0o600)
        yield folder
    finally:
        shutil.rmtree(folder)


CLIENT = """
import http.client, json, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
conn.request("POST", "/api/v1/predict", sys.argv[2],
             {"Content-Type": "application/json"})
resp = conn.getresponse()
print(json.dumps({"status": resp.status, "body": json.loads(resp.read())}))
"""


def predict_as(port: int, model: Path | str, nobody: bool) -> tuple[int, dict]:
    """POST /api/v1/predict from a real client process (as ``nobody`` when asked)."""
    body = json.dumps({"command": ["llama-server", "-m", str(model), "-c", "4096"]})
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if nobody else []
    done = subprocess.run(
        [*prefix, SYSTEM_PYTHON, "-I", "-c", CLIENT, str(port), body],
        capture_output=True,
        text=True,
        timeout=90,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    return got["status"], got["body"]


needs_tools = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PYTHON),
    reason="needs root, setpriv and /usr/bin/python3 to run a client as nobody",
)


@needs_tools
def test_http_predict_reads_only_inside_model_dirs_what_the_caller_could(
    tmp_path: Path, models: Path
) -> None:
    outside = write_qwen3(tmp_path / "outside.gguf")
    (models / "escape.gguf").symlink_to(outside)
    config = f'model_dirs = ["{models}"]\n'
    with running(tmp_path, extra_config=config) as daemon:
        status, doc = predict_as(daemon.port, outside, nobody=False)
        assert status == 403 and "outside the folders in [http] model_dirs" in doc["error"]
        status, doc = predict_as(daemon.port, models / "escape.gguf", nobody=False)
        assert status == 403 and "outside the folders in [http] model_dirs" in doc["error"]
        status, doc = predict_as(daemon.port, models / "secret.gguf", nobody=True)
        assert status == 403, doc  # the old code judged it: 200
        assert "not readable by the caller (uid 65534)" in doc["error"]
        status, doc = predict_as(daemon.port, models / "public.gguf", nobody=True)
        assert status == 200 and doc["schema"] == "vramscope.predict/1", doc
        status, doc = predict_as(daemon.port, models / "secret.gguf", nobody=False)
        assert status == 200 and doc["schema"] == "vramscope.predict/1", doc


@needs_tools
def test_http_predict_without_model_dirs_says_to_set_them(tmp_path: Path, models: Path) -> None:
    with running(tmp_path) as daemon:
        status, doc = predict_as(daemon.port, models / "public.gguf", nobody=False)
    assert status == 403 and "set [http] model_dirs" in doc["error"], doc


# -- (d) slots: hostile predicts do not make everyone else wait ----------------------------


def post(port: int, model: Path, timeout_s: float = 60.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        body = json.dumps({"command": ["llama-server", "-m", str(model), "-c", "4096"]})
        conn.request("POST", "/api/v1/predict", body, {"Content-Type": "application/json"})
        return conn.getresponse().status
    except TimeoutError:
        return 0  # no answer within the guard
    finally:
        conn.close()


def test_two_hostile_predicts_at_once_leave_the_third_served(tmp_path: Path, models: Path) -> None:
    sparse_string_array(models / "hostile.gguf", 12_000_000_000).chmod(0o644)
    with running(tmp_path, extra_config=f'model_dirs = ["{models}"]\n') as daemon:
        hostile: list[int] = []
        attackers = [
            threading.Thread(
                target=lambda: hostile.append(post(daemon.port, models / "hostile.gguf"))
            )
            for _ in range(2)
        ]
        for t in attackers:
            t.start()
        time.sleep(0.5)  # not a timing assertion: lets both reach the reader first
        third = post(daemon.port, models / "public.gguf")
        for t in attackers:
            t.join(timeout=GUARD_S * 3)
    assert third == 200  # the old code: 503 "busy: 2 predictions are running" for hours
    assert hostile == [400, 400]


def test_a_predict_past_its_deadline_is_abandoned_and_frees_its_slot() -> None:
    runner = DeadlineRunner(slots=2, deadline_s=0.2, max_abandoned=4)
    release = threading.Event()

    def stuck() -> str:
        release.wait(GUARD_S)
        return "late"

    try:
        for _ in range(2):
            with pytest.raises(DeadlineExceeded, match="longer than 0.2 s"):
                runner.run(stuck)
        assert runner.run(lambda: "served") == "served"  # both slots came back
        for _ in range(2):
            with pytest.raises(DeadlineExceeded):
                runner.run(stuck)
        assert runner.abandoned == 4
        with pytest.raises(Busy, match="4 timed-out predictions are still ending"):
            runner.run(lambda: "no")
    finally:
        release.set()
    deadline = time.monotonic() + GUARD_S
    while runner.abandoned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.abandoned == 0  # the abandoned workers ended and were counted out
    assert runner.run(lambda: "served") == "served"


def test_a_worker_error_reaches_the_request() -> None:
    runner = DeadlineRunner(slots=1, deadline_s=5.0, max_abandoned=1)
    with pytest.raises(ValueError, match="bad"):
        runner.run(lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert runner.run(lambda: 7) == 7  # the slot came back after the error


def test_model_dirs_must_be_absolute_folders(tmp_path: Path) -> None:
    from monitor.config import ConfigError, load

    cfg = tmp_path / "c.toml"
    cfg.write_text('[http]\nmodel_dirs = ["models"]\n')
    with pytest.raises(ConfigError, match="model_dirs must list absolute folders"):
        load(cfg, db=tmp_path / "v.db")
    cfg.write_text('[http]\nmodel_dirs = ["/models", "/srv/gguf"]\n')
    assert load(cfg, db=tmp_path / "v.db").http_model_dirs == ("/models", "/srv/gguf")


HOLD = """
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.connect((sys.argv[1], int(sys.argv[2])))
s.recv(1)
"""


@needs_tools
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_peer_uid_names_the_user_on_the_other_end(host: str) -> None:
    from monitor.http.peer import peer_uid

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        port = server.getsockname()[1]
        cmd = [SYSTEM_PYTHON, "-I", "-c", HOLD, host, str(port)]
        for prefix, uid in (
            (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], 65534),
            ([], 0),
        ):
            client = subprocess.Popen([*prefix, *cmd], cwd="/")
            try:
                server.settimeout(GUARD_S)
                conn, addr = server.accept()
                with conn:
                    assert peer_uid(addr[:2], conn.getsockname()[:2]) == uid
                    conn.sendall(b"x")
            finally:
                client.wait(timeout=GUARD_S)
        assert peer_uid((host, 1), (host, port)) is None  # no such connection: unknown


def test_a_remote_caller_reads_only_what_others_may(models: Path) -> None:
    from monitor.http.access import Caller, DeadlinePassed, ModelAccess, ModelAccessError

    remote = ModelAccess((str(models),), Caller(None))
    assert remote.reader(str(models / "public.gguf")).tensors  # 0644 in a 0755 folder
    group_only = write_qwen3(models / "group.gguf")
    group_only.chmod(0o640)
    with pytest.raises(ModelAccessError, match=r"not readable by the caller \(an unknown"):
        remote.reader(str(group_only))
    models.chmod(0o750)  # the folder: not searchable by others
    with pytest.raises(ModelAccessError, match="not readable by the caller"):
        remote.reader(str(models / "public.gguf"))
    models.chmod(0o755)
    late = ModelAccess((str(models),), Caller(0), deadline=time.monotonic() - 1)
    with pytest.raises(DeadlinePassed):  # an abandoned worker opens no further file
        late.reader(str(models / "public.gguf"))
