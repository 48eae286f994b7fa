"""Slot usage: /slots and /metrics parsing, the tracker, recommend() and the loopback poller.

The /slots fixtures follow llama.cpp ``tools/server/server-context.cpp``
``server_slot::to_json`` (ggml-org/llama.cpp master, 2026; ngxson/llama.cpp mirror):

    res = {{"id", id}, {"n_ctx", n_ctx}, {"speculative", can_speculate()},
           {"is_processing", is_processing()}};
    if (ptask) {                       // task, or the previous task of an idle slot
        res["id_task"] = ptask->id;
        res["n_prompt_tokens"]           = (int32_t) prompt.tokens.size();
        res["n_prompt_tokens_processed"] = stats.n_prompt_processed;
        res["n_prompt_tokens_cache"]     = stats.n_prompt_cached;
        res["params"] = ptask->params.to_json(only_metrics);
        res["next_token"] = json::array({{{"has_next_token", ...}, {"has_new_line", ...},
                                {"n_remain", n_remaining()}, {"n_decoded", stats.n_gen}}});
    }

Late-2025 builds print the same without the three n_prompt_* fields and with next_token built
as ``{ { ... } }`` (still an array of one object); 2024 builds (examples/server/server.cpp)
merged get_formated_generation() with ``id, id_task, state (0 idle / 1 processing), prompt,
next_token: {has_next_token, n_remain, n_decoded, stopped_eos, ...}`` (an object).
The /metrics text follows ``tools/server/server-task.cpp`` (``# HELP`` / ``# TYPE`` lines and
``llamacpp:<name> <value>``).
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.errors import UsageError
from monitor.integrations.slots import (
    SlotPoller,
    SlotSample,
    UsageStats,
    UsageTracker,
    cells_for,
    parse_n_tokens_max,
    parse_slots,
    recommend,
)

PARAMS = {"n_predict": -1, "seed": 4294967295, "temperature": 0.8, "top_k": 40, "top_p": 0.95}

# current shape: -c 16384 -np 4 split KV -> n_ctx 4096 per slot
SLOTS_CURRENT = [
    {   # busy, generating: prompt.tokens holds the prompt and the 200 tokens generated so far
        "id": 0, "n_ctx": 4096, "speculative": False, "is_processing": True, "id_task": 57,
        "n_prompt_tokens": 1434, "n_prompt_tokens_processed": 1180, "n_prompt_tokens_cache": 54,
        "params": PARAMS,
        "next_token": [{"has_next_token": True, "has_new_line": True, "n_remain": -1,
                        "n_decoded": 200}],
    },
    {   # idle after a task: its cache still holds 900 tokens, but it is not in use
        "id": 1, "n_ctx": 4096, "speculative": False, "is_processing": False, "id_task": 41,
        "n_prompt_tokens": 900, "n_prompt_tokens_processed": 700, "n_prompt_tokens_cache": 0,
        "params": PARAMS,
        "next_token": [{"has_next_token": False, "has_new_line": False, "n_remain": 0,
                        "n_decoded": 150}],
    },
    {   # busy, still processing its prompt
        "id": 2, "n_ctx": 4096, "speculative": False, "is_processing": True, "id_task": 58,
        "n_prompt_tokens": 512, "n_prompt_tokens_processed": 512, "n_prompt_tokens_cache": 0,
        "params": PARAMS,
        "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": -1,
                        "n_decoded": 0}],
    },
    # never used: no ptask, so only the four fixed fields
    {"id": 3, "n_ctx": 4096, "speculative": False, "is_processing": False},
]  # fmt: skip

SLOTS_LATE_2025 = [
    {"id": 0, "n_ctx": 8192, "speculative": False, "is_processing": True, "id_task": 3,
     "params": PARAMS,
     "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": -1,
                     "n_decoded": 37}]},
    {"id": 1, "n_ctx": 8192, "speculative": False, "is_processing": False},
]  # fmt: skip

SLOTS_2024 = [
    {"n_ctx": 2048, "n_predict": -1, "model": "m.gguf", "temperature": 0.8, "id": 0,
     "id_task": 9, "state": 1, "prompt": "Hello",
     "next_token": {"has_next_token": True, "n_remain": -1, "n_decoded": 12,
                    "stopped_eos": False, "stopped_word": False, "stopped_limit": False,
                    "stopping_word": ""}},
    {"n_ctx": 2048, "id": 1, "id_task": -1, "state": 0, "prompt": "",
     "next_token": {"has_next_token": True, "n_remain": -1, "n_decoded": 0}},
]  # fmt: skip

METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 48211
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 9120
# HELP llamacpp:n_tokens_max Largest observed n_tokens.
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 3071
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
"""


