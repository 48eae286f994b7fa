"""``estimate`` against what a real llama-server logged on real architectures.

The fixtures (tests/fixtures/llamalog/arch/*.json) are the memory lines of the CPU
llama-server built by scripts/build-llama-server (llama.cpp commit in each file), started
by tests/realworld/arch_capture.py on the sparse GGUF headers of tests/fakes/arch_models.py
(Qwen3 dense / draft / embedding, Qwen3-30B-A3B, Gemma-3, gpt-oss, DeepSeek-V2-Lite,
Qwen3.5 with and without MTP, Qwen3.5 MoE, GLM-4.5-Air with and without MTP, Llama 4 Scout,
Nemotron-H, Mistral-Small-24B, Gemma-2, OLMo-2, Command-R7B, Phi-3, Granite-4.0-H). Here the
same headers are written again and ``estimate`` runs on the very command line of each
fixture; every buffer llama.cpp logged,
per context (target, -md draft, MTP), must match:

- KV and recurrent state: exactly (the log prints two decimals);
- weights: within 0.5 %; output buffers: within 0.5 %;
- compute buffers: within 5 %.
"""

from __future__ import annotations

import pytest
from arch_compare import argv_for, fixture_paths, load, rows

from monitor.estimate import estimate_command
from monitor.logs.server_log import parse_llama_log

TOLERANCE = {"kv": 0.0, "rs": 0.0, "weights": 0.005, "output": 0.005, "compute": 0.05}
EXACT_MIB = 0.011  # two printed decimals

PATHS = fixture_paths()
# Known gaps, each a strict xfail so that a fix shows up (none today: the MTP target's
# first delta-net layer with its rollback snapshots was the last, compute.py
# delta_net_peak_bytes).
KNOWN_GAPS: dict[str, str] = {}
# Architectures whose compute peak is not derived (monitor/estimate/certainty.py): their
# compute rows are not held to 5 %, but the estimate must say it is approximate, and must
# stop saying so (COMPUTE_CHECKED) only once the rows match. None today: Nemotron-H's
# Mamba2 layers (21-28 % low before) are replayed by monitor/estimate/replay.py.
COMPUTE_NOT_DERIVED: frozenset[str] = frozenset()
# Cases of a checked architecture whose compute is not derived for that launch. None today:
# DeepSeek-V3's MLA attention with flash attention at 128 heads (412.01 MiB logged at
# -ub 512, estimated 320.01 before: -22 %) is replayed (monitor/estimate/replay.py).
COMPUTE_NOT_DERIVED_CASES: frozenset[str] = frozenset()


def _param(path):
    reason = KNOWN_GAPS.get(path.stem)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(path, id=path.stem, marks=marks)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("arch-models")


def test_the_tier_has_fixtures() -> None:
    """The fixtures exist and cover every architecture of the tier."""
    models = {load(p)["model"].removesuffix("-nomtp") for p in PATHS}
    assert {
        "qwen3-8b",
        "qwen3-embedding-0.6b",
        "qwen3moe-30b-a3b",
        "gemma3-4b",
        "gpt-oss-20b",
        "deepseek-v2-lite",
        "qwen35-27b",
        "qwen35moe-35b-a3b",
        "glm4moe-air",
        "llama4-scout",
        "nemotron-nano-9b-v2",
        "mistral-small-24b",
        "gemma2-9b",
        "olmo2-7b",
        "command-r7b",
        "phi3-mini",
        "granite-4-h-tiny",
    } <= models
    assert all(load(p)["llama_cpp_commit"] for p in PATHS)


@pytest.mark.parametrize("path", [_param(p) for p in PATHS])
def test_estimate_matches_the_logged_buffers(path, models_dir) -> None:
    doc = load(path)
    report = parse_llama_log(doc["log_lines"])
    est = estimate_command(argv_for(doc, models_dir), env={}, devices=())
    got = rows(doc, est, report)
    assert got, "no buffer on either side"
    bad = []
    unsure = est.approximate
    arch = _arch(doc)
    for r in got:
        if r.kind == "compute" and (
            arch in COMPUTE_NOT_DERIVED or doc["id"] in COMPUTE_NOT_DERIVED_CASES
        ):
            assert any(line.startswith("compute buffer") for line in unsure), unsure
            continue
        tol = TOLERANCE[r.kind]
        off = abs(r.estimate_mib - r.logged_mib)
        if off > max(EXACT_MIB, tol * r.logged_mib):
            bad.append(
                f"{r.context} {r.kind}: logged {r.logged_mib:.2f} MiB, estimate "
                f"{r.estimate_mib:.2f} MiB ({r.diff:+.1%})"
            )
    logged = {(r.context, r.kind) for r in got if r.logged_mib}
    assert ("target", "compute") in logged and ("target", "weights") in logged
    assert not bad, f"{doc['id']}:\n" + "\n".join(bad)


