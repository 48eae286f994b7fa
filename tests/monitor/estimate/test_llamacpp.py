"""The estimator on GGUF headers written with gguf's writer in real shapes.

Expected figures are llama.cpp's own, measured with llama-fit-params and recorded in
../shared/research/estimation.md section 8 (Qwen3-8B shape) and section 1b (Gemma3-27B iSWA);
KV/context to 0.01 MiB, compute within 10 %.
"""

from __future__ import annotations

import gguf_models as g
import pytest

from monitor.estimate import DeviceInfo, EstimateError, estimate, estimate_command
from monitor.estimate.kv import context
from monitor.servers.spec import LaunchSpec

MIB, GIB = 1024**2, 1024**3


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("models")
    out: dict[str, str] = {}
    md, tensors = g.qwen3_8b()
    out["qwen3"] = str(
        g.write_model(d / "qwen3-8b.gguf", "qwen3", md, tensors, vocab_size=151936)[0]
    )
    gemma = {
        f"gemma3.{k}": v
        for k, v in {
            "block_count": 62,
            "context_length": 131072,
            "embedding_length": 5376,
            "feed_forward_length": 21504,
            "attention.head_count": 32,
            "attention.head_count_kv": 16,
            "attention.key_length": 128,
            "attention.value_length": 128,
            "attention.sliding_window": 1024,
        }.items()
    }
    gemma_t = g.dense_tensors(
        n_layer=62,
        n_embd=5376,
        n_head=32,
        n_head_kv=16,
        head_dim=128,
        n_ff=21504,
        n_vocab=262144,
        ggml_type=g.Q4_0,
        output=False,
    )
    out["gemma3"] = str(
        g.write_model(d / "gemma3-27b.gguf", "gemma3", gemma, gemma_t, vocab_size=262144)[0]
    )
    mla = {
        f"deepseek2.{k}": v
        for k, v in {
            "block_count": 61,
            "context_length": 163840,
            "embedding_length": 7168,
            "feed_forward_length": 18432,
            "attention.head_count": 128,
            "attention.head_count_kv": 1,
            "attention.key_length": 576,
            "attention.value_length": 512,
            "attention.key_length_mla": 192,
            "attention.value_length_mla": 128,
            "attention.kv_lora_rank": 512,
        }.items()
    }
    small = g.dense_tensors(
        n_layer=2, n_embd=256, n_head=2, n_head_kv=1, head_dim=128, n_ff=512, n_vocab=1024
    )
    out["deepseek"] = str(
        g.write_model(d / "deepseek.gguf", "deepseek2", mla, small, vocab_size=129280)[0]
    )
    old = {k: v for k, v in mla.items() if "_mla" not in k}
    old.update(
        {
            "deepseek2.attention.head_count_kv": 128,
            "deepseek2.attention.key_length": 192,
            "deepseek2.attention.value_length": 128,
        }
    )
    out["deepseek_old"] = str(
        g.write_model(d / "deepseek-old.gguf", "deepseek2", old, small, vocab_size=129280)[0]
    )
    nxt = {
        f"qwen3next.{k}": v
        for k, v in {
            "block_count": 48,
            "context_length": 262144,
            "embedding_length": 2048,
            "feed_forward_length": 5120,
            "attention.head_count": 16,
            "attention.head_count_kv": 2,
            "attention.key_length": 256,
            "attention.value_length": 256,
            "full_attention_interval": 4,
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 4096,
            "ssm.state_size": 128,
            "ssm.group_count": 16,
            "ssm.time_step_rank": 32,
        }.items()
    }
    out["qwen3next"] = str(
        g.write_model(d / "qwen3next.gguf", "qwen3next", nxt, small, vocab_size=151936)[0]
    )
    bert = {
        f"bert.{k}": v
        for k, v in {
            "block_count": 12,
            "context_length": 512,
            "embedding_length": 768,
            "feed_forward_length": 3072,
            "attention.head_count": 12,
            "pooling_type": 1,
        }.items()
    }
    out["bert"] = str(
        g.write_model(
            d / "bert.gguf",
            "bert",
            bert,
            g.dense_tensors(
                n_layer=12,
                n_embd=768,
                n_head=12,
                n_head_kv=12,
                head_dim=64,
                n_ff=3072,
                n_vocab=30522,
                ggml_type=g.F16,
                qk_norm=False,
                output=False,
            ),
            vocab_size=30522,
        )[0]
    )
    md_small, tensors_small = g.qwen3_8b(n_layer=4, n_vocab=151936)
    md_small["qwen3.block_count"] = 4
    out["draft"] = str(
        g.write_model(d / "draft.gguf", "qwen3", md_small, tensors_small, vocab_size=151936)[0]
    )
    parts = g.write_model(d / "split.gguf", "qwen3", md, tensors, vocab_size=151936, split=3)
    out["split"] = str(parts[0])
    return out


