"""``estimate`` against llama-server runs recorded on real hardware, by CPU and GPU.

tests/fixtures/llamalog/hardware/<machine>/ holds what ``scripts/gpu-capture`` recorded
(tests/realworld/gpu_capture.py; provenance-*.json: CPU model and flags, GPU, driver, build):

- ``h100-xeon-amx``: an Intel Xeon with AMX-INT8 + AVX-512 and an NVIDIA H100 80GB HBM3
  (driver 580.159.04, CUDA 13.0, llama.cpp 0c1e57098 built with -DGGML_CUDA=ON for sm_90
  and GGML_NATIVE=ON); ``cpu-*`` runs use that binary with ``-dev none``;
- ``epyc-avx2``: an AMD EPYC with AVX2 and no AVX-512 (this project's CI kind, the CPU
  build of scripts/build-llama-server).

The CPU runs start without ``-nr``: llama.cpp's CPU backend puts the weights it repacks for
that CPU in its AMX / CPU_REPACK buffers (monitor/estimate/repack.py). Checked here, on the
very command lines, with the CPU features each machine recorded:

- every AMX and CPU_REPACK buffer llama.cpp logged is estimated exactly, and none where it
  logged none (the noise case: the same models on the AVX2 box, or with ``-nr``);
- those weights are anonymous memory: RssAnon grows by them, not RssFile;
- the rest of the weights stays in the plain CPU buffer (mapped, or read with -lm none).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arch_models import model_for

from monitor.estimate import DeviceInfo, estimate_command, features_from_flags
from monitor.estimate.repack import AMX, REPACK
from monitor.logs.server_log import parse_llama_log

MIB = 1024 * 1024
EXACT_MIB = 0.011  # two printed decimals
HARDWARE = Path(__file__).resolve().parents[2] / "fixtures" / "llamalog" / "hardware"
MACHINES = ("h100-xeon-amx", "epyc-avx2")


def _runs(prefix: str) -> list[Path]:
    return sorted(p for m in MACHINES for p in (HARDWARE / m).glob(f"{prefix}-*.json"))


def _cpu(path: Path):
    prov = json.loads((path.parent / "provenance-cpu.json").read_text())
    return features_from_flags(prov["cpu_flags"])


def _argv(doc: dict, models: Path) -> list[str]:
    """The recorded command line with the models written again (sparse headers, or the
    real-world tier's tiny models for ``tiny:<name>``)."""

    def write(key: str) -> str:
        if key.startswith("tiny:"):
            import tiny_models

            sizes = tiny_models.REALWORLD_SIZES
            return str(tiny_models.write_all(models, **sizes)[key[5:]].path)
        return str(model_for(key).write(models))

    paths = {"{model}": write(doc["model"]), "{port}": "8080"}
    if doc.get("draft"):
        paths["{draft}"] = write(doc["draft"])
    return [paths.get(a, a) for a in doc["argv"]]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hw-models")


def _logged_model_buffers(doc: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in parse_llama_log(doc["log_lines"]).buffers:
        if b.kind == "model" and b.context == "target":
            out[b.backend] = out.get(b.backend, 0.0) + b.mib
    return out


def test_both_kinds_of_cpu_were_recorded() -> None:
    amx, avx2 = (_cpu(HARDWARE / m / "x.json") for m in MACHINES)
    assert amx.amx and amx.avx512f and avx2.avx2 and not avx2.avx512f and not avx2.amx
    assert len(_runs("cpu")) >= 16 and len(_runs("cuda")) >= 10


@pytest.mark.parametrize("path", _runs("cpu"), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_extra_buffers_match_the_log(path: Path, models: Path) -> None:
    doc = json.loads(path.read_text())
    est = estimate_command(_argv(doc, models), env={}, devices=(), cpu=_cpu(path))
    logged = _logged_model_buffers(doc)
    mine: dict[str, float] = {}
    for c in est.components:
        if c.name == "weights":
            key = c.buffer or "CPU"
            mine[key] = mine.get(key, 0.0) + c.bytes / MIB
    for name in (AMX, REPACK):
        assert abs(mine.get(name, 0.0) - logged.get(name, 0.0)) <= EXACT_MIB, (name, logged, mine)
    extra = [c for c in est.components if c.buffer in (AMX, REPACK)]
    assert all(c.residency == "anon" for c in extra)
    if "CPU" in logged:  # read into a plain buffer (-lm none): the same bytes
        assert abs(mine["CPU"] - logged["CPU"]) <= EXACT_MIB + 0.005 * logged["CPU"]
    if "CPU_Mapped" in logged:  # the mapping spans the file range of its tensors
        assert 0 < mine["CPU"] <= logged["CPU_Mapped"] + EXACT_MIB
        plain = next(c for c in est.components if c.name == "weights" and c.buffer != AMX)
        assert plain.residency == "file"


def test_repacked_weights_are_anonymous_memory() -> None:
    """On the AMX box the same Qwen3-8B launch holds the AMX buffer in RssAnon; with -nr
    its weights stay page cache and RssAnon is smaller by that buffer (within 1 %)."""
    box = HARDWARE / "h100-xeon-amx"
    repack = json.loads((box / "cpu-qwen3-8b-repack.json").read_text())
    nr = json.loads((box / "cpu-qwen3-8b-nr.json").read_text())
    amx_mib = _logged_model_buffers(repack)[AMX]
    grown_mib = (repack["rss_anon_bytes"] - nr["rss_anon_bytes"]) / MIB
    assert abs(grown_mib - amx_mib) <= 0.01 * amx_mib, (grown_mib, amx_mib)


def test_a_gpu_build_keeps_cpu_weights_out_of_the_extra_buffers(models: Path) -> None:
    """With a GPU, make_cpu_buft_list puts the GPU's pinned host buffer type before the
    CPU's extra ones: on the AMX box, -ngl 0 and partial offload logged no AMX buffer, and
    the estimate (given the GPU and the AMX CPU) places none."""
    box = HARDWARE / "h100-xeon-amx"
    cpu = _cpu(box / "x.json")
    for name in ("cuda-qwen3-0.6b-ngl0", "cuda-qwen3-0.6b-ngl14", "cuda-qwen3-8b-ngl18"):
        doc = json.loads((box / f"{name}.json").read_text())
        assert not {AMX, REPACK} & set(_logged_model_buffers(doc)), name
        gpu = DeviceInfo("CUDA0", 85520809984, 84 * 1024 * MIB)
        est = estimate_command(_argv(doc, models), env={}, devices=[gpu], cpu=cpu)
        assert not [c for c in est.components if c.buffer in (AMX, REPACK)], name


def test_no_repack_and_unknown_cpu_place_no_extra_buffer(models: Path) -> None:
    path = HARDWARE / "h100-xeon-amx" / "cpu-qwen3-8b-repack.json"
    argv = _argv(json.loads(path.read_text()), models)
    with_nr = estimate_command([*argv, "-nr"], env={}, devices=(), cpu=_cpu(path))
    unknown = estimate_command(argv, env={}, devices=(), cpu=None)
    for est in (with_nr, unknown):
        assert not [c for c in est.components if c.buffer in (AMX, REPACK)]
    assert any("features are unknown" in n for n in unknown.notes)
    known = estimate_command(argv, env={}, devices=(), cpu=_cpu(path))
    assert any("AMX" in n and "-nr" in n for n in known.notes)


@pytest.mark.parametrize("path", _runs("cuda"), ids=lambda p: p.stem)
def test_cuda_weights_and_kv_per_device(path: Path, models: Path) -> None:
    """The CUDA build on the H100: weights on CUDA0 within 0.5 % (a tied LM head is a
    second copy of token_embd there), the host's at most the mapping llama.cpp logged, and
    KV / recurrent state per device exactly. (Compute buffers and the CUDA_Host compute
    buffer are not modelled for CUDA yet: issue 33.)"""
    doc = json.loads(path.read_text())
    prov = json.loads((path.parent / "provenance-gpu.json").read_text())
    gpu = DeviceInfo("CUDA0", prov["gpu_total_bytes"], prov["gpu_total_bytes"] - 512 * MIB)
    est = estimate_command(_argv(doc, models), env={}, devices=[gpu], cpu=_cpu(path))
    report = parse_llama_log(doc["log_lines"])

    def logged(kind: str, device: str) -> float:
        return sum(
            b.mib
            for b in report.buffers
            if b.kind == kind and b.device == device and b.context == "target"
        )

    def mine(names: tuple[str, ...], device: str) -> float:
        return sum(est.total_bytes(n, device=device) for n in names) / MIB

    gpu_w = logged("model", "CUDA0")
    assert abs(mine(("weights",), "CUDA0") - gpu_w) <= max(EXACT_MIB, 0.005 * gpu_w)
    assert mine(("weights",), "host") <= logged("model", "host") + EXACT_MIB
    for device in ("CUDA0", "host"):
        assert abs(mine(("kv", "kv_swa"), device) - logged("KV", device)) <= EXACT_MIB
        assert abs(mine(("rs",), device) - logged("RS", device)) <= EXACT_MIB


def test_a_load_without_mmap_keeps_one_staging_copy_in_the_heap(models: Path) -> None:
    """-lm none reads each repacked tensor into a staging vector first (load_all_data):
    the estimate keeps the largest one (at most glibc's 32 MiB mmap threshold) as anonymous
    memory at load; a mapped load, an AVX2 box that repacks none of these types, and -nr
    have none. (On the AMX Xeon the tiny BERT's RssAnon after load was 68.68 MiB against
    the real-world tier's 10 % band: realworld/rss-anon-junit.xml beside the fixtures.)"""
    amx_box, avx2_box = (HARDWARE / m for m in MACHINES)
    bert = json.loads((amx_box / "cpu-tiny-bert-embedding.json").read_text())
    argv = _argv(bert, models)
    staged = estimate_command(argv, env={}, devices=(), cpu=_cpu(amx_box / "x.json"))
    ffn = 768 * 3072 * 2  # the largest F16 matmul of the tiny BERT, bound for AMX
    assert staged.total_bytes("load_staging") == ffn
    assert next(c for c in staged.components if c.name == "load_staging").residency == "anon"
    for est in (
        estimate_command(argv, env={}, devices=(), cpu=_cpu(avx2_box / "x.json")),
        estimate_command([*argv, "-nr"], env={}, devices=(), cpu=_cpu(amx_box / "x.json")),
    ):
        assert est.total_bytes("load_staging") == 0
    big = json.loads((amx_box / "cpu-qwen3-8b-repack.json").read_text())
    big_argv = _argv(big, models)
    mapped = estimate_command(big_argv, env={}, devices=(), cpu=_cpu(amx_box / "x.json"))
    read = estimate_command(
        [*big_argv, "-lm", "none"], env={}, devices=(), cpu=_cpu(amx_box / "x.json")
    )
    assert mapped.total_bytes("load_staging") == 0
    assert read.total_bytes("load_staging") == 32 * MIB  # its FFN tensors are ~51 MiB