def _arch(doc: dict) -> str:
    from arch_models import model_for

    return model_for(doc["model"]).arch


def test_what_is_called_checked_is_checked_by_a_fixture() -> None:
    """Every architecture the estimator calls derived has fixtures here, none of them on
    the not-derived list; and a launch of one is not marked approximate (no noise)."""
    from monitor.estimate.certainty import COMPUTE_CHECKED

    archs = {_arch(load(p)) for p in PATHS}
    assert archs >= COMPUTE_CHECKED
    assert not COMPUTE_CHECKED & COMPUTE_NOT_DERIVED
    assert archs >= COMPUTE_NOT_DERIVED


@pytest.mark.parametrize(
    ("fixture", "wanted"),
    [
        ("qwen3-8b-c4096-np1", ()),
        ("mistral-small-q8kv", ()),
        ("granitehybrid-c4096-np1", ()),
        ("llama4-c32768-np1", ("no sliding_window key", "no shared-expert size key")),
        ("nemotron-h-c4096-np1", ()),
        ("nemotron-h-q8kv", ()),
        ("deepseek-v3-c4096-np1", ()),
        ("deepseek-v3-h32-ub2048", ()),
        ("deepseek-v3-fa-off", ()),
    ],
)
def test_estimates_say_what_they_assumed(fixture: str, wanted: tuple, models_dir) -> None:
    from arch_compare import FIXTURES

    doc = load(FIXTURES / f"{fixture}.json")
    est = estimate_command(argv_for(doc, models_dir), env={}, devices=())
    assert len(est.approximate) == len(wanted), est.approximate
    for text, line in zip(wanted, est.approximate, strict=True):
        assert text in line


def test_log_comparison_names_the_mtp_and_draft_buffers(models_dir) -> None:
    """``estimate --log`` lines up the MTP context's and the draft's buffers too."""
    from arch_compare import FIXTURES

    from monitor.report.estimate import compare_with_log

    for name, wanted in (
        ("qwen35-mtp", {"mtp_kv", "mtp_compute", "mtp_output"}),
        ("qwen3-8b-md", {"draft_output", "draft_compute"}),
    ):
        doc = load(FIXTURES / f"{name}.json")
        est = estimate_command(argv_for(doc, models_dir), env={}, devices=())
        rows_ = {
            r["component"]: r for r in compare_with_log(est, parse_llama_log(doc["log_lines"]))
        }
        assert wanted <= set(rows_), sorted(rows_)
        for component in wanted:
            assert rows_[component]["reported_mib"] > 0
            assert (
                abs(rows_[component]["delta_mib"]) <= 0.05 * rows_[component]["reported_mib"] + 0.01
            ), rows_[component]


def test_spec_types_accumulate_and_depth_zero_keeps_no_snapshots(models_dir) -> None:
    """``--spec-type`` is repeatable (draft-mtp,ngram-simple still loads MTP and keeps
    rollback snapshots: common_params_speculative::need_n_rs_seq), and depth 0 keeps none
    (n_rs_seq = draft.n_max = 0; it was read as the default 3)."""
    from arch_models import model_for

    path = str(model_for("qwen35moe-35b-a3b").write(models_dir))

    def est(*args: str):  # noqa: ANN202
        argv = ["llama-server", "-m", path, "-c", "4096", "-np", "1", *args]
        return estimate_command(argv, env={}, devices=())

    plain = est()
    mtp = est("--spec-type", "draft-mtp")
    both = est("--spec-type", "draft-mtp", "--spec-type", "ngram-simple")
    zero = est("--spec-type", "draft-mtp", "--spec-draft-n-max", "0")
    assert mtp.total_bytes("rs") == 4 * plain.total_bytes("rs")
    assert both.total_bytes("rs") == mtp.total_bytes("rs")
    assert both.total_bytes("mtp_kv") == mtp.total_bytes("mtp_kv") > 0
    assert zero.total_bytes("rs") == plain.total_bytes("rs")