def kv_mib(est) -> float:  # noqa: ANN001
    return (est.total_bytes("kv") + est.total_bytes("kv_swa")) / MIB


def est_cmd(models: dict[str, str], model: str, *args: str, **kw):  # noqa: ANN003
    return estimate_command(["llama-server", "-m", models[model], *args], **kw)


# estimation.md section 8: (args, context MiB, compute MiB) from llama-fit-params, CPU.
QWEN3_TABLE = [
    (["-c", "8192", "-np", "1", "-fa", "on"], 1152, 312),
    (["-c", "8192", "-np", "1", "-fa", "off"], 1152, 572),
    (["-c", "8192", "-np", "4", "-fa", "off"], 1152, 312),
    (["-c", "8192", "-np", "16", "-fa", "off"], 1152, 312),
    (["-c", "8192", "-np", "24", "-fa", "on"], 1728, None),
    (["-c", "32768", "-np", "1", "-fa", "off"], 4608, 2156),
    (["-c", "32768", "-np", "1", "-fa", "on"], 4608, 312),
    (["-c", "8192", "-np", "1", "-fa", "off", "-ub", "2048"], 1152, 2288),
    (["-c", "8192", "-np", "1", "-fa", "on", "-ub", "2048"], 1152, 1251),
    (["-c", "8192", "-np", "1", "-fa", "off", "-b", "8192", "-ub", "8192"], 1152, 9152),
    (["-c", "8192", "-np", "1", "-fa", "on", "-b", "8192", "-ub", "8192"], 1152, 5004),
    (["-c", "8192", "-np", "1", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"], 612, None),
    (["-c", "8192", "-np", "1", "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"], 324, None),
]


@pytest.mark.parametrize(("args", "context_mib", "compute_mib"), QWEN3_TABLE)
def test_qwen3_8b_matches_llama_fit_params(
    models: dict[str, str], args: list[str], context_mib: int, compute_mib: int | None
) -> None:
    # llama-fit-params reserves logits for n_batch outputs (llama.cpp's library default)
    est = est_cmd(models, "qwen3", *args, outputs="batch")
    assert kv_mib(est) == pytest.approx(context_mib, abs=0.01)
    if compute_mib is not None:
        assert est.total_bytes("compute") / MIB == pytest.approx(compute_mib, rel=0.10)
    assert est.total_bytes("weights") / MIB == pytest.approx(8300, abs=1)  # fit's "model"


def test_per_slot_rounding_up_of_non_unified_streams(models: dict[str, str]) -> None:
    est = est_cmd(models, "qwen3", "-c", "8192", "-np", "24")
    assert (est.n_ctx_seq, est.n_stream, est.cells) == (512, 24, 12288)
    unified = est_cmd(models, "qwen3", "-c", "8192", "-np", "24", "-kvu")
    assert (unified.n_ctx_seq, unified.n_stream, unified.cells) == (8192, 1, 8192)


def test_defaults_four_unified_slots_and_pad_to_256(models: dict[str, str]) -> None:
    est = est_cmd(models, "qwen3", "-c", "5000")
    assert (est.n_seq_max, est.kv_unified, est.n_ctx_seq, est.cells) == (4, True, 5120, 5120)


# estimation.md section 1b: Gemma3-27B shape, -c 32768, FA on: context MiB.
GEMMA_TABLE = [
    (["-np", "1"], 3184),
    (["-np", "4"], 5056),
    (["-np", "16"], 12544),
    (["-np", "4", "-ub", "2048"], 7552),
    (["-np", "4", "--swa-full"], 15872),
]


@pytest.mark.parametrize(("args", "context_mib"), GEMMA_TABLE)
def test_gemma3_27b_iswa(models: dict[str, str], args: list[str], context_mib: int) -> None:
    est = est_cmd(models, "gemma3", "-c", "32768", "-fa", "on", *args)
    assert kv_mib(est) == pytest.approx(context_mib, abs=0.01)
    assert est.total_bytes("kv") / MIB == pytest.approx(2560, abs=0.01)  # 10 full layers


def test_mla_stores_k_only_and_old_gguf_falls_back_to_mha(models: dict[str, str]) -> None:
    est = est_cmd(models, "deepseek", "-c", "8192", "-np", "1")
    assert kv_mib(est) == pytest.approx(61 * 576 * 2 * 8192 / MIB, abs=0.01)  # 549 MiB
    assert "MLA" in next(c.formula for c in est.components if c.name == "kv")
    old = est_cmd(models, "deepseek_old", "-c", "8192", "-np", "1")
    assert kv_mib(old) == pytest.approx(61 * 128 * (192 + 128) * 2 * 8192 / MIB, abs=0.01)
    assert kv_mib(old) / kv_mib(est) > 25


def test_qwen3_next_hybrid_state_per_sequence(models: dict[str, str]) -> None:
    est = est_cmd(models, "qwen3next", "-c", "8192", "-np", "2")
    # 48 layers, every 4th full attention: 12 KV layers, 36 recurrent
    assert kv_mib(est) == pytest.approx(12 * 2 * 2 * 256 * 2 * 8192 / MIB, abs=0.01)
    per_layer_seq = 4 * (3 * (4096 + 2 * 16 * 128) + 128 * 4096)  # r 24,576 + s 524,288 f32
    assert est.total_bytes("rs") == 36 * per_layer_seq * 2
    np8 = est_cmd(models, "qwen3next", "-c", "8192", "-np", "8")
    assert np8.total_bytes("rs") == 4 * est.total_bytes("rs")  # scales with slots, not ctx


def test_rollback_snapshots_only_where_llama_cpp_keeps_them(models: dict[str, str]) -> None:
    """qwen3next is not in llm_arch_supports_rs_rollback: llama_context clamps n_rs_seq
    to 0, so draft-mtp adds no state rows there (the qwen35 tier fixtures check the arch
    that keeps them: rs x (1 + n_max))."""
    plain = est_cmd(models, "qwen3next", "-c", "8192", "-np", "2")
    mtp = est_cmd(
        models, "qwen3next", "-c", "8192", "-np", "2", "--spec-type", "draft-mtp",
        "--spec-draft-n-max", "8",
    )  # fmt: skip
    assert mtp.total_bytes("rs") == plain.total_bytes("rs")
    assert mtp.total_bytes("compute") == plain.total_bytes("compute")


def test_delta_net_output_goes_after_the_conv_tensors_once_it_outgrows_their_hole() -> None:
    """compute.delta_net_peak_bytes on Qwen3.5-35B-A3B's delta net (32 value heads of 128,
    16 key heads, conv 4): the output of K snapshots fits the freed conv tensors' hole up
    to K = 7 (exactly its size), then sits after them and the peak grows by one state per
    snapshot (logged: 76.02 MiB at n_max 6, 88.21 at 7, qwen35moe-mtp-nmax6/7.json)."""
    from dataclasses import replace

    from monitor.estimate.compute import delta_net_peak_bytes
    from monitor.estimate.shape import DeltaNetDims

    dims = DeltaNetDims(conv_kernel=4, d_inner=4096, d_state=128, n_group=16, n_v_heads=32)
    shape = shape_stub(n_embd=2048, delta_net=dims, rs_rollback=True)
    mask = 2 * 512 * 4096

    def peak(n_rs_seq: int, n_seqs: int = 1) -> float:
        return delta_net_peak_bytes(shape, 512, mask, n_seqs, n_rs_seq) / MIB

    base = peak(0)
    assert peak(1) == peak(6) == base  # inside the hole
    assert peak(7) == pytest.approx(base + 4 * 4096 * (512 + 8 * 128) / MIB)
    assert peak(8) - peak(7) == pytest.approx(2.0)  # one 128 x 128 x 32 f32 state
    assert peak(7, n_seqs=2) > peak(7)  # snapshots are per sequence
    assert delta_net_peak_bytes(replace(shape, rs_rollback=False), 512, mask, 1, 7) == (base * MIB)
    assert delta_net_peak_bytes(replace(shape, delta_net=None), 512, mask, 1, 7) == 0


def test_bert_embedder_has_no_kv(models: dict[str, str]) -> None:
    est = est_cmd(
        models, "bert", "--embedding", "-c", "8192", "-np", "16", "-ub", "8192", "-b", "8192"
    )
    assert kv_mib(est) == 0
    assert any("encoder-only" in n for n in est.notes)
    assert est.total_bytes("compute") > 0


def test_llama_server_reserves_logits_only_for_its_slots(models: dict[str, str]) -> None:
    """server_output_limits: np x (1 + n_draft) logit rows, not n_batch (the 4 x 151936 x
    512 B of f32 logits fit-params reserves are not there in llama-server)."""
    server = est_cmd(models, "qwen3", "-c", "8192", "-np", "1", "-fa", "on")
    batch = est_cmd(models, "qwen3", "-c", "8192", "-np", "1", "-fa", "on", outputs="batch")
    body = 4 * 512 * (3 * 12288 + 4 * 4096) + 2 * 512 * 8192 + 20 * 512
    assert server.total_bytes("compute") == body
    assert batch.total_bytes("compute") > 2.5 * body


def test_draft_model_kv_has_the_targets_cells_in_f16(models: dict[str, str]) -> None:
    est = est_cmd(
        models,
        "qwen3",
        "-c",
        "8192",
        "-np",
        "4",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-fa",
        "on",
        "-md",
        models["draft"],
    )
    draft_kv = est.total_bytes("draft_kv")
    assert draft_kv == 4 * 2 * 1024 * 2 * 8192  # 4 layers, K+V, 8 heads x 128, f16, 8192
    assert est.total_bytes("draft_weights") > 0 and est.total_bytes("draft_compute") > 0
    assert any("not inherited" in n for n in est.notes)
    q = est_cmd(
        models,
        "qwen3",
        "-c",
        "8192",
        "-np",
        "4",
        "-fa",
        "on",
        "-md",
        models["draft"],
        "-ctkd",
        "q4_0",
        "-ctvd",
        "q4_0",
    )
    assert q.total_bytes("draft_kv") == 4 * 2 * (1024 // 32 * 18) * 8192


def test_split_model_weights_are_summed_over_files(models: dict[str, str]) -> None:
    one = est_cmd(models, "qwen3", "-c", "4096")
    split = est_cmd(models, "split", "-c", "4096")
    assert split.total_bytes("weights") == one.total_bytes("weights")
    assert kv_mib(split) == kv_mib(one)


def test_placement_over_two_gpus_with_ngl_and_tensor_split(models: dict[str, str]) -> None:
    gpus = [DeviceInfo("gpu0", 24 * GIB, 20 * GIB), DeviceInfo("gpu1", 24 * GIB, 20 * GIB)]
    est = est_cmd(
        models, "qwen3", "-c", "8192", "-np", "1", "-ngl", "99", "-ts", "3,1", devices=gpus
    )
    kv0, kv1 = est.total_bytes("kv", "gpu0"), est.total_bytes("kv", "gpu1")
    # llama_model::load_tensors: layer il -> upper_bound(cumulative splits, il / 37), so
    # 3:1 over 36 layers + output puts layers 0-27 on gpu0, 28-35 and the output on gpu1
    assert (kv0, kv1) == (28 * 32 * MIB, 8 * 32 * MIB)
    assert est.total_bytes("weights", "host") > 0  # token_embd stays on the CPU
    partial = est_cmd(models, "qwen3", "-c", "8192", "-np", "1", "-ngl", "10", devices=gpus)
    assert partial.total_bytes("kv", "host") == 27 * 32 * MIB  # 27 of 36 layers on the CPU
    nkvo = est_cmd(models, "qwen3", "-c", "8192", "-np", "1", "-nkvo", devices=gpus)
    assert nkvo.total_bytes("kv", "host") == 1152 * MIB
    assert est.total_bytes("overhead") == 2 * 300 * MIB


def test_cpu_weights_are_page_cache_unless_loaded_anonymously(models: dict[str, str]) -> None:
    mmap = est_cmd(models, "qwen3", "-c", "4096")
    anon = est_cmd(models, "qwen3", "-c", "4096", "--no-mmap")
    assert {c.residency for c in mmap.components if c.name == "weights"} == {"file"}
    assert {c.residency for c in anon.components if c.name == "weights"} == {"anon"}


def test_no_ctx_with_fit_takes_the_training_context_times_streams(models: dict[str, str]) -> None:
    est = est_cmd(models, "qwen3", "-np", "4")
    assert est.cells == 40960 * 4  # n_ctx_train x 4 streams (common/fit.cpp, PR #27496)
    assert any("free minus" in n for n in est.notes)
    fixed = est_cmd(models, "qwen3", "-np", "4", "-fit", "off")
    assert fixed.cells == 40960


def test_host_growth_is_reported_but_not_in_the_load_total(models: dict[str, str]) -> None:
    est = est_cmd(models, "gemma3", "-c", "32768", "-np", "4", "-fa", "on")
    assert est.total_bytes("cache_ram", include_growth=True) == 8192 * MIB
    assert est.total_bytes("checkpoints", include_growth=True) > 0
    assert est.total_bytes("cache_ram") == 0


def test_quantized_v_without_flash_attention_is_an_error(models: dict[str, str]) -> None:
    with pytest.raises(EstimateError, match="needs flash attention"):
        est_cmd(models, "qwen3", "-c", "4096", "-ctv", "q8_0", "-fa", "off")
    with pytest.raises(EstimateError, match="unknown KV cache type"):
        est_cmd(models, "qwen3", "-c", "4096", "-ctk", "q3_x")


def test_vllm_takes_its_utilisation_share() -> None:
    spec = LaunchSpec(engine="vllm", model_name="Qwen/Qwen3-8B", gpu_memory_utilization=0.9)
    est = estimate(spec, [DeviceInfo("gpu0", 80 * GIB)])
    assert est.total_bytes("budget") == int(80 * GIB * 0.9)


def test_context_function_edge_cases() -> None:
    assert context(1, 1, False).n_ctx == 256
    assert context(4096, 8, True, n_ubatch=4096, n_batch=2048).n_ubatch == 2048  # ub <= b
    c = context(2048, 3, False)
    assert (c.n_ctx_seq, c.n_ctx) == (768, 2304)  # 2048/3 = 682 -> 768 per stream


def moe_model(path: str, n_layer: int = 4) -> str:
    md = {
        f"qwen3moe.{k}": v
        for k, v in {
            "block_count": n_layer,
            "context_length": 32768,
            "embedding_length": 2048,
            "feed_forward_length": 6144,
            "expert_feed_forward_length": 768,
            "expert_count": 128,
            "expert_used_count": 8,
            "attention.head_count": 32,
            "attention.head_count_kv": 4,
            "attention.key_length": 128,
            "attention.value_length": 128,
        }.items()
    }
    tensors = g.dense_tensors(
        n_layer=n_layer,
        n_embd=2048,
        n_head=32,
        n_head_kv=4,
        head_dim=128,
        n_ff=256,
        n_vocab=151936,
        ggml_type=g.Q4_0,
    )
    for il in range(n_layer):
        for part in ("gate", "up"):
            tensors.append((f"blk.{il}.ffn_{part}_exps.weight", (2048, 768, 128), g.Q4_0))
        tensors.append((f"blk.{il}.ffn_down_exps.weight", (768, 2048, 128), g.Q4_0))
    return str(g.write_model(path, "qwen3moe", md, tensors, vocab_size=151936)[0])


def test_cpu_moe_and_override_tensor_move_experts_but_not_kv(tmp_path) -> None:  # noqa: ANN001
    model = moe_model(str(tmp_path / "moe.gguf"))
    gpu = [DeviceInfo("gpu0", 24 * GIB, 20 * GIB)]
    expert_bytes = 4 * 3 * g.tensor_nbytes((2048, 768, 128), g.Q4_0)
    base = estimate_command(["llama-server", "-m", model, "-c", "4096", "-np", "1"], devices=gpu)
    cmoe = estimate_command(
        ["llama-server", "-m", model, "-c", "4096", "-np", "1", "-cmoe"], devices=gpu
    )
    moved = cmoe.total_bytes("weights", "host") - base.total_bytes("weights", "host")
    assert moved == expert_bytes
    assert cmoe.total_bytes("kv", "gpu0") == base.total_bytes("kv", "gpu0") > 0
    ncmoe = estimate_command(
        ["llama-server", "-m", model, "-c", "4096", "-np", "1", "-ncmoe", "1"], devices=gpu
    )
    assert (
        ncmoe.total_bytes("weights", "host") - base.total_bytes("weights", "host")
        == expert_bytes // 4
    )
    ot = estimate_command(
        [
            "llama-server",
            "-m",
            model,
            "-c",
            "4096",
            "-np",
            "1",
            "-ot",
            r"blk\.[23]\.ffn_.*_exps=CPU",
        ],
        devices=gpu,
    )
    assert (
        ot.total_bytes("weights", "host") - base.total_bytes("weights", "host") == expert_bytes // 2
    )
    assert any("expert" in n for n in ot.notes)


def test_no_ctx_note_gives_the_figure_for_free_memory(models: dict[str, str]) -> None:
    gpu = [DeviceInfo("gpu0", 24 * GIB, 10 * GIB)]
    est = est_cmd(models, "qwen3", "-np", "1", devices=gpu)
    assert any("with 10.0 GiB free now, that is up to 9.0 GiB" in n for n in est.notes)


def test_shared_kv_layers_and_mtp_layers(tmp_path) -> None:  # noqa: ANN001
    md, tensors = g.qwen3_8b(n_layer=4)
    md["qwen3.block_count"] = 4
    md["qwen3.attention.shared_kv_layers"] = 1
    path = str(g.write_model(tmp_path / "shared.gguf", "qwen3", md, tensors, vocab_size=151936)[0])
    est = estimate_command(["llama-server", "-m", path, "-c", "4096", "-np", "1"])
    assert est.total_bytes("kv") == 3 * 2 * 1024 * 2 * 4096  # the last layer reuses KV
    md2, _ = g.qwen3_8b(n_layer=4)
    md2["qwen3.block_count"] = 4
    md2["qwen3.nextn_predict_layers"] = 1
    path2 = str(g.write_model(tmp_path / "mtp.gguf", "qwen3", md2, tensors, vocab_size=151936)[0])
    mtp = estimate_command(
        ["llama-server", "-m", path2, "-c", "4096", "-np", "1", "--spec-type", "draft-mtp"]
    )
    assert mtp.total_bytes("kv") == 3 * 2 * 1024 * 2 * 4096  # nextn layer not in the target
    assert mtp.total_bytes("mtp_kv") == 1 * 2 * 1024 * 2 * 4096  # its own MTP context


def shape_stub(**kw):  # noqa: ANN003, ANN201
    from monitor.estimate.shape import ModelShape

    base = dict(
        arch="qwen35moe", n_layer=4, n_embd=1024, n_vocab=1000, n_ctx_train=4096,
        n_head=(8,) * 4, n_head_kv=(2,) * 4, head_k=128, head_v=128,
    )  # fmt: skip
    base.update(kw)
    return ModelShape(**base)