# --- parsing ------------------------------------------------------------------------------


def test_parse_slots_current_shape() -> None:
    slots = parse_slots(json.loads(json.dumps(SLOTS_CURRENT)))
    assert slots == [
        SlotSample(0, 4096, 1434, True),  # n_prompt_tokens already includes the 200 decoded
        SlotSample(1, 4096, 900, False),
        SlotSample(2, 4096, 512, True),
        SlotSample(3, 4096, 0, False),
    ]
    assert all(s.exact for s in slots)


def test_parse_slots_older_shapes_are_lower_bounds() -> None:
    late = parse_slots(SLOTS_LATE_2025)
    assert late == [SlotSample(0, 8192, 37, True, exact=False), SlotSample(1, 8192, 0, False)]
    old = parse_slots(SLOTS_2024)
    assert [(s.slot_id, s.n_ctx, s.tokens, s.busy, s.exact) for s in old] == [
        (0, 2048, 12, True, False),
        (1, 2048, 0, False, False),  # id_task -1 and next_token: shape of an old build
    ]


@pytest.mark.parametrize(
    "doc",
    [None, 3, "[]", {"error": {"code": 501}}, {"slots": "x"}, [], [1, "a", None],
     float("nan"), {"slots": [[]]}],
)  # fmt: skip
def test_parse_slots_odd_json_gives_nothing(doc: object) -> None:
    assert parse_slots(doc) == []


def test_parse_slots_tolerates_odd_fields() -> None:
    doc = [
        {"id": True, "n_ctx": "4096", "is_processing": 1, "n_prompt_tokens": -5},
        {"n_ctx": 4096.0, "is_processing": True, "n_prompt_tokens": 10.0,
         "next_token": []},
        {"id": 7, "is_processing": True, "n_prompt_tokens": 1.5, "next_token": "x"},
    ]  # fmt: skip
    assert parse_slots(doc) == [
        SlotSample(0, 0, 0, False),  # bool id -> index; string n_ctx -> 0; 1 is not a bool
        SlotSample(1, 4096, 10, True),
        SlotSample(7, 0, 0, True, exact=False),
    ]
    assert parse_slots({"slots": SLOTS_CURRENT[:1]}) == [SlotSample(0, 4096, 1434, True)]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(["id", "n_ctx", "is_processing", "n_prompt_tokens", "next_token",
                         "n_decoded", "state", "slots"]),
        children, max_size=5),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_parse_slots_never_raises(doc: object) -> None:
    for s in parse_slots(doc):
        assert s.tokens >= 0 and s.n_ctx >= 0


def test_parse_n_tokens_max() -> None:
    assert parse_n_tokens_max(METRICS) == 3071
    assert parse_n_tokens_max('llamacpp:n_tokens_max{model="a"} 4.096e+03 1712345678\n') == 4096
    assert parse_n_tokens_max("llamacpp:n_tokens_max_other 5\n") is None
    assert parse_n_tokens_max("# llamacpp:n_tokens_max 5\n") is None
    assert parse_n_tokens_max("llamacpp:n_tokens_max NaN\nllamacpp:n_tokens_max -1\n") is None
    assert parse_n_tokens_max("") is None
    assert parse_n_tokens_max(None) is None  # type: ignore[arg-type]


# --- tracker ------------------------------------------------------------------------------


def busy(*tokens: int) -> list[SlotSample]:
    return [SlotSample(i, 8192, t, True) for i, t in enumerate(tokens)]


def test_tracker_known_distribution() -> None:
    tracker = UsageTracker()
    # 1..1000 tokens, one busy slot per poll, plus idle polls and idle slots (ignored)
    for t in range(1, 1001):
        tracker.add("m", busy(t) + [SlotSample(9, 8192, 5000, False)], ts_ms=t)
    tracker.add("m", [SlotSample(0, 8192, 7000, False)], ts_ms=2000)
    stats = tracker.stats("m")
    assert stats is not None
    # nearest rank: p50 = the 500th of 1..1000, p99 = the 990th
    assert (stats.p50, stats.p99, stats.max_tokens, stats.samples) == (500, 990, 1000, 1000)
    assert (stats.busy_p99, stats.busy_max, stats.busy_polls) == (1, 1, 1000)
    assert (stats.n_slots, stats.slot_n_ctx, stats.first_ts_ms, stats.last_ts_ms) == (
        1, 8192, 1, 2000)  # fmt: skip
    assert stats.n_tokens_max is None
    assert tracker.stats("other") is None


