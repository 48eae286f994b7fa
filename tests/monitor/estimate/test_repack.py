"""monitor/estimate/repack.py: which weights go to llama.cpp's AMX / CPU_REPACK buffers.

The rules are ggml-cpu's (amx/amx.cpp supports_op, amx/mmq.cpp get_row_size, repack.cpp
ggml_repack_get_optimal_repack_type); the recorded runs that confirm them on a real AMX
Xeon and an AVX2 EPYC are tests/monitor/estimate/test_hardware_recordings.py.
"""

from __future__ import annotations

import pytest

from monitor.estimate.repack import (
    AMX,
    REPACK,
    CpuFeatures,
    WeightTensor,
    extra_buffer,
    features_from_flags,
    features_of,
    split_host_weights,
    tensor_op,
)
from monitor.servers import parse_command

AMX_CPU = features_from_flags(["avx2", "avx512f", "avx512_vnni", "amx_int8"])
AVX2 = features_from_flags(["avx2", "fma"])
AVX512 = features_from_flags(["avx2", "avx512f"])
OLD = features_from_flags(["sse4_2"])


def t(
    name: str, type_name: str, ne0: int, ne1: int, ne2: int = 1, n_bytes: int = 0
) -> WeightTensor:
    return WeightTensor(name, type_name, (ne0, ne1, ne2) if ne2 > 1 else (ne0, ne1), n_bytes)


@pytest.mark.parametrize(
    ("name", "op"),
    [
        ("blk.0.attn_q.weight", "MUL_MAT"),
        ("blk.3.ffn_down_exps.weight", "MUL_MAT_ID"),
        ("blk.3.ffn_gate_up_exps.weight", "MUL_MAT_ID"),
        ("output.weight", "MUL_MAT"),
        ("blk.40.nextn.eh_proj.weight", "MUL_MAT"),
        ("token_embd.weight", "OTHER"),
        ("blk.0.attn_norm.weight", "OTHER"),
        ("blk.0.attn_q.bias", "OTHER"),
        ("blk.0.ssm_conv1d.weight", "OTHER"),
    ],
)
def test_the_op_of_a_weight_comes_from_llm_tensor_infos(name: str, op: str) -> None:
    assert tensor_op(name) == op


def test_amx_packs_q8_0_with_compensation_and_k_quants_with_scales() -> None:
    # Q8_0 4096 x 4096: 128 blocks of 34 B per row + 4 B compensation each = 38/34
    q8 = t("blk.0.attn_q.weight", "Q8_0", 4096, 4096, n_bytes=4096 * 128 * 34)
    assert extra_buffer(q8, AMX_CPU) == (AMX, 4096 * 128 * 38)
    q4k = t("blk.0.ffn_up.weight", "Q4_K", 4096, 12288, n_bytes=12288 * 16 * 144)
    assert extra_buffer(q4k, AMX_CPU) == (AMX, 12288 * 16 * 148)
    q6k = t("blk.0.ffn_down.weight", "Q6_K", 12288, 4096, n_bytes=4096 * 48 * 210)
    assert extra_buffer(q6k, AMX_CPU) == (AMX, 4096 * 48 * 210)
    f16 = t("blk.0.attn_k.weight", "F16", 768, 768, n_bytes=768 * 768 * 2)
    assert extra_buffer(f16, AMX_CPU) == (AMX, 768 * 768 * 2)


def test_amx_refuses_shapes_its_tiles_do_not_cover_and_repack_takes_over() -> None:
    # ne1 % 32 != 0 (a 2-row-short output): not AMX; Q4_0 with ne1 % 8 == 0: CPU_REPACK
    odd = t("blk.0.attn_q.weight", "Q4_0", 4096, 4072, n_bytes=4072 * 128 * 18)
    assert extra_buffer(odd, AMX_CPU) == (REPACK, 4072 * 128 * 18)
    # experts (3-D, MUL_MAT_ID) never go to AMX
    exps = t("blk.0.ffn_up_exps.weight", "Q4_K", 2048, 768, 128, n_bytes=128 * 768 * 8 * 144)
    assert extra_buffer(exps, AMX_CPU) == (REPACK, exps.n_bytes)
    # a K-quant row that is not a whole number of 256-blocks for AMX, F32 never
    assert extra_buffer(t("blk.0.attn_q.weight", "Q8_0", 100, 64, n_bytes=1), AMX_CPU) is None
    assert (
        extra_buffer(t("blk.0.ffn_gate_inp.weight", "F32", 2048, 128, n_bytes=1), AMX_CPU) is None
    )


