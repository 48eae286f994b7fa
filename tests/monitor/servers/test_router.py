"""llama-server router mode: the router and its children recognised, linked and shown.

The process trees are rebuilt from a real run (tests/fixtures/llamacpp_router/README.md):
the router's argv as started, each child's argv as the router rendered it (its ``GET
/models`` ``status.args``), the pids as they were.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from collectors.base import ProcessInfo, ProcessMemory, Snapshot
from monitor.estimate import EstimateError, estimate
from monitor.report.status import render_text, to_json
from monitor.servers import parse_command, recognise
from monitor.servers.environ import filter_env
from monitor.servers.router import DEFAULT_MODELS_MAX, link_routers

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "llamacpp_router"
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())
BIN = "/work/main/.cache/llama.cpp/0.3.36/bin/llama-server"
ROUTER_ARGV = (
    BIN,
    "--models-dir",
    "/tmp/rt/m",
    "--models-max",
    "1",
    "--host",
    "127.0.0.1",
    "--port",
    "18431",
    "-c",
    "512",
    "-np",
    "1",
)
ROUTER_PID, CHILD_A, CHILD_B = 27596, 27615, 27692


def _child_argv(recording: str, model: str) -> tuple[str, ...]:
    doc = json.loads((FIXTURES / recording).read_text())
    return tuple(next(m for m in doc["data"] if m["id"] == model)["status"]["args"])


def _proc(pid: int, ppid: int, argv: tuple[str, ...]) -> ProcessInfo:
    return ProcessInfo(pid, pid * 10, None, ppid, 1000, "llama-server", argv, "llama.cpp")


def _tree() -> dict[int, ProcessInfo]:
    """The router with `a` loaded, plus an unrelated llama-server of another user's."""
    other = (BIN, "-m", "/srv/x.gguf", "--port", "8081")
    return {
        ROUTER_PID: _proc(ROUTER_PID, 1, ROUTER_ARGV),
        CHILD_A: _proc(CHILD_A, ROUTER_PID, _child_argv("models_loaded_a.json", "a")),
        4242: _proc(4242, 1, other),
    }


def test_the_router_is_a_router_and_its_options_are_read() -> None:
    spec = parse_command(list(ROUTER_ARGV))
    assert spec is not None
    assert (spec.role, spec.model_path, spec.models_dir, spec.models_max) == (
        "router",
        None,
        "/tmp/rt/m",
        1,
    )
    assert not any("models" in u for u in spec.unknown)


@pytest.mark.parametrize(
    ("argv", "env", "role"),
    [
        ([BIN, "--models-preset", "/p.ini"], {}, "router"),
        ([BIN, "--port", "9000"], {"LLAMA_ARG_MODELS_DIR": "/m"}, "router"),
        ([BIN, "--no-models-autoload"], {"LLAMA_ARG_MODELS_PRESET": "/p.ini"}, "router"),
        ([BIN, "--models-dir", "/m", "-m", "/x.gguf"], {}, "server"),  # a model: no router
        ([BIN, "--models-dir", "/m"], {"LLAMA_ARG_MODEL": "/x.gguf"}, "server"),
        ([BIN, "--models-dir", "/m", "-hf", "org/repo"], {}, "server"),
        ([BIN, "--port", "9000"], {}, "server"),  # no router options: left as it was
    ],
)
def test_router_role_follows_server_cpp(argv: list[str], env: dict[str, str], role: str) -> None:
    spec = parse_command(argv, env)
    assert spec is not None and spec.role == role


def test_models_max_and_autoload_from_the_environment() -> None:
    spec = parse_command(
        [BIN, "--models-dir", "/m"],
        {"LLAMA_ARG_MODELS_MAX": "0", "LLAMA_ARG_MODELS_AUTOLOAD": "off"},
    )
    assert spec is not None
    assert (spec.models_max, spec.models_autoload) == (0, False)
    assert "models_max" in spec.from_env


def test_recognise_links_the_child_to_its_router_and_leaves_others_alone() -> None:
    found = recognise(_tree())
    assert found[ROUTER_PID].role == "router" and found[ROUTER_PID].router is None
    child = found[CHILD_A]
    assert (child.role, child.owner_pid) == ("server", CHILD_A)  # estimated as itself
    assert child.router is not None
    assert (child.router.router_pid, child.router.router_port, child.router.model_id) == (
        ROUTER_PID,
        18431,
        "a",
    )
    assert child.spec is not None and child.spec.model_path == "/tmp/rt/m/a.gguf"
    assert found[4242].router is None