def test_tracker_concurrency_and_watermark() -> None:
    tracker = UsageTracker()
    for _ in range(98):
        tracker.add("m", busy(1000), 0)
    tracker.add("m", busy(1000, 1500), 0)
    tracker.add("m", busy(1000, 1500, 1800), 0)
    tracker.add("m", [SlotSample(0, 0, 40, True, exact=False)], 0)  # an older build's slot
    tracker.set_high_watermark("m", 2500)
    s = tracker.stats("m")
    assert s is not None
    # 101 busy polls: 99 x one slot, then 2, then 3 -> nearest rank 0.99*101 -> the 100th
    assert (s.busy_p99, s.busy_max, s.busy_polls) == (2, 3, 101)
    assert (s.concurrent_p99, s.concurrent_max) == (2500, 4300)
    assert (s.samples, s.inexact_samples, s.max_tokens, s.n_tokens_max, s.peak) == (
        103, 1, 1800, 2500, 2500)  # fmt: skip


def test_tracker_is_bounded() -> None:
    tracker = UsageTracker(max_samples=100)
    for t in range(10_000):
        tracker.add("m", busy(t % 1000), t)
    s = tracker.stats("m")
    assert s is not None
    assert s.samples == 10_000 and s.max_tokens == 999
    assert 400 <= s.p50 <= 600  # a uniform sample of 100 out of a uniform 0..999
    assert all(len(r.items) <= 100 for r in vars_of(tracker, "m"))


def vars_of(tracker: UsageTracker, model: str) -> list:
    usage = tracker._models[model]
    return [usage.tokens, usage.busy, usage.concurrent]


# --- recommend ----------------------------------------------------------------------------


def stats_of(**kw: object) -> UsageStats:
    base = dict(
        model="qwen3-8b", samples=5000, p50=900, p99=1700, max_tokens=1800, n_tokens_max=None,
        busy_polls=4000, busy_p99=2, busy_max=2, concurrent_p99=2900, concurrent_max=3300,
        inexact_samples=0, n_slots=4, slot_n_ctx=8192, first_ts_ms=0, last_ts_ms=1,
    )  # fmt: skip
    base.update(kw)
    return UsageStats(**base)  # type: ignore[arg-type]


def test_cells_follow_llama_cpp() -> None:
    assert cells_for(8192, 24, False) == (12_288, 512)  # 8192/24 = 341 -> 512, x 24 (§1a)
    assert cells_for(8192, 16, True) == (8192, 8192)
    assert cells_for(32_768, 4, False) == (32_768, 8192)
    assert cells_for(4000, 1, False) == (4096, 4096)


def test_recommend_story_split_kv() -> None:
    """-c 32768 -np 4 (split KV): 4 slots of 8192 cells, 32,768 cells in all. The slots never
    held more than 1,800 tokens (p99 1,700) and at most 2 were busy at once.

    per slot: 1700 x 1.25 = 2125 -> pad256 = 2304 (>= the 1,800 seen); np = 2;
    c = np x 2304 = 4608. llama.cpp: pad256(4608) = 4608, 4608 / 2 = 2304 (a multiple of 256),
    so 2 slots x 2304 = 4,608 cells, down from 32,768.
    (The "-c 4352" one might write by hand gives the same 4,608 cells: 4352 / 2 = 2176, padded
    to 2304, x 2; recommending -c 4608 makes -c equal to what is allocated.)
    """
    rec = recommend(stats_of(), current_ctx=32_768, current_np=4, kv_unified=False)
    assert (rec.ctx, rec.np, rec.kv_unified) == (4608, 2, False)
    assert (rec.cells_before, rec.per_slot_before) == (32_768, 8192)
    assert (rec.cells_after, rec.per_slot_after) == (4608, 2304)
    assert cells_for(4352, 2, False) == (4608, 2304)
    assert rec.args == "-c 4608 -np 2"
    assert "32768 to 4608 cells" in rec.reason and rec.reason.endswith(".")
    assert "\n" not in rec.reason


