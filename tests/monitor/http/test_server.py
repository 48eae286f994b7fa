"""The HTTP API on a real loopback socket: metrics from the latest snapshot, auth, the
snapshot and events endpoints, predictions against the live state, and the limits."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf_models as g
import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from stopping import STOP_GUARD_S

from collectors.base import CollectorRun, DeviceSample, ProcessInfo, ProcessMemory, Snapshot
from monitor.config import Config
from monitor.http import HttpConfigError, HttpServer, is_loopback, parse_listen
from monitor.http.server import MAX_BODY_BYTES
from monitor.report.status import to_json
from monitor.store.database import Store

GIB, MIB = 1024**3, 1024**2
GPU = "nvml:GPU-0123"
APU = "drm:0000:c3:00.0"
PID = 4242
TOKEN = "s3cret-token-0123456789"


def now_ms() -> int:
    return int(time.time() * 1000)


def server_proc(pid: int = PID, model: str = "/models/Qwen3-8B-Q8_0.gguf") -> ProcessInfo:
    return ProcessInfo(
        pid,
        777,
        None,
        1,
        1000,
        "llama-server",
        ("/usr/bin/llama-server", "-m", model, "--api-key", "<redacted>", "-c", "8192"),
        "llama.cpp",
        ("inference", "gpu"),
    )


def snapshot(
    *,
    gpu_total: int = 24 * GIB,
    gpu_used: int = 10 * GIB,
    with_proc: bool = True,
    ts_ms: int | None = None,
    apu: bool = True,
) -> Snapshot:
    devices = (
        DeviceSample(
            GPU,
            "nvml",
            "nvidia",
            "RTX 4090",
            "dedicated",
            gpu_total,
            gpu_used,
            free_bytes=gpu_total - gpu_used,
        ),
        DeviceSample(
            APU,
            "drm",
            "amd",
            "Radeon 8060S",
            "unified",
            96 * GIB,
            30 * GIB,
            gtt_used_bytes=28 * GIB,
        ),
        DeviceSample(
            "host",
            "procfs",
            "host",
            "Host RAM",
            "host",
            128 * GIB,
            40 * GIB,
            available_bytes=88 * GIB,
        ),
    )
    if not apu:
        devices = tuple(d for d in devices if d.device_id != APU)
    procs = (server_proc(),) if with_proc else ()
    memory = (
        (
            ProcessMemory(PID, GPU, vram_bytes=9 * GIB),
            ProcessMemory(PID, "host", rss_anon_bytes=GIB, rss_file_bytes=5 * GIB),
        )
        if with_proc
        else ()
    )
    ts = now_ms() if ts_ms is None else ts_ms
    runs = (
        CollectorRun("nvml", ts, 0.0125, 0.01, "ok"),
        CollectorRun("amdsmi", ts, 0.001, 0.001, "nodata", "no libamd_smi"),
        CollectorRun("drm", ts, 0.5, 0.2, "error", "OSError: boom"),
        CollectorRun("procfs", ts, 0.03, 0.02, "ok"),
    )
    return Snapshot(ts, devices, procs, memory, (), (), runs)


class Box:
    """What the daemon's sampling thread would hand over."""

    def __init__(self) -> None:
        self.snap: Snapshot | None = snapshot()
        self.estimates: dict[int, dict[str, int]] = {PID: {GPU: 9 * GIB + 300 * MIB}}

    def latest(self) -> Snapshot | None:
        return self.snap


@pytest.fixture
def box() -> Box:
    return Box()


def make_server(
    box: Box, tmp_path: Path, listen: str = "127.0.0.1:0", token: str | None = None
) -> HttpServer:
    db = tmp_path / "vramscope.db"
    return HttpServer(
        listen,
        token,
        box.latest,
        db,
        # the test's folders (tmp_path and the module's models folder share a parent)
        Config(db_path=db, interval_s=1.0, http_model_dirs=(str(tmp_path.parent),)),
        estimates=lambda: box.estimates,
    )