def test_a_child_whose_router_is_out_of_sight_is_known_by_its_environment() -> None:
    tree = _tree()
    del tree[ROUTER_PID]
    envs = {CHILD_A: {"LLAMA_SERVER_ROUTER_PORT": "18431"}, 4242: {}}
    found = recognise(tree, lambda pid: envs.get(pid, {}))
    assert found[CHILD_A].router is not None
    assert (found[CHILD_A].router.router_pid, found[CHILD_A].router.router_port) == (None, 18431)
    assert found[4242].router is None


@pytest.mark.parametrize("value", ["abc", "99999", "0", "-1", "1" * 40, "８０８０"])
def test_a_bad_router_port_in_the_environment_links_nothing(value: str) -> None:
    tree = _tree()
    del tree[ROUTER_PID]
    found = recognise(tree, lambda pid: {"LLAMA_SERVER_ROUTER_PORT": value})
    assert found[CHILD_A].router is None


def test_the_router_port_is_kept_from_environ_and_secrets_are_not() -> None:
    """The allow-list keeps the router's port and where llama.cpp's model cache is (HOME:
    monitor/servers/hf_cache.py), never a secret."""
    raw = b"LLAMA_SERVER_ROUTER_PORT=18431\0LLAMA_API_KEY=s3cret\0HOME=/root\0TOKEN=x\0"
    assert filter_env(raw) == {"LLAMA_SERVER_ROUTER_PORT": "18431", "HOME": "/root"}


def test_router_defaults_when_its_options_are_not_given() -> None:
    specs = {1: parse_command([BIN, "--models-preset", "/p.ini"])}
    routers, children = link_routers(specs, {1: None})
    assert (routers[1].port, routers[1].models_max, routers[1].children) == (
        8080,
        DEFAULT_MODELS_MAX,
        (),
    )
    assert children == {}


def test_a_router_is_not_estimated_as_a_model_server() -> None:
    spec = parse_command(list(ROUTER_ARGV))
    assert spec is not None
    with pytest.raises(EstimateError, match="router"):
        estimate(spec, [])


def _snapshot(processes: dict[int, ProcessInfo]) -> Snapshot:
    memory = tuple(
        ProcessMemory(pid, "host", rss_anon_bytes=rss, rss_file_bytes=0)
        for pid, rss in (
            (ROUTER_PID, 1 << 20),
            (CHILD_A, 1 << 20),
            (CHILD_B, 8 << 20),
            (4242, 64 << 20),
        )
        if pid in processes
    )
    return Snapshot(1000, (), tuple(processes.values()), memory, (), (), ())


def test_status_json_puts_each_child_under_its_router() -> None:
    tree = _tree()
    tree[CHILD_B] = _proc(CHILD_B, ROUTER_PID, _child_argv("models_loaded_b.json", "b"))
    doc = to_json(_snapshot(tree))
    jsonschema.validate(doc, SCHEMA)
    rows = {p["pid"]: p for p in doc["processes"]}
    assert rows[ROUTER_PID]["router"] == {
        "port": 18431,
        "models_dir": "/tmp/rt/m",
        "models_preset": None,
        "models_max": 1,
        "children": [CHILD_A, CHILD_B],
        "loaded": 2,
    }
    assert rows[CHILD_B]["router_child"] == {
        "router_pid": ROUTER_PID,
        "router_port": 18431,
        "model_id": "b",
    }
    assert rows[4242]["router"] is None and rows[4242]["router_child"] is None


def test_status_text_shows_the_router_and_its_children_right_under_it() -> None:
    tree = _tree()
    tree[CHILD_B] = _proc(CHILD_B, ROUTER_PID, _child_argv("models_loaded_b.json", "b"))
    lines = render_text(_snapshot(tree)).splitlines()
    pids = [int(line.split()[0]) for line in lines if line.split() and line.split()[0].isdigit()]
    # the unrelated server is the biggest and comes first; the router's children follow it,
    # the bigger first (both loaded: the moment between `b`'s spawn and `a`'s exit)
    assert pids == [4242, ROUTER_PID, CHILD_B, CHILD_A]
    text = "\n".join(lines)
    assert "router :18431 models-dir /tmp/rt/m, max 1, 2 loaded" in text
    assert f"└ model b: b.gguf -c 512x1 :33417 (router {ROUTER_PID})" in text
    assert f"└ model a: a.gguf -c 512x1 :45805 (router {ROUTER_PID})" in text