def test_recommend_unified() -> None:
    """Unified KV: one buffer of c cells shared by every slot.

    per slot 1700 x 1.25 = 2125; concurrent p99 2900 x 1.25 = 3625 (>= the 3,300 max seen);
    c = pad256(max(2125, 3625)) = 3840, np = 2; before: -c 32768 unified = 32,768 cells.
    """
    rec = recommend(stats_of(), current_ctx=32_768, current_np=4, kv_unified=True)
    assert (rec.ctx, rec.np) == (3840, 2)
    assert (rec.cells_before, rec.cells_after, rec.per_slot_after) == (32_768, 3840, 3840)
    assert rec.args == "-c 3840 -np 2 -kvu"
    # one busy slot at a time: the per-slot need dominates
    one = recommend(stats_of(busy_p99=1, concurrent_p99=1700, concurrent_max=1800),
                    current_ctx=8192, current_np=1, kv_unified=True)  # fmt: skip
    assert (one.ctx, one.np, one.cells_after) == (2304, 1, 2304)


def test_recommend_never_below_what_was_used() -> None:
    # an outlier (or the n_tokens_max watermark) above p99 x headroom sets the floor
    rec = recommend(stats_of(max_tokens=5000), current_ctx=32_768, current_np=4,
                    kv_unified=False)  # fmt: skip
    assert rec.per_slot_after == 5120 and rec.ctx == 2 * 5120
    wm = recommend(stats_of(n_tokens_max=6000), current_ctx=32_768, current_np=4,
                   kv_unified=False)  # fmt: skip
    assert wm.per_slot_after == 6144 and "longest sequence seen" in wm.reason
    # over many random stats, every slot still fits p99 x headroom and the peak, and the
    # unified cache fits the concurrent use
    rng = random.Random(7)
    for _ in range(500):
        p99 = rng.randrange(0, 40_000)
        s = stats_of(p99=p99, max_tokens=p99 + rng.randrange(0, 3000),
                     n_tokens_max=rng.choice([None, rng.randrange(0, 50_000)]),
                     busy_p99=rng.randrange(0, 9), concurrent_p99=rng.randrange(0, 90_000),
                     concurrent_max=rng.randrange(0, 100_000))  # fmt: skip
        for unified in (False, True):
            r = recommend(s, current_ctx=rng.randrange(256, 131_072),
                          current_np=rng.randrange(1, 17), kv_unified=unified)  # fmt: skip
            assert r.per_slot_after >= max(math.ceil(p99 * 1.25), s.peak)
            assert r.np >= 1 and r.ctx % 256 == 0
            assert cells_for(r.ctx, r.np, unified) == (r.cells_after, r.per_slot_after)
            if unified:
                assert r.cells_after >= max(math.ceil(s.concurrent_p99 * 1.25), s.concurrent_max)
            else:
                assert r.cells_after == r.ctx  # no rounding surprise


def test_recommend_without_data_keeps_current() -> None:
    rec = recommend(stats_of(samples=0, p50=0, p99=0, max_tokens=0), current_ctx=8192,
                    current_np=4, kv_unified=False)  # fmt: skip
    assert (rec.ctx, rec.np, rec.cells_before, rec.cells_after) == (8192, 4, 8192, 8192)
    with pytest.raises(ValueError):
        recommend(stats_of(), current_ctx=8192, current_np=0, kv_unified=False)
    with pytest.raises(ValueError):
        recommend(stats_of(), current_ctx=8192, current_np=1, kv_unified=False, headroom=0.5)


# --- poller against a real HTTP server ----------------------------------------------------


