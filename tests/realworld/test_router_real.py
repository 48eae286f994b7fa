"""The real llama-server in router mode: its children grouped under it (status, TUI).

Starts the llama-server this project builds (``.cache/llama.cpp/0.3.36``, llama.cpp
0c1e57098) as a router over a folder of two tiny GGUFs with ``--models-max 1``, loads
``a`` then ``b`` through ``POST /models/load``, and checks what ``vramscope status --json``
(and the TUI's live frame) says after each: the router row (``--models-max``, how many
loaded), each child under it with its model id (its ``--alias``), and that loading ``b``
left only ``b``'s child (the router unloaded ``a``, tools/server/server-models.cpp
``unload_lru``).

Only the router this test started and its children are looked at (the box may run other
llama-servers). Waits are bounded hang guards, never timing assertions.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import cli_runner
import jsonschema
import pytest
import tiny_models
from router_http import child_of, free_port, http, loaded, predict, wait_for

from monitor.servers.router_models import list_models_dir, models_answer
from tui.source import LiveSource

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())
GIB = 1 << 30


def _status(port_pid: int) -> tuple[dict, dict[int, dict]]:
    """``vramscope status --json``: the document, and the rows of our router and its
    children (a row's ppid is our router)."""
    result = cli_runner.vramscope("status", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    rows = {
        p["pid"]: p for p in doc["processes"] if p["pid"] == port_pid or p.get("ppid") == port_pid
    }
    return doc, rows


@pytest.fixture
def router(llama_server_bin: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, int, Path]]:
    helped = subprocess.run(
        [str(llama_server_bin), "--help"], capture_output=True, text=True, timeout=60
    )
    if "--models-dir" not in helped.stdout + helped.stderr:
        pytest.skip(f"{llama_server_bin} has no router mode (no --models-dir in --help)")
    models = tmp_path / "models"
    models.mkdir()
    tiny_models.write_llama(models / "a.gguf", seed=1, name="a")
    tiny_models.write_llama(models / "b.gguf", seed=2, name="b")
    # what the router lists and what it leaves out (common/preset.cpp load_from_models_dir)
    (models / "c").mkdir()
    for name in ("c/c.gguf", "mmproj-a.gguf", "mtp-a.gguf", "twice.gguf.gguf"):
        (models / name).write_bytes((models / "a.gguf").read_bytes())
    (models / "notes.txt").write_text("not a model")
    port = free_port()
    argv = [str(llama_server_bin), "--models-dir", str(models), "--models-max", "1"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "-c", "512", "-np", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for("the router's /health", lambda: http(port, "/health")[0] == 200, log)
        yield proc, port, log
    finally:
        proc.send_signal(signal.SIGTERM)  # the router stops its children itself
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_the_models_dir_lists_what_the_router_lists(
    router: tuple[subprocess.Popen, int, Path],
) -> None:
    proc, port, log = router
    code, body = http(port, "/models")
    assert code == 200, body
    answered = models_answer(body.encode())
    folder = Path(proc.args[proc.args.index("--models-dir") + 1])  # type: ignore[union-attr]
    listed = list_models_dir(str(folder))
    assert [m.model_id for m in listed] == ["a", "b", "c", "twice"]
    assert sorted(m.model_id for m in answered) == [m.model_id for m in listed]
    for theirs in answered:
        mine = next(m for m in listed if m.model_id == theirs.model_id)
        assert theirs.args[theirs.args.index("--model") + 1] == mine.model_path


def _child_rows(rows: dict[int, dict], router_pid: int) -> dict[str, dict]:
    return {r["router_child"]["model_id"]: r for r in rows.values() if r["pid"] != router_pid}


def _one_child(router_pid: int) -> tuple[dict, dict[int, dict]] | None:
    doc, rows = _status(router_pid)
    return (doc, rows) if len(_child_rows(rows, router_pid)) == 1 else None


def test_router_children_are_grouped_under_their_router(
    router: tuple[subprocess.Popen, int, Path],
) -> None:
    proc, port, log = router
    doc, rows = _status(proc.pid)
    jsonschema.validate(doc, SCHEMA)
    assert rows[proc.pid]["router"]["models_max"] == 1
    assert rows[proc.pid]["router"]["loaded"] == 0
    assert rows[proc.pid]["router"]["port"] == port

    for model, gone in (("a", None), ("b", "a")):
        code, body = http(port, "/models/load", {"model": model})
        assert code == 200, body
        wait_for(f"{model} loaded", lambda m=model: loaded(port) == {m}, log)  # type: ignore[misc]
        # the router unloads `a` (LRU at --models-max 1): its child exits, maybe a moment late
        doc, rows = wait_for(
            f"only {model}'s child under the router", lambda: _one_child(proc.pid), log
        )
        jsonschema.validate(doc, SCHEMA)
        children = _child_rows(rows, proc.pid)
        assert set(children) == {model}
        child = children[model]
        assert child["router_child"] == {
            "router_pid": proc.pid,
            "router_port": port,
            "model_id": model,
        }
        assert child["model_path"].endswith(f"/{model}.gguf")
        assert child["router"] is None
        assert rows[proc.pid]["router"]["children"] == [child["pid"]]
        assert rows[proc.pid]["router"]["loaded"] == 1
        assert rows[proc.pid]["router_child"] is None
        if gone is not None:
            assert gone not in children
        _check_the_tui(proc.pid, model, child["pid"])


def _check_the_tui(router_pid: int, model: str, child_pid: int) -> None:
    """The TUI's live frame: the router's row, then its one child's row under it."""
    source = LiveSource()
    try:
        rows = [r for r in source.latest().models if r.pid in (router_pid, child_pid)]
    finally:
        source.close()
    assert [(r.pid, r.role) for r in rows] == [(router_pid, "router"), (child_pid, "server")]
    assert rows[0].flags == ("1 loaded, max 1",)
    assert rows[1].model.startswith(f"└ {model} · {model}.gguf")


@pytest.fixture
def preset_router(
    llama_server_bin: Path, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen, int, Path, dict[str, str]]]:
    """A router over three tiny models (ids unique to this run: other routers on the box
    never serve them) with a preset file giving each its own -c / -np / -ctk, and
    --models-max 1. The router itself passes no -c/-np: its own options would win over
    every preset (server-models.cpp lines 707-711)."""
    helped = subprocess.run(
        [str(llama_server_bin), "--help"], capture_output=True, text=True, timeout=60
    )
    if "--models-preset" not in helped.stdout + helped.stderr:
        pytest.skip(f"{llama_server_bin} has no --models-preset")
    tag = f"vs{os.getpid()}"
    ids = {k: f"{k}-{tag}" for k in ("a", "b", "c")}
    models = tmp_path / "models"
    models.mkdir()
    for n, (key, model_id) in enumerate(ids.items(), 1):
        tiny_models.write_llama(models / f"{model_id}.gguf", seed=n, name=key)
    preset = tmp_path / "models.ini"
    preset.write_text(
        "[*]\ncache-ram = 0\n"
        f"[{ids['a']}]\nc = 1024\nparallel = 2\n"
        f"[{ids['b']}]\nctx-size = 2048\nLLAMA_ARG_N_PARALLEL = 1\ncache-type-k = q8_0\n"
        f"[{ids['c']}]\nc = 512\n"
    )
    port = free_port()
    argv = [str(llama_server_bin), "--models-dir", str(models), "--models-preset", str(preset)]
    argv += ["--models-max", "1", "--host", "127.0.0.1", "--port", str(port), "-lv", "4"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for("the router's /health", lambda: http(port, "/health")[0] == 200, log)
        yield proc, port, log, ids
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _kv_logged_mib(log: Path, port: int) -> float | None:
    """The child's logged KV size (``llama_kv_cache: ... size = N MiB``): the router
    forwards each child's output to its own, prefixed with the child's port."""
    sizes = [
        float(m.group(1))
        for line in log.read_text(errors="replace").splitlines()
        if f"[{port}]" in line
        and (m := re.search(r"llama_kv_cache: size =\s+([0-9.]+) MiB", line)) is not None
    ]
    return sizes[-1] if sizes else None


def _without_port(argv: list[str]) -> list[str]:
    args = list(argv)
    args[args.index("--port") + 1] = "N"
    return args


def test_predict_names_the_lru_unload_and_the_real_load_confirms_it(
    preset_router: tuple[subprocess.Popen, int, Path, dict[str, str]],
) -> None:
    proc, port, log, ids = preset_router
    a, b = ids["a"], ids["b"]
    code, body = http(port, "/models/load", {"model": a})
    assert code == 200, body
    wait_for(f"{a} loaded", lambda: loaded(port) == {a}, log)
    a_pid = wait_for(f"{a}'s child", lambda: child_of(proc.pid, a), log)

    code, doc, err = predict(b)  # the router on this box that serves b: found by its id
    assert doc, err
    assert doc["would_unload"] == [f"{a} (pid {a_pid})"]
    assert doc["unloaded_by"] == "the router"
    assert any(f"loading {b} first unloads {a}" in n for n in doc["notes"]), doc["notes"]
    launch = doc["launch"]["argv"]
    # the preset's per-model options reach the launch judged
    assert launch[launch.index("--ctx-size") + 1] == "2048"
    assert launch[launch.index("--parallel") + 1] == "1"
    assert launch[launch.index("--cache-type-k") + 1] == "q8_0"
    assert doc["launch"]["n_ctx"] == 2048
    verdict = doc["verdict"]

    code_load, body = http(port, "/models/load", {"model": b})
    b_loaded = code_load == 200 and wait_for(f"{b} loaded", lambda: loaded(port) == {b}, log)
    # the verdict the real load confirms: it fits and loads (this box has the room)
    assert (verdict == "fits") == bool(b_loaded), (verdict, body)
    b_pid = wait_for(f"{b}'s child", lambda: child_of(proc.pid, b), log)
    real = [x.decode() for x in Path(f"/proc/{b_pid}/cmdline").read_bytes().split(b"\0")[:-1]]
    assert _without_port(real[1:]) == _without_port(launch[1:])
    assert child_of(proc.pid, a) is None or wait_for(
        f"{a}'s child gone", lambda: child_of(proc.pid, a) is None, log
    )

    from monitor.estimate import estimate
    from monitor.servers import parse_command

    spec = parse_command(launch)
    assert spec is not None
    est = estimate(spec, [])
    kv_mib = sum(c.bytes for c in est.components if c.name == "kv") / (1 << 20)
    child_port = int(real[real.index("--port") + 1])
    logged = wait_for("b's logged KV size", lambda: _kv_logged_mib(log, child_port), log)
    assert abs(kv_mib - logged) < 0.01, (kv_mib, logged)


def _oom_kills(group: Path) -> int:
    """The cgroup's OOM-kill counter (v1 memory.oom_control, v2 memory.events)."""
    for name in ("memory.oom_control", "memory.events"):
        path = group / name
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


def _failed(port: int, model_id: str) -> bool:
    status, body = http(port, "/models")
    if status != 200:
        return False
    for model in json.loads(body)["data"]:
        if model["id"] == model_id:
            return bool(model["status"].get("failed"))
    return False


def test_predict_oom_for_a_router_child_in_its_routers_cgroup(
    llama_server_bin: Path, tmp_path: Path
) -> None:
    """The router runs in a 2 GiB memory cgroup; its children inherit it. A preset model
    that reads an 8 GB model into anonymous memory (``load-mode = none``): predict says
    OOM against the router's cgroup (and names the LRU child it unloads first); the real
    load is OOM-killed by the kernel in that cgroup. The tiny model (noise): fits."""
    from arch_models import model_for
    from memcg import make_cgroup

    group, procs = make_cgroup(2 * GIB)
    tag = f"vs{os.getpid()}"
    small, big = f"small-{tag}", f"big-{tag}"
    models = tmp_path / "models"
    models.mkdir()
    tiny_models.write_llama(models / f"{small}.gguf", seed=1, name="small")
    big_path = model_for("qwen3-8b").write(tmp_path)
    preset = tmp_path / "models.ini"
    preset.write_text(
        f"[*]\ncache-ram = 0\n[{small}]\nc = 512\n"
        f"[{big}]\nmodel = {big_path}\nc = 4096\nnp = 1\nload-mode = none\n"
    )
    port = free_port()
    argv = [str(llama_server_bin), "--models-dir", str(models), "--models-preset", str(preset)]
    argv += ["--models-max", "1", "--host", "127.0.0.1", "--port", str(port), "-t", "2"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *argv],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
    try:
        wait_for("the router's /health", lambda: http(port, "/health")[0] == 200, log)
        assert http(port, "/models/load", {"model": small})[0] == 200
        wait_for(f"{small} loaded", lambda: loaded(port) == {small}, log)
        small_pid = wait_for(f"{small}'s child", lambda: child_of(proc.pid, small), log)

        code, doc, err = predict(big)
        assert (code, doc.get("verdict")) == (1, "oom"), err or doc
        assert doc["would_unload"] == [f"{small} (pid {small_pid})"]
        assert any("router" in n and "memory cgroup" in n for n in doc["notes"]), doc["notes"]
        code, doc, err = predict(small)  # already loaded, tiny: the noise case
        assert (code, doc.get("verdict")) == (0, "fits"), err or doc

        assert http(port, "/models/load", {"model": big})[0] == 200
        wait_for(f"{big}'s load to fail", lambda: _failed(port, big), log)
        assert _oom_kills(group) >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        time.sleep(0.5)
        group.rmdir()


def test_the_option_table_is_the_real_servers(llama_server_bin: Path) -> None:
    """monitor/servers/router_args.py (generated from common/arg.cpp) lists exactly the
    spellings the real llama-server's --help lists: the router's presets are read and
    rendered with the options this build has."""
    from monitor.servers.router_args import OPTIONS
    from monitor.servers.server_help import parse_help

    helped = subprocess.run(
        [str(llama_server_bin), "--help"], capture_output=True, text=True, timeout=60
    )
    listed = parse_help(helped.stdout)
    mine = {a for args, neg, _, _ in OPTIONS for a in (*args, *neg)}
    assert len(listed) > 300
    assert sorted(listed - mine) == [] and sorted(mine - listed) == []
