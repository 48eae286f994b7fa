"""Real-world tier: our estimates against a real llama-server (CPU build, tiny models).

For each configuration the server is started on 127.0.0.1 with ``-lv 4`` (the memory
lines are TRACE level since llama.cpp PR #23021), the log is parsed with
``monitor.logs.server_log.parse_llama_log`` and compared with ``monitor.estimate.estimate_command``
on the very same argv:

- cells / n_ctx_seq: equal to ``llama_context: n_ctx / n_ctx_seq``;
- KV (target, and draft for ``-md``): equal to the logged sizes to 0.01 MiB (the log prints
  two decimals);
- compute buffer: within 10 % of the logged CPU compute buffer;
- RssAnon (``-lm none``, so the weights are anonymous memory): within 10 % of the host total
  after a full-ubatch request, and of the host total without the (still untouched) compute
  buffer right after load.

The expected cells per case are also written out by hand from estimation.md section 1a/1b,
so a failure says whether llama.cpp or our estimator moved.

Run: ``bash scripts/build-llama-server && bash scripts/test --slow -k realworld``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
KV_TOL_MIB = 0.01
COMPUTE_REL_TOL = 0.10
RSS_REL_TOL = 0.10


@dataclass(frozen=True)
class Case:
    id: str
    model: str  # key of the ``tiny`` fixture
    args: tuple[str, ...]
    n_ctx: int  # expected llama_context n_ctx (total cells of the full-attention cache)
    n_ctx_seq: int  # expected cells per stream
    n_seq_max: int
    kv_unified: bool
    swa_cells: int = 0  # expected cells per stream of the SWA cache (gemma3)
    rss: bool = True  # compare RssAnon (needs -lm none)
    draft: bool = False

    @property
    def n_stream(self) -> int:
        return 1 if self.kv_unified else self.n_seq_max


NO_MMAP = ("-lm", "none")

CASES = [
    # llama, n_ctx_train 4096
    Case("llama-c2048-np1", "llama", ("-c", "2048", "-np", "1", *NO_MMAP), 2048, 2048, 1, False),
    # explicit -np leaves kv_unified off: 2048/3 = 682 -> pad 768 per stream, 3 x 768 = 2304
    Case("llama-c2048-np3", "llama", ("-c", "2048", "-np", "3", *NO_MMAP), 2304, 768, 3, False),
    Case(
        "llama-c2048-np4-kvu",
        "llama",
        ("-c", "2048", "-np", "4", "-kvu", *NO_MMAP),
        2048,
        2048,
        4,
        True,
    ),
    # no -np: auto = 4 slots with a unified cache
    Case("llama-c2048-auto-np", "llama", ("-c", "2048", *NO_MMAP), 2048, 2048, 4, True),
    Case(
        "llama-q8-kv-fa-on",
        "llama",
        ("-c", "2048", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", *NO_MMAP),
        2048,
        2048,
        1,
        False,
    ),
    Case(
        "llama-ub256-fa-off",
        "llama",
        ("-c", "2048", "-np", "1", "-ub", "256", "-fa", "off", *NO_MMAP),
        2048,
        2048,
        1,
        False,
    ),
    # default load mode (mmap): the weights are file pages, so no RssAnon comparison
    Case("llama-mmap", "llama", ("-c", "1024", "-np", "1"), 1024, 1024, 1, False, rss=False),
    Case(
        "llama-draft",
        "llama",
        ("-c", "2048", "-np", "1", "-md", "{draft}", *NO_MMAP),
        2048,
        2048,
        1,
        False,
        draft=True,
    ),
    # gemma3, 6 layers: 0-4 SWA (window 128), 5 full; non-unified, 2 streams of 2048;
    # SWA per stream = pad256(min(2048, 128 + n_ubatch 512)) = 768
    Case(
        "gemma3-c4096-np2",
        "gemma3",
        ("-c", "4096", "-np", "2", *NO_MMAP),
        4096,
        2048,
        2,
        False,
        swa_cells=768,
    ),
    Case(
        "gemma3-c4096-np2-swa-full",
        "gemma3",
        ("-c", "4096", "-np", "2", "--swa-full", *NO_MMAP),
        4096,
        2048,
        2,
        False,
        swa_cells=2048,
    ),
    # bert encoder: no KV at all; -c defaults to n_ctx_train 512, auto np = 4 unified
    Case("bert-embedding", "bert", ("--embedding", *NO_MMAP), 512, 512, 4, True),
]


_RUNS: dict[str, object] = {}


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


def _prompt_tokens(case: Case) -> int:
    """A prompt of one full ubatch (plus a few), so the compute buffer's pages get touched;
    never more than a slot holds. ``"a " * n`` is n tokens in both test vocabs ("\u2581a")."""
    args = list(case.args)
    n_ubatch = int(args[args.index("-ub") + 1]) if "-ub" in args else 512
    if case.model == "bert":  # one sequence must fit one ubatch, with [CLS] and [SEP]
        return min(n_ubatch, case.n_ctx_seq) - 8
    if "-fa" in args and args[args.index("-fa") + 1] == "off":
        # FA off: the reserved KQ scores are n_ub x n_kv x n_head with n_kv = all cells of a
        # stream, but a real graph only spans the cells in use, so fill the slot.
        return case.n_ctx_seq - 32
    return min(n_ubatch + 16, case.n_ctx_seq - 16)


@pytest.fixture
def run(case: Case, llama_server, tiny, tmp_path_factory):
    """One llama-server run per case, shared by all the checks on that case."""
    if case.id not in _RUNS:
        model = tiny[case.model]
        args = [a.replace("{draft}", str(tiny["draft"].path)) for a in case.args]
        text = "a " * _prompt_tokens(case)
        if case.model == "bert":
            request, endpoint = {"content": text}, "/embedding"
        else:
            request, endpoint = {"prompt": text, "n_predict": 4}, "/completion"
        log_path = tmp_path_factory.mktemp("logs") / f"{case.id}.log"
        _RUNS[case.id] = llama_server(
            model.path, args, log_path, request=request, endpoint=endpoint
        )
    return _RUNS[case.id]


def _parse(run):
    from monitor.logs.server_log import parse_llama_log

    return parse_llama_log(run.log)


def _estimate(run):
    from collectors.cpuinfo import llama_cpu_features, read_cpu_flags
    from monitor.estimate import estimate_command, features_of

    # The server got no LLAMA_ARG_* variables (conftest strips them), so no env here either.
    # This box's CPU decides which weights llama.cpp repacks (AMX, CPU_REPACK): the same
    # features `vramscope estimate` reads.
    cpu = features_of(llama_cpu_features(read_cpu_flags()))
    return estimate_command(run.argv, env={}, devices=(), cpu=cpu)


def _kv_mib(report, context: str, caches: set[str]) -> float:
    return sum(k.size_mib for k in report.kv if k.context == context and k.cache in caches)


def _breakdown(est, report, run) -> str:
    comps = "\n".join(
        f"    {c.name:14s} {c.device:6s} {c.bytes / MIB:10.2f} MiB  {c.formula}"
        for c in est.components
    )
    logged = "\n".join(
        f"    {b.context:6s} {b.kind:8s} {b.backend:12s} {b.mib:10.2f} MiB" for b in report.buffers
    )
    return (
        f"argv: {' '.join(run.argv)}\nestimate components:\n{comps}\n"
        f"logged buffers:\n{logged}\n"
        f"RssAnon {run.rss_anon_bytes / MIB:.2f} MiB, "
        f"RssFile {run.rss_file_bytes / MIB:.2f} MiB"
    )


# ----------------------------------------------------------------------------- checks


def test_server_runs_and_logs_memory(case: Case, run) -> None:
    """The server loaded the model, answered, and printed the -lv 4 memory lines."""
    assert "llama_context:" in run.log, run.log[-3000:]
    report = _parse(run)
    assert report.buffers, "no '... buffer size = ... MiB' lines parsed"
    assert report.n_seq_max == case.n_seq_max
    assert report.kv_unified == case.kv_unified


def test_cells_match_log(case: Case, run) -> None:
    report = _parse(run)
    # llama.cpp itself against the hand formula of estimation.md 1a
    assert (report.n_ctx, report.n_ctx_seq) == (case.n_ctx, case.n_ctx_seq)
    est = _estimate(run)
    assert est.cells == report.n_ctx
    assert est.n_ctx_seq == report.n_ctx_seq
    assert est.n_stream == case.n_stream


def test_kv_matches_log(case: Case, run) -> None:
    report = _parse(run)
    est = _estimate(run)
    target = [k for k in report.kv if k.context == "target"]
    if case.model == "bert":
        assert target == [], "an encoder-only model must not allocate a KV cache"
        assert est.total_bytes("kv") + est.total_bytes("kv_swa") == 0
        return
    # the log's per-stream cells and stream count, against the case table
    full = [k for k in target if k.cache in ("kv", "kv_full")]
    assert [(k.cells_per_stream, k.streams) for k in full] == [(case.n_ctx_seq, case.n_stream)]
    swa = [k for k in target if k.cache == "kv_swa"]
    if case.swa_cells:
        assert [(k.cells_per_stream, k.streams) for k in swa] == [(case.swa_cells, case.n_stream)]
    else:
        assert swa == []

    log_full = _kv_mib(report, "target", {"kv", "kv_full"})
    log_swa = _kv_mib(report, "target", {"kv_swa"})
    est_full = est.total_bytes("kv") / MIB
    est_swa = est.total_bytes("kv_swa") / MIB
    msg = _breakdown(est, report, run)
    assert abs(est_full - log_full) <= KV_TOL_MIB, f"kv {est_full:.3f} vs log {log_full}\n{msg}"
    assert abs(est_swa - log_swa) <= KV_TOL_MIB, f"kv_swa {est_swa:.3f} vs log {log_swa}\n{msg}"
    assert abs(est_full + est_swa - report.total_mib(kind="KV")) <= 2 * KV_TOL_MIB, msg


def test_draft_kv_matches_log(case: Case, run) -> None:
    if not case.draft:
        pytest.skip("no draft model in this configuration")
    report = _parse(run)
    est = _estimate(run)
    log_draft = _kv_mib(report, "draft", {"kv", "kv_full", "kv_swa"})
    assert log_draft > 0, "the draft context logged no KV cache"
    est_draft = est.total_bytes("draft_kv") / MIB
    assert abs(est_draft - log_draft) <= KV_TOL_MIB, (
        f"draft kv {est_draft:.3f} vs log {log_draft}\n{_breakdown(est, report, run)}"
    )


def test_compute_within_10_percent(case: Case, run) -> None:
    report = _parse(run)
    est = _estimate(run)
    log_mib = report.total_mib(kind="compute")
    est_mib = est.total_bytes("compute") / MIB
    assert log_mib > 0
    assert abs(est_mib - log_mib) <= COMPUTE_REL_TOL * log_mib, (
        f"compute {est_mib:.2f} MiB vs log {log_mib:.2f} MiB\n{_breakdown(est, report, run)}"
    )
    if case.draft:
        log_d = report.total_mib(kind="compute", context="draft")
        est_d = est.total_bytes("draft_compute") / MIB
        assert abs(est_d - log_d) <= COMPUTE_REL_TOL * log_d, (
            f"draft compute {est_d:.2f} MiB vs log {log_d:.2f} MiB\n{_breakdown(est, report, run)}"
        )


def test_rss_anon_within_10_percent(
    case: Case, run, record_property: pytest.RecordProperty
) -> None:
    """RssAnon against the host estimate, at two moments.

    - After load (/health ok): llama.cpp has malloc'ed the compute buffer, but the warmup
      runs a 1-2 token graph, so most of its pages were never touched and are not resident.
      Expected: the host estimate without the compute buffer.
    - After one full-ubatch request: the compute buffer is resident. Expected: the whole
      host estimate.

    Both within 10 % of the host estimate. Measured beyond llama.cpp's logged buffers
    (0.3.36 / llama.cpp 0c1e57098, these shapes): the process's own heap (vocab, chat
    template, HTTP server) is about 4.5 MiB at load; a full ubatch adds ggml's CPU work
    buffer (f16 copies of the activations, ~3 MiB). With ``-fa off`` that work buffer also
    holds an f16 copy of the KQ scores for the KQ x V matmul (n_kv x n_ub x n_head x 2 B,
    16 MiB at 2048 cells / ub 256 / 16 heads). The bert embedder grows more with the
    request: about +13 MiB beyond its compute buffer for a 500-token input (~27 KiB/token).
    """
    if not case.rss:
        pytest.skip("weights are mmapped (file pages) in this configuration")
    report = _parse(run)
    est = _estimate(run)
    est_host = est.total_bytes(device="host")
    # Buffers that become resident only when a full batch runs: the compute buffers and
    # the run-time work memory the estimator models beside them.
    est_compute = sum(
        est.total_bytes(name, device="host")
        for name in ("compute", "draft_compute", "cpu_work", "attn_scores")
    )
    tol = RSS_REL_TOL * est_host
    record_property("rss_anon_load_mib", round(run.rss_anon_bytes / MIB, 2))
    record_property("rss_anon_work_mib", round((run.rss_anon_work_bytes or 0) / MIB, 2))
    record_property("estimate_host_mib", round(est_host / MIB, 2))
    msg = _breakdown(est, report, run)

    at_load = est_host - est_compute
    diff = run.rss_anon_bytes - at_load
    assert abs(diff) <= tol, (
        f"after load: RssAnon {run.rss_anon_bytes / MIB:.2f} MiB vs estimate without compute "
        f"{at_load / MIB:.2f} MiB ({diff / MIB:+.2f} MiB)\n{msg}"
    )

    assert run.rss_anon_work_bytes is not None
    diff = run.rss_anon_work_bytes - est_host
    assert abs(diff) <= tol, (
        f"after a full ubatch: RssAnon {run.rss_anon_work_bytes / MIB:.2f} MiB vs estimate "
        f"{est_host / MIB:.2f} MiB ({diff / MIB:+.2f} MiB)\n{msg}"
    )