class FakeLlamaServer:
    """A loopback llama-server stand-in: /slots and /metrics, counting requests."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.routes: dict[str, tuple[int, str, bytes]] = {
            "/slots": (200, "application/json", json.dumps(SLOTS_CURRENT).encode()),
            "/metrics": (200, "text/plain; version=0.0.4", METRICS.encode()),
        }
        self.headers: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.hits[self.path] += 1
                owner.headers.append(dict(self.headers))
                route = owner.routes.get(self.path.split("?", 1)[0])
                status, ctype, body = route or (404, "text/plain", b"not found")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def total(self) -> int:
        return sum(self.hits.values())


@pytest.fixture
def server() -> Iterator[FakeLlamaServer]:
    srv = FakeLlamaServer()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()


def test_poll_parses_slots_and_metrics(server: FakeLlamaServer,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # a proxy in the environment must not be used for loopback polling
    monkeypatch.setenv("http_proxy", "http://10.255.255.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://10.255.255.1:9")
    poller = SlotPoller(min_interval_s=10.0, timeout_s=2.0)
    slots = poller.poll(server.url, "qwen3-8b", now_s=100.0)
    assert slots == parse_slots(SLOTS_CURRENT)
    assert server.hits == Counter({"/slots": 1, "/metrics": 1})
    stats = poller.tracker.stats("qwen3-8b")
    assert stats is not None
    assert (stats.samples, stats.max_tokens, stats.busy_max, stats.concurrent_max) == (
        2, 1434, 2, 1946)  # fmt: skip
    assert stats.n_tokens_max == 3071 and stats.n_slots == 4


def test_poll_is_throttled_per_base_url(server: FakeLlamaServer) -> None:
    poller = SlotPoller(min_interval_s=10.0, timeout_s=2.0)
    assert poller.poll(server.url, "m", now_s=100.0) is not None
    assert server.total() == 2
    assert poller.poll(server.url, "m", now_s=105.0) is None  # within the interval
    assert poller.poll(server.url + "/", "m", now_s=109.9) is None  # same base URL
    assert server.total() == 2  # no request reached the server
    assert poller.poll(server.url, "m", now_s=110.0) is not None
    assert server.hits == Counter({"/slots": 2, "/metrics": 2})
    # router mode: a different query is a different target, and the query is kept
    assert poller.poll(server.url + "/?model=qwen", "qwen", now_s=110.0) is not None
    assert server.hits["/slots?model=qwen"] == 1 and server.hits["/metrics?model=qwen"] == 1


def test_poll_stops_asking_metrics_when_disabled(server: FakeLlamaServer) -> None:
    # llama-server without --metrics answers 501
    server.routes["/metrics"] = (501, "application/json", b'{"error":{"code":501}}')
    poller = SlotPoller(min_interval_s=1.0, timeout_s=2.0)
    for t in range(5):
        assert poller.poll(server.url, "m", now_s=float(t)) is not None
    assert server.hits == Counter({"/slots": 5, "/metrics": 1})
    s = poller.tracker.stats("m")
    assert s is not None and s.n_tokens_max is None


def test_poll_backs_off_after_errors(server: FakeLlamaServer) -> None:
    server.routes["/slots"] = (501, "application/json", b'{"error":"slots disabled"}')
    poller = SlotPoller(min_interval_s=10.0, timeout_s=2.0, max_backoff_s=60.0)
    assert poller.poll(server.url, "m", now_s=0.0) is None
    assert server.hits == Counter({"/slots": 1})  # /metrics is not asked after a failure
    assert "501" in (poller.last_error(server.url) or "")
    # first failure: wait 10 x 2 = 20 s, not the plain 10 s interval
    assert poller.poll(server.url, "m", now_s=15.0) is None
    assert server.total() == 1
    assert poller.poll(server.url, "m", now_s=20.0) is None  # second failure: wait 40 s
    assert server.total() == 2
    assert poller.poll(server.url, "m", now_s=59.0) is None
    assert server.total() == 2
    server.routes["/slots"] = (200, "application/json", b"not json")
    assert poller.poll(server.url, "m", now_s=60.0) is None  # third: 80 s, capped at 60
    assert server.total() == 3
    server.routes["/slots"] = (200, "application/json", json.dumps(SLOTS_CURRENT).encode())
    assert poller.poll(server.url, "m", now_s=119.0) is None
    assert poller.poll(server.url, "m", now_s=120.0) is not None  # recovered
    assert poller.last_error(server.url) is None
    assert poller.poll(server.url, "m", now_s=130.0) is not None  # back to the plain interval


def test_poll_connection_refused_is_none() -> None:
    srv = FakeLlamaServer()  # bound, never started, then closed: nothing listens
    url = srv.url
    srv.httpd.server_close()
    poller = SlotPoller(timeout_s=0.5)
    assert poller.poll(url, "m", now_s=0.0) is None
    assert poller.last_error(url)
    assert poller.tracker.stats("m") is None


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.5:8080", "http://192.168.1.2:8080", "http://example.com:8080",
     "http://localhost.example.com", "http://[2001:db8::1]:8080", "http://0.0.0.0:8080",
     "ftp://127.0.0.1/", "file:///etc/passwd", "http://user:pw@127.0.0.1:8080",
     "http://127.0.0.1:99999", "127.0.0.1:8080"],
)  # fmt: skip
def test_non_loopback_raises_before_any_traffic(
    server: FakeLlamaServer, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    poller = SlotPoller()
    with pytest.raises(UsageError):
        poller.poll(url, "m", now_s=0.0)
    assert server.total() == 0


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:1", "http://127.5.6.7:1", "http://localhost:1", "http://[::1]:1",
            "http://[::ffff:127.0.0.1]:1", "https://127.0.0.1:1/upstream/m"],
)  # fmt: skip
def test_loopback_urls_are_accepted(url: str) -> None:
    assert SlotPoller(timeout_s=0.2).poll(url, "m", now_s=0.0) is None  # refused, not raised
