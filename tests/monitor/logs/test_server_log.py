"""The llama.cpp / vLLM log parser against realistic log excerpts (tests/fixtures/llamalog)."""

from __future__ import annotations

import io
import random
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.logs.server_log import (
    BreakdownRow,
    BufferLine,
    KvLine,
    LlamaLogParser,
    LlamaLogReport,
    parse_llama_log,
    parse_vllm_log,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llamalog"


def fixture_lines(name: str) -> list[str]:
    """The fixture's log lines, without its leading '# source:' comment block."""
    lines = (FIXTURES / name).read_text().splitlines(keepends=True)
    assert lines[0].startswith("# source:"), name
    return [line for line in lines if not line.startswith("# ")]


def parse(name: str) -> LlamaLogReport:
    return parse_llama_log(fixture_lines(name))


def buffers(report: LlamaLogReport, context: str = "target") -> dict[tuple[str, str], float]:
    return {(b.kind, b.backend): b.mib for b in report.buffers if b.context == context}


def kv(report: LlamaLogReport, context: str = "target") -> dict[str, KvLine]:
    return {k.cache: k for k in report.kv if k.context == context}


def params(report: LlamaLogReport) -> dict[str, object]:
    names = (
        "n_ctx",
        "n_ctx_seq",
        "n_seq_max",
        "n_batch",
        "n_ubatch",
        "flash_attn",
        "kv_unified",
        "n_slots",
        "n_ctx_slot",
        "offloaded_layers",
    )
    return {name: getattr(report, name) for name in names}


def test_every_fixture_names_its_source() -> None:
    names = sorted(p.name for p in FIXTURES.glob("*.log"))
    assert len(names) >= 13
    for name in names:
        first = (FIXTURES / name).read_text().splitlines()[0]
        assert first.startswith("# source: "), name


# --- current formats ------------------------------------------------------------------


def test_current_prefixed_log() -> None:
    r = parse("current-prefixed.log")
    assert buffers(r) == {
        ("model", "CPU_Mapped"): 333.84,
        ("model", "CUDA0"): 4455.35,
        ("output", "CUDA_Host"): 2.32,
        ("KV", "CUDA0"): 4608.00,
        ("compute", "CUDA0"): 306.75,
        ("compute", "CUDA_Host"): 72.01,
    }
    assert kv(r) == {
        "kv": KvLine("target", "kv", 4608.0, 32768, 1, 36, "f16", 2304.0, "f16", 2304.0)
    }
    assert params(r) == {
        "n_ctx": 32768,
        "n_ctx_seq": 32768,
        "n_seq_max": 4,
        "n_batch": 2048,
        "n_ubatch": 512,
        "flash_attn": "enabled",  # "auto", then "Flash Attention was auto, set to enabled"
        "kv_unified": True,
        "n_slots": 4,
        "n_ctx_slot": 32768,
        "offloaded_layers": (37, 37),
    }
    assert r.breakdown == () and r.oom == ()
    assert r.total_mib() == pytest.approx(333.84 + 4455.35 + 2.32 + 4608 + 306.75 + 72.01)
    assert r.total_mib(device="CUDA0") == pytest.approx(4455.35 + 4608 + 306.75)
    assert r.total_mib(device="host") == pytest.approx(333.84 + 2.32 + 72.01)
    assert r.total_mib(kind="KV") == 4608.0
    assert r.total_mib(kind="KV", context="draft") == 0


def test_device_names() -> None:
    r = parse("current-prefixed.log")
    devices = {b.backend: b.device for b in r.buffers}
    assert devices == {"CPU_Mapped": "host", "CUDA0": "CUDA0", "CUDA_Host": "host"}
    r = parse_llama_log(
        [
            "load_tensors:  MTL0_Mapped model buffer size =  4455.35 MiB",
            "load_tensors:   CPU_REPACK model buffer size =   100.00 MiB",
            "load_tensors:  HTP0-REPACK model buffer size =   504.00 MiB",
            "llama_kv_cache: RPC[10.0.0.2:50052] KV buffer size =   656.00 MiB",
            "sched_reserve: Vulkan_Host compute buffer size =   128.16 MiB",
        ]
    )
    assert {b.backend: b.device for b in r.buffers} == {
        "MTL0_Mapped": "MTL0",
        "CPU_REPACK": "host",
        "HTP0-REPACK": "HTP0",
        "RPC[10.0.0.2:50052]": "RPC[10.0.0.2:50052]",
        "Vulkan_Host": "host",
    }


def test_no_prefix_log_with_fit_probe_first() -> None:
    """ollama's child: the fit dry run (0.00 MiB, 262144 ctx) precedes the real load."""
    r = parse("current-no-prefix.log")
    assert buffers(r) == {
        ("model", "CPU_Mapped"): 200.98,
        ("model", "CUDA0"): 1998.84,
        ("output", "CUDA_Host"): 0.77,
        ("KV", "CUDA0"): 980.00,
        ("compute", "CUDA0"): 245.51,
        ("compute", "CUDA_Host"): 29.02,
    }  # the probe's "CUDA_Host model 0.00" line is not the real load's
    assert kv(r) == {
        "kv": KvLine("target", "kv", 980.0, 12544, 2, 40, "q8_0", 490.0, "q8_0", 490.0)
    }
    k = kv(r)["kv"]
    assert k.cells_per_stream * k.streams == r.n_ctx == 25088
    assert params(r) == {
        "n_ctx": 25088,
        "n_ctx_seq": 12544,
        "n_seq_max": 2,
        "n_batch": 512,
        "n_ubatch": 512,
        "flash_attn": "enabled",
        "kv_unified": False,
        "n_slots": 2,
        "n_ctx_slot": 12544,
        "offloaded_layers": (41, 41),
    }
    assert {b.context for b in r.buffers} == {"target"}


def test_fit_probe_zero_lines_never_replace_real_values() -> None:
    real = fixture_lines("current-prefixed.log")
    probe = [
        "load_tensors:        CUDA0 model buffer size =     0.00 MiB",
        "load_tensors:   CPU_Mapped model buffer size =     0.00 MiB",
        "load_tensors:        CUDA1 model buffer size =     0.00 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =     0.00 MiB",
        "llama_kv_cache: size =    0.00 MiB ( 32768 cells,  36 layers,  4/1 seqs), "
        "K (f16):    0.00 MiB, V (f16):    0.00 MiB",
    ]
    before = parse_llama_log(real)
    after = parse_llama_log(real + probe)
    assert after.buffers == before.buffers
    assert after.kv == before.kv
    assert after.total_mib() == pytest.approx(before.total_mib())


def test_a_reload_replaces_and_drops_stale_buffers() -> None:
    first = [
        "load_tensors:        CUDA0 model buffer size =  1000.00 MiB",
        "load_tensors:        CUDA1 model buffer size =  1000.00 MiB",
        "llama_context: n_ctx         = 4096",
        "llama_kv_cache:      CUDA0 KV buffer size =   100.00 MiB",
        "sched_reserve:      CUDA0 compute buffer size =   50.00 MiB",
    ]
    second = [
        "srv    load_model: loading model '/m.gguf'",
        "load_tensors:        CUDA0 model buffer size =  1500.00 MiB",
        "llama_context: n_ctx         = 8192",
        "llama_kv_cache:      CUDA0 KV buffer size =   200.00 MiB",
        "sched_reserve:      CUDA0 compute buffer size =   60.00 MiB",
    ]
    r = parse_llama_log(first + second)
    assert buffers(r) == {
        ("model", "CUDA0"): 1500.0,
        ("KV", "CUDA0"): 200.0,
        ("compute", "CUDA0"): 60.0,
    }
    assert r.n_ctx == 8192


# --- older formats --------------------------------------------------------------------


def test_llama_2024_log() -> None:
    r = parse("llama-2024.log")
    assert buffers(r) == {
        ("model", "CPU"): 281.81,  # "llm_load_tensors: CPU buffer size" (no "model" word)
        ("model", "CUDA0"): 4403.50,
        ("KV", "CUDA0"): 1024.00,
        ("output", "CUDA_Host"): 0.98,
        ("compute", "CUDA0"): 560.00,
        ("compute", "CUDA_Host"): 24.01,
    }
    assert kv(r) == {
        "kv": KvLine("target", "kv", 1024.0, None, None, None, "f16", 512.0, "f16", 512.0)
    }
    assert params(r) == {
        "n_ctx": 8192,
        "n_ctx_seq": None,
        "n_seq_max": None,
        "n_batch": 2048,
        "n_ubatch": 512,
        "flash_attn": "0",
        "kv_unified": None,
        "n_slots": 1,
        "n_ctx_slot": 8192,
        "offloaded_layers": (33, 33),
    }


def test_kv_cache_unified_2025_log() -> None:
    r = parse("kv-unified-2025.log")
    assert buffers(r) == {
        ("model", "CUDA0"): 5115.49,
        ("model", "CPU_Mapped"): 344.44,
        ("output", "CUDA_Host"): 0.49,
        ("KV", "CUDA0"): 2048.00,
        ("compute", "CUDA0"): 258.50,  # compute under "llama_context:" before sched_reserve
        ("compute", "CUDA_Host"): 40.01,
    }
    assert kv(r) == {
        "kv": KvLine("target", "kv", 2048.0, 16384, None, 32, "f16", 1024.0, "f16", 1024.0)
    }
    assert params(r) == {
        "n_ctx": 16384,
        "n_ctx_seq": 16384,
        "n_seq_max": 1,
        "n_batch": 2048,
        "n_ubatch": 512,
        "flash_attn": "1",
        "kv_unified": None,
        "n_slots": 1,
        "n_ctx_slot": 16384,
        "offloaded_layers": (33, 33),
    }


def test_seqs_variants() -> None:
    r = parse_llama_log(
        [
            "llama_kv_cache_unified: size = 18432.00 MiB (131072 cells,  36 layers,  1/ 1 seqs), "
            "K (f16): 9216.00 MiB, V (f16): 9216.00 MiB",
        ]
    )
    assert r.kv == (KvLine("target", "kv", 18432.0, 131072, 1, 36, "f16", 9216.0, "f16", 9216.0),)


# --- iSWA, draft, recurrent -----------------------------------------------------------


def test_iswa_prints_two_kv_blocks() -> None:
    r = parse("gemma3-iswa.log")
    assert kv(r) == {
        "kv_full": KvLine("target", "kv_full", 1024.0, 8192, 2, 8, "f16", 512.0, "f16", 512.0),
        "kv_swa": KvLine("target", "kv_swa", 960.0, 1536, 2, 40, "f16", 480.0, "f16", 480.0),
    }
    # the two caches' CUDA0 KV buffers add up to one line per (context, kind, backend)
    assert buffers(r)[("KV", "CUDA0")] == 1984.0
    assert r.total_mib(kind="KV") == pytest.approx(sum(k.size_mib for k in r.kv))
    assert params(r) == {
        "n_ctx": 16384,
        "n_ctx_seq": 8192,
        "n_seq_max": 2,
        "n_batch": 2048,
        "n_ubatch": 512,
        "flash_attn": "enabled",
        "kv_unified": False,
        "n_slots": 2,
        "n_ctx_slot": 8192,
        "offloaded_layers": (49, 49),
    }


TARGET_DRAFT = {
    "target": {
        ("model", "CPU_Mapped"): 417.66,
        ("model", "CUDA0"): 18508.35,
        ("output", "CUDA_Host"): 0.58,
        ("KV", "CUDA0"): 2176.00,
        ("compute", "CUDA0"): 307.00,
        ("compute", "CUDA_Host"): 42.01,
    },
    "draft": {
        ("model", "CPU_Mapped"): 137.94,
        ("model", "CUDA0"): 500.79,
        ("output", "CUDA_Host"): 0.58,
        ("KV", "CUDA0"): 192.00,
        ("compute", "CUDA0"): 298.50,
        ("compute", "CUDA_Host"): 34.01,
    },
}


def check_target_and_draft(r: LlamaLogReport) -> None:
    assert buffers(r, "target") == TARGET_DRAFT["target"]
    assert buffers(r, "draft") == TARGET_DRAFT["draft"]
    assert kv(r, "target") == {
        "kv": KvLine("target", "kv", 2176.0, 16384, 1, 64, "q8_0", 1088.0, "q8_0", 1088.0)
    }
    assert kv(r, "draft") == {
        "kv": KvLine("draft", "kv", 192.0, 16384, 1, 24, "f16", 96.0, "f16", 96.0)
    }
    assert r.offloaded_layers == (65, 65)  # the target's, not the draft's 25/25
    assert r.n_ctx == 16384
    assert r.total_mib(kind="KV", context="draft") == 192.0
    assert r.total_mib(device="CUDA0", context=None) == pytest.approx(
        18508.35 + 2176 + 307 + 500.79 + 192 + 298.5
    )


def test_draft_model_set_follows_the_target_set() -> None:
    check_target_and_draft(parse("draft-model.log"))


def test_draft_model_without_server_markers() -> None:
    """llama-speculative / a grep'd log: the second full set is the draft's."""
    lines = [ln for ln in fixture_lines("draft-model.log") if "load_model:" not in ln]
    check_target_and_draft(parse_llama_log(lines))


def test_mtp_context_on_the_target_weights() -> None:
    lines = [ln for ln in fixture_lines("draft-model.log") if "draft" not in ln]
    cut = next(i for i, ln in enumerate(lines) if "loaded meta data" in ln and "0.5B" in ln)
    lines = lines[:cut] + [
        "srv    load_model: creating MTP draft context against the target model '/m.gguf'",
        "llama_context: constructing llama_context",
        "llama_context: n_seq_max     = 1",
        "llama_context: n_ctx         = 16384",
        "llama_context:  CUDA_Host  output buffer size =     0.58 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =    34.00 MiB",
        "llama_kv_cache: size =   34.00 MiB ( 16384 cells,   1 layers,  1/1 seqs), "
        "K (q8_0):   17.00 MiB, V (q8_0):   17.00 MiB",
        "sched_reserve:      CUDA0 compute buffer size =   301.00 MiB",
    ]
    r = parse_llama_log(lines)
    assert buffers(r, "target") == TARGET_DRAFT["target"]
    assert buffers(r, "mtp") == {
        ("output", "CUDA_Host"): 0.58,
        ("KV", "CUDA0"): 34.0,
        ("compute", "CUDA0"): 301.0,
    }
    assert kv(r, "mtp")["kv"].layers == 1
    assert r.n_ctx == 16384 and r.n_seq_max == 1


def test_hybrid_recurrent_log() -> None:
    r = parse("hybrid-recurrent.log")
    assert buffers(r) == {
        ("model", "CPU_Mapped"): 2286.14,
        ("model", "Vulkan1"): 3393.11,
        ("output", "Vulkan_Host"): 0.95,
        ("KV", "CPU"): 96.00,
        ("KV", "Vulkan1"): 160.00,
        ("RS", "CPU"): 20.94,
        ("RS", "Vulkan1"): 29.31,
        ("compute", "Vulkan1"): 498.00,
        ("compute", "Vulkan_Host"): 128.16,
    }
    assert kv(r) == {
        "kv": KvLine("target", "kv", 256.0, 8192, 1, 8, "f16", 128.0, "f16", 128.0),
        "rs": KvLine("target", "rs", 50.25, 1, None, 32, "f32", 2.25, "f32", 48.0),
    }
    assert r.total_mib(kind="RS") == pytest.approx(50.25)
    assert params(r) == {
        "n_ctx": 8192,
        "n_ctx_seq": 8192,
        "n_seq_max": None,
        "n_batch": None,
        "n_ubatch": None,
        "flash_attn": None,
        "kv_unified": False,
        "n_slots": 1,
        "n_ctx_slot": 8192,
        "offloaded_layers": (20, 33),
    }
    assert r.total_mib(device="Vulkan1") == pytest.approx(3393.11 + 160 + 29.31 + 498)


def test_older_recurrent_format() -> None:
    r = parse_llama_log(
        [
            "llama_memory_recurrent:      CUDA0 RS buffer size =   251.25 MiB",
            "llama_memory_recurrent: size =  251.25 MiB (     4 cells,  40 layers,  4 seqs), "
            "R (f32):   11.25 MiB, S (f32):  240.00 MiB",
        ]
    )
    assert r.kv == (KvLine("target", "rs", 251.25, 4, None, 40, "f32", 11.25, "f32", 240.0),)
    assert buffers(r) == {("RS", "CUDA0"): 251.25}


def test_several_weight_buffers_on_one_backend_add_up() -> None:
    """--no-mmap with partial offload prints two CPU model buffers; both are real."""
    r = parse_llama_log(
        [
            "load_tensors: offloaded 29/65 layers to GPU",
            "load_tensors:          CPU model buffer size =   417.66 MiB",
            "load_tensors:        CUDA0 model buffer size =  8128.64 MiB",
            "load_tensors:          CPU model buffer size = 10379.71 MiB",
            "llama_context: n_ctx         = 8192",
            "llama_context:      CUDA0 compute buffer size =   916.08 MiB",
            "llama_context:      CUDA0 compute buffer size =   916.08 MiB",  # re-reserve: replaces
        ]
    )
    assert buffers(r) == {
        ("model", "CPU"): pytest.approx(10797.37),
        ("model", "CUDA0"): 8128.64,
        ("compute", "CUDA0"): 916.08,
    }


def test_projector_compute_buffer_is_not_the_target_context() -> None:
    lines = fixture_lines("current-prefixed.log") + [
        "clip_model_loader: model size:     811.79 MiB",
        "alloc_compute_meta:      CUDA0 compute buffer size =   397.72 MiB",
    ]
    assert buffers(parse_llama_log(lines))[("compute", "CUDA0")] == 306.75


def test_real_cpu_capture_with_draft() -> None:
    """A real llama-server -lv 4 log: the draft is announced by common_speculative_init_result."""
    r = parse("real-cpu-draft.log")
    assert buffers(r, "target") == {
        ("model", "CPU"): 94.04,
        ("output", "CPU"): 0.01,
        ("KV", "CPU"): 8.0,
        ("compute", "CPU"): 26.51,
    }
    assert buffers(r, "draft") == {
        ("model", "CPU"): 1.56,
        ("output", "CPU"): 0.01,
        ("KV", "CPU"): 1.0,
        ("compute", "CPU"): 4.01,
    }
    assert kv(r) == {"kv": KvLine("target", "kv", 8.0, 2048, 1, 4, "f16", 4.0, "f16", 4.0)}
    assert kv(r, "draft") == {"kv": KvLine("draft", "kv", 1.0, 2048, 1, 2, "f16", 0.5, "f16", 0.5)}
    assert params(r) == {
        "n_ctx": 2048,
        "n_ctx_seq": 2048,
        "n_seq_max": 1,
        "n_batch": 2048,
        "n_ubatch": 512,
        "flash_attn": "enabled",  # "resolve_fused_ops: Flash Attention enabled"
        "kv_unified": False,
        "n_slots": 1,
        "n_ctx_slot": 2048,
        "offloaded_layers": None,
    }
    # fit printed two tables at start (target, draft); the shutdown one is the last
    assert r.breakdown == (BreakdownRow("Host", None, None, 128, 94, 8, 26, None),)
    assert r.oom == ()
    assert r.total_mib(device="host") == pytest.approx(94.04 + 0.01 + 8 + 26.51)


def test_real_cpu_capture_iswa() -> None:
    r = parse("real-cpu-gemma3-iswa.log")
    assert kv(r) == {
        "kv_full": KvLine("target", "kv_full", 8.0, 2048, 2, 1, "f16", 4.0, "f16", 4.0),
        "kv_swa": KvLine("target", "kv_swa", 15.0, 768, 2, 5, "f16", 7.5, "f16", 7.5),
    }
    assert buffers(r) == {
        ("model", "CPU"): 139.10,
        ("output", "CPU"): 0.02,
        ("KV", "CPU"): 23.0,
        ("compute", "CPU"): 27.27,
    }
    assert (r.n_ctx, r.n_ctx_seq, r.n_seq_max, r.kv_unified, r.n_slots) == (4096, 2048, 2, False, 2)
    assert r.breakdown == (BreakdownRow("Host", None, None, 189, 139, 23, 27, None),)


def test_a_whole_log_as_one_string() -> None:
    text = (FIXTURES / "real-cpu-draft.log").read_text()
    assert parse_llama_log(text) == parse_llama_log(text.splitlines())


# --- breakdown table ------------------------------------------------------------------


def test_common_memory_breakdown_table() -> None:
    r = parse("breakdown-common.log")
    assert r.breakdown == (
        BreakdownRow("CUDA0 (RTX 4090)", 24077, 945, 19187, 17904, 384, 898, 3945),
        BreakdownRow("Host", None, None, 58271, 58259, 0, 12, None),
    )
    gpu, host = r.breakdown
    assert gpu.name == "CUDA0" and host.name == "Host"
    assert gpu.total == gpu.free + gpu.self + gpu.unaccounted
    # each column is rounded down to whole MiB on its own, so the parts may sum 1-2 short
    assert 0 <= gpu.self - (gpu.model + gpu.context + gpu.compute) <= 2
    assert host.self == host.model + host.context + host.compute


def test_older_llama_memory_breakdown_table() -> None:
    r = parse("breakdown-llama-old.log")
    assert r.breakdown == (
        BreakdownRow("MTL0 (Apple M5)", 18186, 10905, 7280, 6095, 786, 398, 0),
        BreakdownRow("Host", None, None, 5556, 5440, 0, 116, None),
    )
    gpu = r.breakdown[0]
    assert gpu.total == gpu.free + gpu.self + gpu.unaccounted + 1  # rounded MiB columns


def test_breakdown_keeps_the_last_table_and_unwraps_negative_unaccounted() -> None:
    r = parse_llama_log(
        [
            "common_memory_breakdown_print: | memory breakdown [MiB]  | total    free     self   "
            "model   context   compute       unaccounted |",
            "common_memory_breakdown_print: |   - CUDA0 (RTX 5060 Ti) | 15841 = 15630 + (15302 = "
            "14736 +      72 +     493) + 17592186029324 |",
            "common_memory_breakdown_print: |   - Host                |                   6371 =  "
            "6362 +       0 +       9                   |",
            "common_params_fit_impl: memory for test allocation by device:",
        ]
    )
    gpu = r.breakdown[0]
    assert gpu.unaccounted == 17592186029324 - 2**44 == -15092
    assert abs(gpu.total - (gpu.free + gpu.self + gpu.unaccounted)) <= 1
    r = parse_llama_log(
        fixture_lines("breakdown-llama-old.log") + fixture_lines("breakdown-common.log")
    )
    assert [row.name for row in r.breakdown] == ["CUDA0", "Host"]


def test_breakdown_rows_without_function_prefix() -> None:
    r = parse_llama_log(
        [
            "| memory breakdown [MiB] | total    free    self   model   context   compute    "
            "unaccounted |",
            "|   - CUDA0 (RTX 3090)   | 24576 = 11121 + (13424 = 11876 +     516 +    1032) +   "
            "       30 |",
            "|   - CUDA1 (RTX 3090)   | 24576 =  9877 + (14668 = 13120 +     516 +    1032) +   "
            "       24 |",
            "|   - Host               |                   316 =   304 +       0 +      12       "
            "         |",
        ]
    )
    assert [row.device for row in r.breakdown] == ["CUDA0 (RTX 3090)", "CUDA1 (RTX 3090)", "Host"]
    assert r.breakdown[1].free == 9877


# --- OOM ------------------------------------------------------------------------------


def test_oom_lines_are_collected_without_prefix() -> None:
    r = parse("oom-cuda.log")
    assert r.oom == (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 40960.00 MiB on device 0: "
        "cudaMalloc failed: out of memory",
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 42949672960",
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer "
        "for kv cache",
    )
    assert r.offloaded_layers == (81, 81) and r.n_ctx == 131072
    assert r.kv == ()


@pytest.mark.parametrize(
    "line",
    [
        "CUDA error: out of memory",
        "ggml_gallocr_reserve_n_impl: failed to allocate CUDA0 buffer of size 11488208896",
        "graph_reserve: failed to allocate compute buffers",
        "sched_reserve: compute buffer allocation failed, retrying without pipeline parallelism",
        "llama_kv_cache_init: failed to allocate buffer for kv cache",
        "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache",
        "llama_model_load: error loading model: unable to allocate Vulkan0 buffer",
        "ggml_vulkan: Device memory allocation of size 1879048192 failed.",
        "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
        "ggml_aligned_malloc: insufficient memory (attempted to allocate 36000.00 MB)",
        "ggml_cuda_host_malloc: failed to allocate 10379.71 MiB of pinned memory: out of memory",
    ],
)
def test_oom_line_kinds(line: str) -> None:
    assert parse_llama_log(["0.01.000.000 E " + line + "\r\n"]).oom == (line,)


@pytest.mark.parametrize(
    "line",
    [
        "ggml_backend_sched_alloc_splits: failed to allocate graph, reserving (backend_ids_changed",
        "common_params_fit_impl: projected to use 5856 MiB of device memory vs. 5173 MiB of free",
        "srv          init: prompt cache is enabled, size limit: 8192 MiB",
        "ggml_backend_cuda_get_available_uma_memory: final available_memory_kb: 127697544",
    ],
)
def test_not_oom(line: str) -> None:
    assert parse_llama_log([line]).oom == ()


def test_oom_lines_are_bounded() -> None:
    parser = LlamaLogParser()
    for i in range(1000):
        parser.feed(f"alloc_tensor_range: failed to allocate CUDA0 buffer of size {i}")
    oom = parser.report().oom
    assert len(oom) == 100 and oom[-1].endswith(" 999")


# --- vLLM -----------------------------------------------------------------------------


def test_vllm_startup_log() -> None:
    r = parse_vllm_log(fixture_lines("vllm-startup.log"))
    assert (r.model_load_gib, r.kv_cache_gib, r.kv_cache_tokens, r.max_concurrency) == (
        15.2683,
        4.21,
        30640,
        0.94,
    )


def test_vllm_older_and_merged_lines() -> None:
    r = parse_vllm_log(
        [
            "INFO 08-01 10:00:00 model_runner.py:1008] Loading model weights took 9.1948 GB",
            "INFO 08-01 10:00:05 worker.py:262] Memory profiling takes 4.1 seconds ... the rest of "
            "the memory reserved for KV Cache is 12.34GiB.",
            "(EngineCore_DP0 pid=7) INFO [kv_cache_utils.py:1087] GPU KV cache size: "
            "1,234,560 tokens, Maximum concurrency for 131,072 tokens per request: 9.42x",
        ]
    )
    assert (r.model_load_gib, r.kv_cache_gib, r.kv_cache_tokens, r.max_concurrency) == (
        9.1948,
        12.34,
        1234560,
        9.42,
    )
    assert parse_vllm_log(["Available KV cache memory: -1.50 GiB"]).kv_cache_gib == -1.5
    empty = parse_vllm_log(["hello", "", "GPU KV cache size: lots tokens"])
    assert empty.model_load_gib is empty.kv_cache_tokens is empty.max_concurrency is None


# --- robustness -----------------------------------------------------------------------


def test_crlf_ansi_and_file_objects() -> None:
    text = "".join(fixture_lines("current-prefixed.log"))
    coloured = "\r\n".join(
        "\x1b[32m" + line + "\x1b[0m" if "MiB" in line else line for line in text.splitlines()
    )
    r = parse_llama_log(io.StringIO(coloured))
    assert r == parse("current-prefixed.log")
    as_bytes = parse_llama_log(io.BytesIO(coloured.encode()))  # type: ignore[arg-type]
    assert as_bytes == r


def test_streaming_report_at_any_point() -> None:
    parser = LlamaLogParser()
    lines = fixture_lines("draft-model.log")
    for i, line in enumerate(lines):
        parser.feed(line)
        if i == len(lines) // 2:
            mid = parser.report()
    assert mid.total_mib(context="draft") < parser.report().total_mib(context="draft")
    assert parser.report() == parse("draft-model.log")


def test_malformed_numbers_and_odd_lines_are_skipped() -> None:
    r = parse_llama_log(
        [
            "load_tensors:        CUDA0 model buffer size =     .... MiB",
            "load_tensors:        CUDA0 model buffer size =  1.2.3.4 MiB",
            "load_tensors:        CUDA1 model buffer size =   636,18 MiB",  # comma locale
            "offloaded " + "9" * 5000 + "/3 layers to GPU",
            None,
            b"load_tensors:        CUDA2 model buffer size =    10.00 MiB\n",
            "llama_context: n_ctx         = lots",
            "llama_context: n_ctx         = " + "9" * 5000,
            "llama_kv_cache: size = nan MiB (  1 cells,  1 layers,  1/1 seqs)",
            "x" * 1_000_000 + " buffer size = 5.00 MiB",
            "|" * 100_000,
            "\x00\xff\ufffd",
        ]
    )  # type: ignore[list-item]
    assert buffers(r) == {("model", "CUDA1"): 636.18, ("model", "CUDA2"): 10.0}
    assert r.n_ctx is None and r.kv == () and r.offloaded_layers is None


@settings(deadline=500, max_examples=200)
@given(st.lists(st.binary(max_size=300), max_size=40))
def test_garbage_bytes_never_raise(chunks: list[bytes]) -> None:
    lines = [c.decode("utf-8", "replace") for c in chunks]
    assert isinstance(parse_llama_log(lines), LlamaLogReport)
    parse_vllm_log(lines)


KEYWORDS = [
    "load_tensors:",
    "llama_kv_cache:",
    " size = ",
    "MiB",
    "cells,",
    "layers,",
    "seqs)",
    "buffer size =",
    " KV ",
    " model ",
    "|",
    " = ",
    "(",
    ")",
    "+",
    "- CUDA0",
    "memory breakdown",
    "n_ctx",
    "offloaded ",
    "/",
    "layers to GPU",
    "loading model",
    "draft",
    "creating",
    "SWA",
    "0.00",
    "12.5",
    "1,5",
    "\x1b[0m",
    "\r",
    "GiB",
    "took",
    "tokens",
]


@settings(deadline=500, max_examples=300)
@given(
    st.lists(
        st.lists(st.one_of(st.sampled_from(KEYWORDS), st.text(max_size=8)), max_size=12).map(
            "".join
        ),
        max_size=30,
    )
)
def test_keyword_soup_never_raises(lines: list[str]) -> None:
    r = parse_llama_log(lines)
    for b in r.buffers:
        assert isinstance(b, BufferLine) and b.mib >= 0
    parse_vllm_log(lines)


def test_100k_noise_lines_parse_fast() -> None:
    rng = random.Random(7)
    noise_templates = [
        "0.{:02d}.{:03d}.{:03d} I srv  update_slots: all slots are idle",
        "slot print_timing: id  0 | task {} | prompt eval time = 3409.96 ms / 159 tokens",
        "llama_model_loader: - kv  {}:  general.architecture str = qwen3",
        "print_info: n_embd           = {}",
        "srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 {}",
    ]
    noise = [
        rng.choice(noise_templates).format(*(rng.randrange(60) for _ in range(3)))
        for _ in range(100_000)
    ]
    memory = fixture_lines("draft-model.log")
    lines = noise[:50_000] + memory + noise[50_000:]
    start = time.process_time()
    r = parse_llama_log(lines)
    elapsed = time.process_time() - start
    check_target_and_draft(r)
    assert elapsed < 5.0, elapsed  # CPU seconds: a guard against a quadratic parse
