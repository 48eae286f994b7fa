"""llama-swap config reader, eviction prediction, /running and /api/events parsing.

Fixtures (tests/fixtures/llamaswap/*.yaml) each cite the llama-swap source they follow.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.errors import ServiceError, UsageError
from monitor.integrations.llamaswap.client import fetch_running, parse_event_frame
from monitor.integrations.llamaswap.config import load_config, resolve
from monitor.integrations.llamaswap.evictions import evictions
from monitor.integrations.llamaswap.schema import DEFAULT_GROUP_ID, SwapConfigError

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "llamaswap"


def fixture(name: str):
    return load_config(FIXTURES / name)


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(SwapConfigError) as info:
        load_config(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "config.yaml"))
    return message


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/tester")


# --------------------------------------------------------------------------- loading


def test_default_router_three_models() -> None:
    config = fixture("default.yaml")
    assert config.router == "default"
    assert config.matrix is None
    assert list(config.models) == ["qwen-32b", "llama-8b", "gemma-27b"]  # file order
    # one implicit group holding everything: one model at a time
    (group,) = config.groups
    assert group.name == DEFAULT_GROUP_ID
    assert (group.swap, group.exclusive, group.persistent) == (True, True, False)
    assert group.members == ("gemma-27b", "llama-8b", "qwen-32b")
    # ports: sorted model IDs from startPort 10001
    assert config.models["gemma-27b"].cmd == (
        "llama-server",
        "--port",
        "10001",
        "-m",
        "/models/gemma 3/gemma-3-27b.gguf",
        "-ctk",
        "q8_0",
    )
    assert config.models["llama-8b"].cmd[:3] == ("llama-server", "--port", "10002")
    assert config.models["llama-8b"].cmd[-4:] == ("-c", "8192", "-np", "2")
    assert config.models["qwen-32b"].cmd[2] == "10003"
    assert config.models["gemma-27b"].env == ("CUDA_VISIBLE_DEVICES=0",)
    # ttl: -1 (unset) -> globalTTL, 0 -> never (None)
    assert config.models["qwen-32b"].ttl == 300
    assert config.models["llama-8b"].ttl is None
    assert config.models["gemma-27b"].ttl == 60


def test_resolve_by_id_and_alias() -> None:
    config = fixture("default.yaml")
    assert resolve(config, "qwen-32b").model_id == "qwen-32b"
    assert resolve(config, "gpt-4o").model_id == "qwen-32b"
    assert resolve(config, "qwen").aliases == ("gpt-4o", "qwen")
    with pytest.raises(SwapConfigError) as info:
        resolve(config, "gpt-5")
    assert str(info.value) == "unknown model 'gpt-5' (known: gemma-27b, llama-8b, qwen-32b)"


def test_macros_port_numbering_nesting_env_and_override() -> None:
    config = fixture("macros.yaml")
    server = "/opt/llama.cpp/build/bin/llama-server"
    # alpha < beta < gamma; beta has no ${PORT} so gets no port: alpha 9100, gamma 9101
    assert config.models["alpha"].cmd == (
        server,
        "--port",
        "9100",
        "-c",
        "32768",  # model-level ctx overrides the global 8192
        "--alias",
        "alpha",  # ${MODEL_ID}
        "-m",
        "/home/tester/models/alpha.gguf",  # ${env.HOME}
    )
    assert config.models["gamma"].cmd == (
        server,
        "--port",
        "9101",
        "-c",
        "8192",
        "--alias",
        "gamma",
        "-m",
        "/home/tester/models/gamma.gguf",
        "--temp",
        "0.7",
    )
    assert config.models["beta"].cmd[:3] == ("docker", "run", "--rm")


def test_cmd_block_with_comment_lines() -> None:
    config = fixture("cmd-comments.yaml")
    assert config.models["qwen-coder"].cmd == (
        "llama-server",
        "--port",
        "5800",
        "-m",
        "/models/qwen2.5-coder-32b-q4_k_m.gguf",
        "-c",
        "32768",
        "-np",
        "2",
        "--draft-model",
        "/models/qwen2.5-coder-0.5b.gguf",
        "--chat-template-kwargs",
        '{"enable_thinking": false}',
    )


def test_groups_fixture_shape() -> None:
    config = fixture("groups.yaml")
    assert config.router == "groups"
    by_name = {g.name: g for g in config.groups}
    assert list(by_name) == ["big", "forever", "small", DEFAULT_GROUP_ID]
    assert by_name["big"].members == ("llama-70b", "qwen-72b")
    assert (by_name["forever"].persistent, by_name["forever"].exclusive) == (True, False)
    assert (by_name["small"].swap, by_name["small"].exclusive) == (False, False)
    assert by_name[DEFAULT_GROUP_ID].members == ("whisper",)


def test_unknown_keys_are_ignored_like_llama_swap(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "logLevel: debug\nfutureThing: {a: [1, 2]}\n"
            "models:\n  m:\n    cmd: srv --port ${PORT}\n    unlisted: true\n"
            "    capabilities: {context: 4096}\n    newField: x\n",
        )
    )
    assert config.models["m"].cmd == ("srv", "--port", "5800")


def test_yaml_anchors_and_merge_keys(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "x-common: &common\n  env: [A=1]\n  ttl: 30\n"
            "models:\n  m:\n    <<: *common\n    ttl: 5\n    cmd: srv --port ${PORT}\n",
        )
    )
    assert config.models["m"].env == ("A=1",)
    assert config.models["m"].ttl == 5


def test_env_macro_inside_yaml_comment_is_ignored(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "# ${env.VRAMSCOPE_SURELY_UNSET}\nmodels:\n  m:\n    cmd: srv --port ${PORT}\n",
        )
    )
    assert config.models["m"].cmd[0] == "srv"


def test_float_and_bool_macros_render_like_go(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "macros:\n  a: 1000000.0\n  b: 0.00001\n  c: true\n  d: 123456.0\n  e: 0x10\n"
            "models:\n  m:\n    cmd: srv --port ${PORT} ${a} ${b} ${c} ${d} ${e}\n",
        )
    )
    assert config.models["m"].cmd[3:] == ("1e+06", "1e-05", "true", "123456", "16")


def test_set_params_by_id_keys_become_aliases(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "models:\n  m:\n    cmd: srv --port ${PORT}\n    filters:\n      setParamsByID:\n"
            "        m: {temperature: 0.5}\n        m-think: {enable_thinking: true}\n",
        )
    )
    assert config.models["m"].aliases == ("m-think",)
    assert resolve(config, "m-think").model_id == "m"


# --------------------------------------------------------------------------- errors


ONE = "models:\n  m:\n    cmd: srv --port ${PORT}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("models:\n  m: [unclosed\n", ":3: invalid YAML"),
        ("models:\n  m:\n    cmd: x\n  m:\n    cmd: y\n", ":4: models: mapping key 'm' already"),
        ("models:\n  m:\n    ttl: 60\n", ":2: model 'm' has no cmd"),
        ("models:\n  m:\n    cmd: |\n      # only a comment\n", "model 'm' has no cmd"),
        ("models:\n  m:\n    cmd: [srv, -m, x]\n", ":3: models.m.cmd: expected a string"),
        (ONE + "    ttl: soon\n", ":4: models.m.ttl: expected an integer"),
        (ONE + "    aliases: m2\n", ":4: models.m.aliases: expected a list"),
        (ONE + "    env: {A: 1}\n", ":4: models.m.env: expected a list"),
        ("models: [a, b]\n", ":1: models: expected a mapping"),
        ("startPort: high\nmodels:\n  m:\n    cmd: srv\n", ":1: startPort: expected an integer"),
        ("models:\n  m:\n    cmd: srv -c ${ctx}\n    proxy: http://x\n",
         "unknown macro '${ctx}' found in m.cmd"),
        ("models:\n  m:\n    cmd: srv\n", "proxy uses ${PORT} but cmd does not"),
        ("models:\n  m:\n    cmd: srv --port ${PORT} 'unclosed\n", "cannot split cmd"),
        ("macros:\n  PORT: 1\nmodels:\n  m:\n    cmd: srv\n", ":2: macro name 'PORT' is reserved"),
        ("macros:\n  a: x ${a}\n" + ONE, "macro 'a' contains self-reference"),
        ("macros:\n  a: [1]\nmodels:\n  m:\n    cmd: srv\n", "macro 'a' must be a scalar"),
        ("models:\n  m:\n    cmd: srv --port ${PORT} ${env.VRAMSCOPE_SURELY_UNSET}\n",
         "environment variable 'VRAMSCOPE_SURELY_UNSET' is not set"),
        ("models:\n  a:\n    cmd: s ${PORT}\n    aliases: [x]\n  b:\n    cmd: s ${PORT}\n"
         "    aliases: [x]\n", "duplicate alias x"),
        ("models: {}\n", "no models defined"),
    ],
)  # fmt: skip
def test_config_errors_are_one_line_with_file_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert expected in load_error(tmp_path, text)


def test_nested_macro_must_be_defined_before_its_user(tmp_path: Path) -> None:
    # substitution runs last-to-first: 'a' (first) cannot use 'b' (defined after it)
    message = load_error(
        tmp_path,
        "macros:\n  a: run ${b}\n  b: srv\nmodels:\n  m:\n    cmd: ${a} --port ${PORT}\n",
    )
    assert "unknown macro '${b}' found in m.cmd" in message


GROUP_MODELS = "models:\n  a:\n    cmd: s ${PORT}\n  b:\n    cmd: s ${PORT}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GROUP_MODELS + "groups:\n  g:\n    swap: maybe\n    members: [a]\n",
         "groups.g.swap: expected true or false"),
        (GROUP_MODELS + "groups:\n  g:\n    members: [a, a]\n", "duplicate model member a"),
        (GROUP_MODELS + "groups:\n  g:\n    members: [a]\n  h:\n    members: [a]\n",
         "model member a is used in multiple groups: g and h"),
        (GROUP_MODELS + "groups:\n  g:\n    members: [zzz]\n", "member 'zzz' is not a model ID"),
        (GROUP_MODELS + "groups:\n  g:\n    members: [a]\n"
         "routing:\n  router:\n    use: group\n", "both the legacy top-level"),
        (GROUP_MODELS + "routing:\n  router:\n    use: lru\n", "unknown router 'lru'"),
        (GROUP_MODELS + "routing:\n  router:\n    use: matrix\n", "settings.matrix is not set"),
        (GROUP_MODELS + "groups:\n  g:\n    members: [a]\nmatrix:\n  sets:\n    s: a\n",
         "cannot use both 'groups' and 'matrix'"),
        (GROUP_MODELS + "groups:\n  (default):\n    members: [a]\n", "is reserved"),
        (GROUP_MODELS + "matrix:\n  sets:\n    s: a & zz\n", "unknown var or model 'zz'"),
        (GROUP_MODELS + "matrix:\n  sets:\n    s: a & (b\n", "missing closing parenthesis"),
        (GROUP_MODELS + "matrix:\n  sets:\n    s: a & +t\n", "references undefined set 't'"),
        (GROUP_MODELS + "matrix:\n  sets:\n    s: a & +t\n    t: b | +s\n", "circular reference"),
        (GROUP_MODELS + "matrix:\n  sets: {}\n", "at least one set"),
        (GROUP_MODELS + "matrix:\n  evict_costs: {a: 0}\n  sets:\n    s: a\n", "positive integer"),
        (GROUP_MODELS + "matrix:\n  vars: {x: nope}\n  sets:\n    s: a\n", "unknown model 'nope'"),
        (GROUP_MODELS + "matrix:\n  max_models: 2\n  sets:\n    s: a\n",
         "matrix feature 'max_models' not supported"),
    ],
)  # fmt: skip
def test_routing_errors(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in load_error(tmp_path, text)


# --------------------------------------------------------------------------- evictions


def test_default_router_unloads_every_other_model() -> None:
    config = fixture("default.yaml")
    assert evictions(config, [], "qwen-32b") == ()
    assert evictions(config, ["llama-8b", "gemma-27b"], "gpt-4o") == ("gemma-27b", "llama-8b")
    assert evictions(config, ["qwen-32b", "llama-8b"], "qwen") == ("llama-8b",)
    assert evictions(config, ["qwen"], "qwen-32b") == ()


@pytest.mark.parametrize(
    ("running", "target", "expected"),
    [
        # project issue story: a model in an exclusive group counts the evictions...
        (["qwen-72b", "nomic-embed", "qwen-3b"], "llama-70b", ("qwen-3b", "qwen-72b")),
        # ...and one in a persistent group does not evict it (nor is it evicted)
        (["llama-70b", "qwen-3b"], "nomic-embed", ()),
        (["llama-70b", "nomic-embed", "phi-mini", "whisper"], "big-qwen",
         ("llama-70b", "phi-mini", "whisper")),
        # non-exclusive target group: other groups stay, even the exclusive one
        (["llama-70b", "nomic-embed"], "qwen-3b", ()),
        # swap=false: members of the same group coexist
        (["qwen-3b", "llama-70b"], "phi-mini", ()),
        # ungrouped model: "(default)" group, swap and exclusive
        (["llama-70b", "qwen-3b", "nomic-embed"], "whisper", ("llama-70b", "qwen-3b")),
        (["whisper", "nomic-embed"], "llama-70b", ("whisper",)),
        # target already running: nothing happens to it
        (["llama-70b", "nomic-embed"], "llama-70b", ()),
        ([], "llama-70b", ()),
    ],
)  # fmt: skip
def test_group_evictions(running: list[str], target: str, expected: tuple[str, ...]) -> None:
    assert evictions(fixture("groups.yaml"), running, target) == expected


def test_legacy_top_level_groups() -> None:
    config = fixture("legacy-groups.yaml")
    assert config.router == "groups"
    assert {g.name for g in config.groups} == {"coding", "pinned", DEFAULT_GROUP_ID}
    # defaults swap=true, exclusive=true: coder replaces coder-draft and chat, not reranker
    assert evictions(config, ["coder-draft", "chat", "reranker"], "coder") == (
        "chat",
        "coder-draft",
    )
    # a persistent group that is exclusive (default) still evicts others when it loads
    assert evictions(config, ["coder", "chat"], "reranker") == ("chat", "coder")
    assert evictions(config, ["coder", "reranker"], "chat") == ("coder",)


def test_evictions_unknown_names() -> None:
    config = fixture("groups.yaml")
    with pytest.raises(SwapConfigError, match="unknown model 'nope'"):
        evictions(config, ["nope"], "llama-70b")
    with pytest.raises(SwapConfigError, match="unknown model 'nope'"):
        evictions(config, [], "nope")


@pytest.mark.parametrize(
    ("running", "target", "expected"),
    [
        ([], "llama-70b", ()),
        (["qwen-32b", "embed"], "llama-70b", ("qwen-32b",)),
        # big {L,e} evicts q and w (cost 2); pair {L,q,w} evicts e (cost 10): big wins
        (["embed", "qwen-7b", "whisper"], "llama-70b", ("qwen-7b", "whisper")),
        (["llama-70b", "embed"], "qwen-7b", ("llama-70b",)),
        # mid {Q,q,e,w} keeps everything, big {Q,e} would evict q
        (["qwen-7b", "embed", "whisper"], "qwen-32b", ()),
        # a model in no set runs alone
        (["llama-70b", "embed", "whisper"], "solo", ("embed", "llama-70b", "whisper")),
        (["solo"], "embed", ("solo",)),
        (["embed"], "embed", ()),
    ],
)
def test_matrix_evictions(running: list[str], target: str, expected: tuple[str, ...]) -> None:
    config = fixture("matrix.yaml")
    assert config.router == "matrix"
    assert config.groups == ()
    assert evictions(config, running, target) == expected


def test_matrix_costs_use_measured_load_times_when_given() -> None:
    config = fixture("matrix.yaml")
    assert config.matrix is not None
    assert config.matrix.evict_costs == {"embed": 10}
    assert config.matrix.vars["L"] == "llama-70b"
    load_ms = {"qwen-7b": 5000, "whisper": 4000, "embed": 100}
    # big: 5000 + 4000 = 9000; pair: 10 x 100 = 1000 -> pair, evicting embed
    running = ["embed", "qwen-7b", "whisper"]
    assert evictions(config, running, "llama-70b", load_ms=load_ms) == ("embed",)


def test_matrix_ties_follow_set_order_with_references_first(tmp_path: Path) -> None:
    models = "models:\n" + "".join(f"  {m}:\n    cmd: s ${{PORT}}\n" for m in "abc")
    first = load_config(
        write(tmp_path, models + "matrix:\n  sets:\n    s1: a & b\n    s2: a & c\n")
    )
    assert evictions(first, ["b", "c"], "a") == ("c",)
    # s1 references s2, so s2 is tried first and wins the tie
    second = load_config(
        write(tmp_path, models + "matrix:\n  sets:\n    s1: a & b | +s2\n    s2: a & c\n")
    )
    assert evictions(second, ["b", "c"], "a") == ("b",)


# --------------------------------------------------------------------------- /running


# Shape of GET /running: internal/server/api.go ({"running": [{model, state, cmd, proxy,
# ttl, name, description}]}), states from internal/process/process.go.
RECORDED_RUNNING = {
    "running": [
        {
            "model": "qwen-32b",
            "state": "ready",
            "cmd": "llama-server --port 10003 -m /models/qwen2.5-32b-q4_k_m.gguf -c 16384 -ngl 99",
            "proxy": "http://localhost:10003",
            "ttl": 300,
            "name": "",
            "description": "",
        },
        {
            "model": "llama-8b",
            "state": "starting",
            "cmd": "llama-server --port 10002 -m /models/llama-3.1-8b-q8_0.gguf -c 8192 -np 2",
            "proxy": "http://localhost:10002",
            "ttl": 0,
            "name": "Llama 8B",
            "description": "",
        },
    ]
}


class _Recorder(http.server.BaseHTTPRequestHandler):
    paths: list[str] = []
    redirect = False

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        type(self).paths.append(self.path)
        if self.path.endswith("/running") and type(self).redirect:
            self.send_response(302)
            self.send_header("Location", "/upstream/qwen-32b/props")
            self.end_headers()
            return
        if self.path.endswith("/running"):
            body = json.dumps(RECORDED_RUNNING).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(500)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture()
def server() -> Iterator[tuple[str, type[_Recorder]]]:
    handler = type("Handler", (_Recorder,), {"paths": [], "redirect": False})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_fetch_running_reads_only_running(server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # must be ignored
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    base, handler = server
    assert fetch_running(base) == {"qwen-32b": "ready", "llama-8b": "starting"}
    assert fetch_running(base + "/") == {"qwen-32b": "ready", "llama-8b": "starting"}
    port = base.rsplit(":", 1)[1]
    assert fetch_running(f"http://localhost:{port}", timeout=5) == {
        "qwen-32b": "ready",
        "llama-8b": "starting",
    }
    assert handler.paths == ["/running", "/running", "/running"]


def test_fetch_running_with_path_prefix(server) -> None:
    base, handler = server
    fetch_running(base + "/swap/")
    assert handler.paths == ["/swap/running"]


def test_fetch_running_refuses_redirects(server) -> None:
    base, handler = server
    handler.redirect = True
    with pytest.raises(ServiceError, match="redirect refused"):
        fetch_running(base)
    assert handler.paths == ["/running"]  # never followed to /upstream/..., which loads


def test_fetch_running_bad_body(monkeypatch: pytest.MonkeyPatch, server) -> None:
    base, _handler = server
    monkeypatch.setitem(RECORDED_RUNNING, "running", [{"model": 1}])
    with pytest.raises(ServiceError, match="string model/state"):
        fetch_running(base)
    monkeypatch.setitem(RECORDED_RUNNING, "running", "nope")
    with pytest.raises(ServiceError, match="expected"):
        fetch_running(base)


@pytest.mark.parametrize(
    "url",
    [
        "http://192.168.1.10:8080",
        "http://10.0.0.2",
        "http://example.com:8080",
        "http://127.0.0.1.nip.io:8080",
        "http://localhost.example.com",
        "http://0.0.0.0:8080",
        "http://[fe80::1]:8080",
        "ftp://127.0.0.1/",
        "file:///etc/passwd",
        "http://user:pw@127.0.0.1:8080",
        "127.0.0.1:8080",
    ],
)
def test_fetch_running_refuses_non_loopback_without_traffic(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket, "create_connection", boom)
    monkeypatch.setattr(socket, "getaddrinfo", boom)
    monkeypatch.setattr(socket.socket, "connect", boom)
    with pytest.raises(UsageError):
        fetch_running(url)


# --------------------------------------------------------------------------- /api/events


def sse(kind: str, data: object) -> str:
    """A frame as llama-swap writes it: the inner data is itself a JSON string."""
    envelope = {"type": kind, "data": json.dumps(data)}
    return f"event:message\ndata:{json.dumps(envelope)}\n\n"


STATUS = [
    {"id": "qwen-32b", "name": "", "description": "", "state": "ready", "unlisted": False,
     "peerID": "", "aliases": ["gpt-4o"], "context_length": 16384},
    {"id": "llama-8b", "name": "Llama 8B", "description": "", "state": "starting",
     "unlisted": False, "peerID": "", "aliases": [], "context_length": 0},
    {"id": "gemma-27b", "name": "", "description": "", "state": "stopped", "unlisted": False,
     "peerID": "", "aliases": [], "context_length": 0},
]  # fmt: skip


def test_parse_model_status_frame() -> None:
    assert parse_event_frame(sse("modelStatus", STATUS)) == [
        ("qwen-32b", "ready"),
        ("llama-8b", "starting"),
        ("gemma-27b", "stopped"),
    ]
    # "data: " with a space, CRLF line ends and no trailing blank line are fine too
    frame = sse("modelStatus", STATUS[:1]).replace("data:", "data: ").replace("\n", "\r\n")
    assert parse_event_frame(frame.rstrip()) == [("qwen-32b", "ready")]


def test_parse_other_and_broken_frames() -> None:
    assert parse_event_frame(sse("logData", {"source": "proxy", "data": "hello"})) == []
    assert parse_event_frame(sse("inflight", {"total": 1})) == []
    assert parse_event_frame("event:message\ndata:{not json\n\n") == []
    assert parse_event_frame('data:{"type":"modelStatus","data":"[oops"}') == []
    assert parse_event_frame(": keep-alive\n\n") == []
    assert parse_event_frame("") == []
    # several frames in one chunk
    chunk = sse("logData", {"data": "x"}) + sse("modelStatus", STATUS[1:2])
    assert parse_event_frame(chunk) == [("llama-8b", "starting")]