@pytest.fixture
def server(box: Box, tmp_path: Path) -> Iterator[HttpServer]:
    srv = make_server(box, tmp_path)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def request(
    srv: HttpServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.address[1], timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get_json(srv: HttpServer, path: str, **kw: Any) -> tuple[int, Any]:
    status, _, body = request(srv, "GET", path, **kw)
    return status, json.loads(body)


def post_json(srv: HttpServer, path: str, doc: Any) -> tuple[int, Any]:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    status, _, raw = request(srv, "POST", path, body, {"Content-Type": "application/json"})
    return status, json.loads(raw)


def scrape(
    srv: HttpServer, headers: dict[str, str] | None = None
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    status, head, body = request(srv, "GET", "/metrics", headers=headers)
    assert status == 200
    assert head["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


# -- metrics ------------------------------------------------------------------------------


def test_metrics_exact_device_process_and_collector_values(server: HttpServer) -> None:
    m = scrape(server)
    gpu = labels(
        device=GPU,
        name="RTX 4090",
        device_type="dedicated",
        gpu="0",
        UUID="GPU-0123",
        modelName="RTX 4090",
    )
    assert m["vramscope_device_memory_total_bytes"][gpu] == 24 * GIB
    assert m["vramscope_device_memory_used_bytes"][gpu] == 10 * GIB
    assert m["vramscope_device_memory_free_bytes"][gpu] == 14 * GIB
    apu = labels(
        device=APU,
        name="Radeon 8060S",
        device_type="unified",
        gpu="",
        UUID="",
        modelName="Radeon 8060S",
    )
    assert m["vramscope_device_memory_gtt_used_bytes"] == {apu: 28 * GIB}
    assert apu not in m["vramscope_device_memory_free_bytes"]  # unknown is absent, not 0
    assert m["vramscope_host_memory_available_bytes"] == {(): 88 * GIB}

    proc = dict(pid=str(PID), comm="llama-server", engine="llama.cpp", model="Qwen3-8B-Q8_0.gguf")
    assert m["vramscope_process_memory_bytes"] == {
        labels(**proc, device=GPU, memory_kind="vram"): 9 * GIB,
        labels(**proc, device="host", memory_kind="rss_anon"): GIB,
        labels(**proc, device="host", memory_kind="rss_file"): 5 * GIB,
    }
    assert m["vramscope_process_estimate_bytes"] == {
        labels(pid=str(PID), model="Qwen3-8B-Q8_0.gguf", device=GPU): 9 * GIB + 300 * MIB
    }

    assert m["vramscope_collector_up"] == {
        labels(collector="nvml"): 1,
        labels(collector="drm"): 0,
        labels(collector="procfs"): 1,
    }  # amdsmi found no hardware: no series
    assert m["vramscope_collector_duration_seconds"][labels(collector="nvml")] == 0.0125
    assert m["vramscope_collector_duration_seconds"][labels(collector="drm")] == 0.5
    ts = server.latest().ts_ms  # type: ignore[union-attr]
    assert m["vramscope_last_tick_timestamp_seconds"][()] == pytest.approx(ts / 1000)


def test_metrics_never_carry_the_command_line(server: HttpServer) -> None:
    _, _, body = request(server, "GET", "/metrics")
    text = body.decode()
    assert "--api-key" not in text and "/models/" not in text and "redacted" not in text


def test_a_process_that_leaves_the_snapshot_vanishes_on_the_next_scrape(
    server: HttpServer, box: Box
) -> None:
    assert scrape(server)["vramscope_process_memory_bytes"]
    box.snap = snapshot(with_proc=False, gpu_used=1 * GIB)  # estimates still name the pid
    m = scrape(server)
    assert m.get("vramscope_process_memory_bytes", {}) == {}
    assert m.get("vramscope_process_estimate_bytes", {}) == {}
    gpu = labels(
        device=GPU,
        name="RTX 4090",
        device_type="dedicated",
        gpu="0",
        UUID="GPU-0123",
        modelName="RTX 4090",
    )
    assert m["vramscope_device_memory_used_bytes"][gpu] == GIB
    box.snap = snapshot()  # it comes back (a new tick): so do its series
    assert len(scrape(server)["vramscope_process_memory_bytes"]) == 3


def test_metrics_before_the_first_tick_are_empty_not_an_error(server: HttpServer, box: Box) -> None:
    box.snap = None
    m = scrape(server)  # only what the daemon knows of itself: its build and process_*
    assert {n for n in m if n.startswith("vramscope_")} == {"vramscope_build_info"}
    assert m["process_resident_memory_bytes"][()] > 0


def test_nothing_is_registered_globally(server: HttpServer) -> None:
    scrape(server)
    assert b"vramscope_" not in generate_latest(REGISTRY)


# -- health -------------------------------------------------------------------------------


def test_healthz_reports_the_age_and_503_before_the_first_tick_or_when_stale(
    server: HttpServer, box: Box
) -> None:
    status, _, body = request(server, "GET", "/healthz")
    assert status == 200 and body.startswith(b"ok: last tick ")
    box.snap = None
    assert request(server, "GET", "/healthz")[0] == 503
    box.snap = snapshot(ts_ms=now_ms() - 120_000)
    status, _, body = request(server, "GET", "/healthz")
    assert status == 503 and body.startswith(b"stale")


# -- auth and binding ---------------------------------------------------------------------


def test_a_token_is_needed_on_every_endpoint_when_configured(box: Box, tmp_path: Path) -> None:
    srv = make_server(box, tmp_path, token=TOKEN)
    srv.start()
    try:
        for path in ("/healthz", "/metrics", "/api/v1/snapshot", "/api/v1/events", "/nope"):
            status, head, body = request(srv, "GET", path)
            assert status == 401, path
            assert head["www-authenticate"].startswith("Bearer")
            assert "error" in json.loads(body)
        assert request(srv, "GET", "/healthz", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert request(srv, "GET", "/healthz", headers={"Authorization": TOKEN})[0] == 401
        ok = {"Authorization": f"Bearer {TOKEN}"}
        assert request(srv, "GET", "/healthz", headers=ok)[0] == 200
        assert scrape(srv, ok)["vramscope_device_memory_total_bytes"]
        assert (
            request(srv, "POST", "/api/v1/predict", b"{}", {"Content-Type": "application/json"})[0]
            == 401
        )
    finally:
        srv.stop()


def test_binding_off_loopback_without_a_token_is_refused(box: Box, tmp_path: Path) -> None:
    with pytest.raises(HttpConfigError, match=r"binding 0\.0\.0\.0:0 needs \[http\] token"):
        make_server(box, tmp_path, listen="0.0.0.0:0")
    with pytest.raises(HttpConfigError, match="needs"):
        make_server(box, tmp_path, listen=":9835")
    with pytest.raises(HttpConfigError, match="empty"):
        make_server(box, tmp_path, listen="0.0.0.0:0", token="  ")


def test_off_loopback_with_a_token_serves_and_still_needs_it(box: Box, tmp_path: Path) -> None:
    srv = make_server(box, tmp_path, listen="0.0.0.0:0", token=TOKEN)
    srv.start()
    try:
        assert srv.address[0] == "0.0.0.0" and srv.address[1] > 0
        assert request(srv, "GET", "/healthz")[0] == 401
        status, _, body = request(
            srv, "GET", "/healthz", headers={"Authorization": f"bearer {TOKEN}"}
        )
        assert status == 200 and body.startswith(b"ok")
    finally:
        srv.stop()


def test_without_a_token_a_dns_name_in_host_is_refused(server: HttpServer) -> None:
    assert request(server, "GET", "/healthz", headers={"Host": "evil.example:9835"})[0] == 403
    assert request(server, "GET", "/healthz", headers={"Host": "localhost:9835"})[0] == 200
    assert request(server, "GET", "/healthz", headers={"Host": "127.0.0.1"})[0] == 200


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9835", ("127.0.0.1", 9835)),
        ("[::1]:9835", ("::1", 9835)),
        (":9835", ("0.0.0.0", 9835)),
        ("localhost:0", ("127.0.0.1", 0)),
        (" 10.0.0.5:80 ", ("10.0.0.5", 80)),
    ],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "9835",
        "127.0.0.1",
        "::1:9835",
        "[::1]9835",
        "127.0.0.1:99999",
        "127.0.0.1:x",
        "box.lan:9835",
    ],
)
def test_parse_listen_rejects(text: str) -> None:
    with pytest.raises(HttpConfigError):
        parse_listen(text)


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1")
    assert is_loopback("localhost") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::")
    assert not is_loopback("192.168.1.10") and not is_loopback("box.lan")


def test_a_port_in_use_is_a_config_error(server: HttpServer, box: Box, tmp_path: Path) -> None:
    other = make_server(box, tmp_path, listen=f"127.0.0.1:{server.address[1]}")
    with pytest.raises(HttpConfigError, match="cannot listen"):
        other.start()


def test_stop_frees_the_port_and_is_idempotent(box: Box, tmp_path: Path) -> None:
    srv = make_server(box, tmp_path)
    srv.start()
    port = srv.address[1]
    srv.stop()
    srv.stop()
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/healthz")


# -- snapshot and events ------------------------------------------------------------------


def test_snapshot_is_the_status_json_of_the_latest_tick(server: HttpServer, box: Box) -> None:
    status, doc = get_json(server, "/api/v1/snapshot")
    assert status == 200
    assert doc == json.loads(json.dumps(to_json(box.snap)))  # type: ignore[arg-type]
    assert doc["schema"] == "vramscope.status/1"
    box.snap = snapshot(with_proc=False)
    assert get_json(server, "/api/v1/snapshot")[1]["processes"] == []
    box.snap = None
    status, doc = get_json(server, "/api/v1/snapshot")
    assert status == 503 and "no snapshot" in doc["error"]


def test_events_come_from_the_database(server: HttpServer) -> None:
    status, doc = get_json(server, "/api/v1/events")
    assert status == 503 and "no database" in doc["error"]
    store = Store.open(server.db_path)
    try:
        t0 = now_ms() - 60_000
        store.add_event(
            "oom_kill", "critical", "llama-server[4242]", "killed", {"pid": 4242}, ts_ms=t0
        )
        store.add_event("xid", "warning", GPU, "Xid 79", ts_ms=t0 + 1000)
        store.add_event("process_exit", "info", "python[9]", "exited", ts_ms=t0 + 2000)
    finally:
        store.close()
    status, doc = get_json(server, "/api/v1/events")
    assert status == 200
    assert [e["kind"] for e in doc["events"]] == ["oom_kill", "xid", "process_exit"]
    assert doc["events"][0]["data"] == {"pid": 4242} and doc["truncated"] is False
    _, doc = get_json(server, f"/api/v1/events?since_ms={t0 + 1}&kind=xid,oom_kill")
    assert [e["message"] for e in doc["events"]] == ["Xid 79"]
    _, doc = get_json(server, f"/api/v1/events?since_ms={t0}&kind=oom_kill&kind=process_exit")
    assert [e["kind"] for e in doc["events"]] == ["oom_kill", "process_exit"]
    _, doc = get_json(server, f"/api/v1/events?since_ms={t0}&limit=2")
    assert len(doc["events"]) == 2 and doc["truncated"] is True
    _, doc = get_json(server, f"/api/v1/events?since_ms={t0 + 3000}")
    assert doc["events"] == []
    for bad in ("since_ms=yesterday", "limit=0", "since_ms=-5", "nope=1"):
        status, doc = get_json(server, f"/api/v1/events?{bad}")
        assert status == 400 and doc["error"], bad


# -- predict ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    metadata, tensors = g.qwen3_8b()
    path = tmp_path_factory.mktemp("models") / "Qwen3-8B-Q8_0.gguf"
    return str(g.write_model(path, "qwen3", metadata, tensors, vocab_size=151936)[0])


def test_predict_judges_against_the_latest_snapshot(
    server: HttpServer, box: Box, model_file: str
) -> None:
    command = ["llama-server", "-m", model_file, "-c", "4096", "-ngl", "99"]
    box.snap = snapshot(gpu_used=0, with_proc=False, apu=False)
    status, doc = post_json(server, "/api/v1/predict", {"command": command})
    assert status == 200
    assert doc["schema"] == "vramscope.predict/1"
    assert doc["verdict"] == "fits"
    assert doc["model_path"] == model_file
    by_device = {d["device_id"]: d for d in doc["devices"]}
    assert by_device[GPU]["verdict"] == "fits" and by_device[GPU]["need_bytes"] > 8 * GIB
    box.snap = snapshot(gpu_total=8 * GIB, gpu_used=2 * GIB, with_proc=False, apu=False)
    status, doc = post_json(server, "/api/v1/predict", {"command": command})
    assert status == 200 and doc["verdict"] == "oom"  # the verdict is in the body


def one_line_error(status: int, doc: Any, expected: int) -> str:
    assert status == expected
    assert set(doc) == {"error"} and "\n" not in doc["error"]
    return doc["error"]


def test_predict_bad_input_is_a_400_with_one_line(server: HttpServer, tmp_path: Path) -> None:
    assert "not JSON" in one_line_error(*post_json(server, "/api/v1/predict", b"{nope"), 400)
    assert "command" in one_line_error(*post_json(server, "/api/v1/predict", {}), 400)
    one_line_error(*post_json(server, "/api/v1/predict", {"command": "llama-server -m x"}), 400)
    one_line_error(*post_json(server, "/api/v1/predict", [1, 2]), 400)
    one_line_error(
        *post_json(
            server, "/api/v1/predict", {"command": ["llama-server"], "state": "/etc/passwd"}
        ),
        400,
    )
    assert "not an inference server" in one_line_error(
        *post_json(server, "/api/v1/predict", {"command": ["ls", "-l"]}), 400
    )
    # Missing, a folder, unreadable, not GGUF: one answer, so no path's existence leaks.
    secret = tmp_path / "secret.gguf"
    secret.write_bytes(b"not a model at all")
    answers = set()
    for path in (tmp_path / "absent.gguf", tmp_path, secret):
        error = one_line_error(
            *post_json(server, "/api/v1/predict", {"command": ["llama-server", "-m", str(path)]}),
            400,
        )
        answers.add(error.replace(str(path), "PATH"))
    assert answers == {"PATH: not a readable GGUF model file"}
    # outside [http] model_dirs: refused by its resolved path alone, before any open
    outside = post_json(
        server, "/api/v1/predict", {"command": ["llama-server", "-m", "/proc/1/mem"]}
    )
    assert "outside the folders in [http] model_dirs" in one_line_error(*outside, 403)


def test_predict_never_quotes_the_bytes_of_a_non_gguf_file(
    server: HttpServer, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.gguf"
    secret.write_bytes(b"root:x:0:0:" * 20)
    error = one_line_error(
        *post_json(server, "/api/v1/predict", {"command": ["llama-server", "-m", str(secret)]}), 400
    )
    assert "root:x" not in error and "magic" not in error
    assert error.endswith("secret.gguf: not a readable GGUF model file")


def test_predict_limits(server: HttpServer, box: Box) -> None:
    big = json.dumps({"command": ["llama-server", "-m", "x" * (MAX_BODY_BYTES + 10)]})
    status, _, body = request(
        server, "POST", "/api/v1/predict", big.encode(), {"Content-Type": "application/json"}
    )
    assert status == 413 and "at most" in json.loads(body)["error"]
    status, _, body = request(
        server, "POST", "/api/v1/predict", b'{"command": ["a"]}', {"Content-Type": "text/plain"}
    )
    assert status == 415
    status, head, body = request(server, "GET", "/api/v1/predict")
    assert status == 405 and head["allow"] == "POST"
    box.snap = None
    status, doc = post_json(server, "/api/v1/predict", {"command": ["llama-server"]})
    assert status == 503 and "no snapshot" in doc["error"]


def test_unknown_paths_and_methods_answer_json(server: HttpServer) -> None:
    for path in ("/", "/api/v1/../../etc/passwd", "/metrics/", "/api/v1/snapshot/x"):
        status, _, body = request(server, "GET", path)
        assert status == 404, path
        assert "error" in json.loads(body)
    status, _, body = request(server, "DELETE", "/api/v1/snapshot")
    assert status == 501 and "error" in json.loads(body)
    assert request(server, "POST", "/metrics", b"", {"Content-Type": "application/json"})[0] == 405


def test_the_daemon_serves_metrics_and_refuses_open_binds_without_token(tmp_path) -> None:  # noqa: ANN001
    """End to end: `vramscope daemon` with [http] on a free loopback port."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    root = Path(__file__).resolve().parents[3]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\ntoken = "s3cret-token"\n')
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "monitor",
            "daemon",
            "--db",
            str(tmp_path / "v.db"),
            "--interval",
            "0.2",
            "--config",
            str(cfg),
        ],
        cwd=root,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Bearer s3cret-token"}
        )
        body = None
        for _ in range(100):
            try:
                body = opener.open(req, timeout=2).read().decode()
                if "vramscope_host_memory_available_bytes" in body:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert body is not None
        names = {f.name for f in text_string_to_metric_families(body)}
        assert "vramscope_host_memory_available_bytes" in names
        try:
            opener.open(f"http://127.0.0.1:{port}/metrics", timeout=2)
            raise AssertionError("no token: expected 401")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=STOP_GUARD_S)
    open_cfg = tmp_path / "open.toml"
    open_cfg.write_text('[http]\nlisten = "0.0.0.0:0"\n')
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "daemon",
            "--db",
            str(tmp_path / "w.db"),
            "--config",
            str(open_cfg),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ},
    )
    assert refused.returncode == 2 and "needs [http] token" in refused.stderr
    assert not (tmp_path / "w.db").exists()