@pytest.mark.parametrize(
    ("type_name", "cpu", "want"),
    [
        ("Q4_0", AVX2, REPACK),
        ("Q4_K", AVX2, REPACK),
        ("IQ4_NL", AVX2, REPACK),
        ("MXFP4", AVX2, REPACK),
        ("Q8_0", AVX2, None),  # x86 has no Q8_0 repack layout
        ("Q6_K", AVX2, None),
        ("Q2_K", AVX2, None),
        ("Q2_K", AVX512, REPACK),
        ("Q4_0", OLD, None),
    ],
)
def test_cpu_repack_by_type_and_cpu(type_name: str, cpu: CpuFeatures, want: str | None) -> None:
    w = t("blk.1.ffn_up.weight", type_name, 4096, 11008, n_bytes=1000)
    hit = extra_buffer(w, cpu)
    assert (hit[0] if hit else None) == want
    assert hit is None or hit[1] == 1000  # interleaved, same bytes
    assert extra_buffer(t("blk.1.ffn_up.weight", type_name, 4096, 11007, n_bytes=1), cpu) is None


def test_split_sums_per_buffer_and_keeps_the_rest_in_cpu() -> None:
    tensors = [
        t("token_embd.weight", "Q4_0", 4096, 32000, n_bytes=100),
        t("blk.0.attn_q.weight", "Q4_0", 4096, 4096, n_bytes=10),
        t("blk.0.attn_norm.weight", "F32", 4096, 1, n_bytes=1),
    ]
    assert split_host_weights(tensors, AVX2) == {"CPU": 101, REPACK: 10}
    assert split_host_weights(tensors, OLD) == {"CPU": 111}


def test_features_and_the_launch_flags() -> None:
    assert AMX_CPU.amx and not features_from_flags(["amx_int8"]).amx  # needs avx512_vnni
    assert features_of(None) is None and features_of(("avx2",)) == AVX2
    assert AMX_CPU.names == ("amx_int8", "avx512_vnni", "avx512f", "avx2")
    assert "AMX" in AMX_CPU.describe() and "AVX2" in AVX2.describe()
    spec = parse_command(["llama-server", "-m", "m.gguf"])
    assert spec is not None and spec.repack and not spec.no_host
    for argv, env in (
        (["-nr"], None),
        (["--no-repack"], None),
        (["--repack=false"], None),
        ([], {"LLAMA_ARG_REPACK": "0"}),
    ):
        spec = parse_command(["llama-server", "-m", "m.gguf", *argv], env)
        assert spec is not None and not spec.repack, (argv, env)
    spec = parse_command(["llama-server", "-m", "m.gguf", "--no-host"])
    assert spec is not None and spec.no_host


def test_cpu_features_on_the_command_line(tmp_path) -> None:  # noqa: ANN001
    """``estimate``/``predict --cpu-features`` judge for another box's CPU; a bad list is
    one line and exit 2."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from arch_models import model_for

    root = Path(__file__).resolve().parents[3]
    model = str(model_for("qwen3-8b").write(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(root)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "monitor", *args],
            capture_output=True, text=True, env=env, cwd=root, timeout=120,
        )  # fmt: skip

    launch = ["--", "llama-server", "-m", model, "-c", "4096", "-np", "1", "--cache-ram", "0"]
    amx = json.loads(run("estimate", "--json", "--cpu-only", "--cpu-features",
                         "amx_int8,avx512_vnni,avx512f,avx2", *launch).stdout)  # fmt: skip
    plain = json.loads(run("estimate", "--json", "--cpu-only", "--cpu-features", "none",
                           *launch).stdout)  # fmt: skip
    buffers = {c["buffer"] for c in amx["components"] if c["name"] == "weights"}
    assert buffers == {"AMX", "CPU"}
    assert {c["buffer"] for c in plain["components"] if c["name"] == "weights"} == {None}
    bad = run("estimate", "--cpu-features", "sse9", *launch)
    assert bad.returncode == 2 and "expected a comma-separated list" in bad.stderr
    assert bad.stderr.count("\n") == 1
    state = tmp_path / "state.json"
    state.write_text(json.dumps({
        "schema": "vramscope.status/1", "ts_ms": 1, "processes": [], "hidden": [],
        "collectors": [],
        "devices": [{"device_id": "host", "collector": "procfs", "vendor": "host",
                     "name": "Host RAM", "memory_kind": "host", "total_bytes": 64 << 30,
                     "used_bytes": 60 << 30, "available_bytes": 4 << 30}],
    }))  # fmt: skip
    # 4 GiB available: Q8_0 mapped thrashes; packed into AMX (anonymous) it cannot fit
    mapped = run("predict", "--state", str(state), "--cpu-features", "avx2", *launch)
    packed = run("predict", "--state", str(state), "--cpu-features", "amx_int8,avx512_vnni",
                 *launch)  # fmt: skip
    assert mapped.returncode == 4, mapped.stdout + mapped.stderr
    assert packed.returncode == 1, packed.stdout + packed.stderr
