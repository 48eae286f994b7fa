"""diagnose's wording (issue 34): why a server holds less than its estimate; the KV-to-p99
figure from one function for diagnose and the TUI; a "smaller draft" only with the
target's vocabulary."""

from __future__ import annotations

from pathlib import Path

import gguf_models as g
import pytest

from monitor.analysis.diagnose import judge_findings, kv_over_p99, launch_findings, times
from monitor.analysis.measured import Measured
from monitor.analysis.predict_fixes import smaller_drafts
from monitor.estimate import estimate
from monitor.estimate.model import Component, MemoryEstimate
from monitor.servers import parse_command
from monitor.units import GIB, MIB


def est_of(file_b: int, anon_b: int, device_b: int) -> MemoryEstimate:
    return MemoryEstimate(
        "llama.cpp",
        "/m/x.gguf",
        (
            Component("weights", "host", file_b, "mmap", residency="file"),
            Component("compute", "host", anon_b, "buffers", residency="anon"),
            Component("kv", "nvml:0", device_b, "kv", residency="device"),
        ),
    )


def test_below_the_estimate_says_which_part_is_not_resident() -> None:
    est = est_of(4 * GIB, 1 * GIB, 2 * GIB)
    # 3 of 4 GiB weights resident (75 %: not "evicted"), 200 MiB of the host buffers
    d = judge_findings(1, "x.gguf", est, (), Measured(2 * GIB, 200 * MIB, 3 * GIB))
    assert d.verdict == "as_expected"
    assert d.summary == (
        "x.gguf holds 5.2 GiB, as expected (estimate 7.0 GiB): only 3.0 GiB of the 4.0 GiB "
        "mmap'd weights resident (page cache: read in as tokens use them, and evictable); "
        "only 200 MiB of the 1.0 GiB host buffers resident (pages are taken on first "
        "write: compute buffers by the batches run so far)"
    )


def test_at_the_estimate_no_reason_is_invented() -> None:
    est = est_of(4 * GIB, 1 * GIB, 2 * GIB)
    d = judge_findings(1, "x.gguf", est, (), Measured(2 * GIB, 1 * GIB - 64 * MIB, 4 * GIB))
    assert d.summary == "x.gguf holds 6.9 GiB, as expected (estimate 7.0 GiB)"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("drafts")
    md, tensors = g.qwen3_8b(n_layer=4, n_vocab=1024)
    g.write_model(d / "target.gguf", "qwen3", md, tensors, vocab_size=1024)
    md, tensors = g.qwen3_8b(n_layer=3, n_vocab=1024)
    g.write_model(d / "draft.gguf", "qwen3", md, tensors, vocab_size=1024)
    md, tensors = g.qwen3_8b(n_layer=1, n_vocab=1024)
    g.write_model(d / "same-vocab.gguf", "qwen3", md, tensors, vocab_size=1024)
    # as many tokens, another tokenizer (SPM): llama.cpp refuses it as a draft
    md, tensors = g.qwen3_8b(n_layer=1, n_vocab=1024)
    spm = {**md, "tokenizer.ggml.model": "llama", "qwen3.vocab_size": 1024}
    g.write_model(d / "other-tokenizer.gguf", "qwen3", spm, tensors)
    md, tensors = g.qwen3_8b(n_layer=1, n_vocab=1024)
    g.write_model(d / "no-vocab.gguf", "qwen3", md, tensors)  # says nothing of its tokens
    return d


def test_smaller_drafts_share_the_targets_vocabulary(folder: Path) -> None:
    spec = parse_command(
        ["llama-server", "-m", str(folder / "target.gguf"), "-md", str(folder / "draft.gguf")]
    )
    assert spec is not None
    assert smaller_drafts(spec, None) == [str(folder / "same-vocab.gguf")]


def test_kv_ratio_is_one_figure_for_diagnose_and_the_tui(folder: Path) -> None:
    spec = parse_command(
        ["llama-server", "-m", str(folder / "target.gguf"), "-c", "8192", "-np", "1"]
    )
    assert spec is not None
    est = estimate(spec)
    ratio = kv_over_p99(est, 3007)
    assert ratio == pytest.approx(8192 / 3007) and times(ratio) == "2.7×"
    kv = next(f for f in launch_findings(spec, est, estimate, 3007) if f.component == "kv")
    assert "(2.7× the p99 of 3007 tokens in use per slot)" in kv.cause
    assert kv_over_p99(est, None) is None
