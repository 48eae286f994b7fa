"""The roofline of a pass and the draft's verdict (monitor/analysis/throughput.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.analysis.throughput import (
    DevicePeak,
    Unknown,
    Work,
    break_even_accept,
    expected_tokens,
    gpu_peak,
    pass_seconds,
    speculate,
)

GPU, HOST = "gpu0", "host"
# a 27B at ~4.6 bits: 15.5e9 bytes of weights, 27e9 parameters
BYTES, PARAMS = 15.5e9, 27e9


def split(gpu_share: float, scale: float = 1.0) -> list[Work]:
    """A model with ``gpu_share`` of its layers on the GPU, the rest in host RAM."""
    return [
        Work(GPU, BYTES * scale * gpu_share, PARAMS * scale * gpu_share),
        Work(HOST, BYTES * scale * (1 - gpu_share), PARAMS * scale * (1 - gpu_share)),
    ]


def rtx4060(host_tflops: float = 0.4, host_gbs: float = 35) -> dict[str, DevicePeak]:
    return {
        GPU: DevicePeak(272e9, 15e12, "test"),
        HOST: DevicePeak(host_gbs * 1e9, host_tflops * 1e12, "test"),
    }


def test_a_pass_is_bandwidth_bound_for_one_token_and_compute_bound_for_seventeen() -> None:
    host = [Work(HOST, 10e9, 17e9)]
    peaks = {HOST: DevicePeak(50e9, 0.4e12, "test")}
    assert pass_seconds(host, peaks, 1) == pytest.approx(10e9 / 50e9)  # read: 0.2 s
    assert pass_seconds(host, peaks, 17) == pytest.approx(2 * 17e9 * 17 / 0.4e12)  # 1.45 s
    # on a GPU the same 17 tokens still cost one read of the weights
    fast = {HOST: DevicePeak(1000e9, 100e12, "test")}
    assert pass_seconds(host, fast, 17) == pytest.approx(pass_seconds(host, fast, 1))


def test_devices_of_a_split_add_up() -> None:
    peaks = rtx4060()
    both = pass_seconds(split(0.4), peaks, 1)
    alone = pass_seconds(split(0.4)[:1], peaks, 1) + pass_seconds(split(0.4)[1:], peaks, 1)
    assert both == pytest.approx(alone)


def test_expected_tokens_per_cycle() -> None:
    """(1 - a^(n+1)) / (1 - a): nothing accepted yields the target's own token."""
    assert expected_tokens(0.0, 3) == 1.0
    assert expected_tokens(1.0, 3) == 4.0
    assert expected_tokens(0.5, 3) == pytest.approx(1.875)
    assert expected_tokens(0.7, 16) == pytest.approx((1 - 0.7**17) / 0.3)


def test_a_draft_wins_when_everything_is_on_a_fast_gpu() -> None:
    peaks = {GPU: DevicePeak(1000e9, 80e12, "test"), HOST: DevicePeak(60e9, 0.4e12, "test")}
    target = split(1.0)
    draft = [Work(GPU, 0.5e9, 0.8e9)]
    s = speculate(target, draft, target, peaks, accept=0.7, n_draft=3)
    assert s.wins and s.gain_pct > 50
    assert s.target_bound == "bandwidth"
    assert s.break_even_accept is not None and s.break_even_accept < 0.2
    assert s.verdict.startswith("the draft wins (+")


def test_a_draft_loses_when_the_host_layers_are_compute_bound() -> None:
    """The seed: an 8 GB RTX 4060 holds 24 of 64 layers; verifying 17 tokens on the 40 in
    host RAM costs 17 times the compute of one."""
    peaks = rtx4060()
    target = split(24 / 64)
    draft = [Work(GPU, 0.45e9, 0.8e9)]
    s = speculate(target, draft, target, peaks, accept=0.7, n_draft=16)
    assert not s.wins and s.gain_pct < -20
    assert s.target_bound == "compute"
    assert s.verdict.startswith("the draft loses (\u2212")
    assert s.break_even_accept is not None and s.break_even_accept > 0.7
    # with bandwidth alone (an unbounded host peak) the same draft would look like a win
    no_compute = {**peaks, HOST: DevicePeak(35e9, 1e18, "test")}
    assert speculate(target, draft, target, no_compute, 0.7, 16).wins


def test_break_even_acceptance_matches_the_plain_speed() -> None:
    peaks = rtx4060()
    target = split(24 / 64)
    draft = [Work(GPU, 0.45e9, 0.8e9)]
    s = speculate(target, draft, target, peaks, accept=0.7, n_draft=3)
    assert s.break_even_accept is not None
    even = speculate(target, draft, target, peaks, accept=s.break_even_accept, n_draft=3)
    assert even.draft_tokens_per_s == pytest.approx(even.plain_tokens_per_s, rel=0.02)


def test_a_draft_that_cannot_win_even_when_every_token_is_accepted() -> None:
    assert break_even_accept(cycle_seconds=5.0, plain_seconds=1.0, n_draft=3) is None
    assert break_even_accept(cycle_seconds=0.5, plain_seconds=1.0, n_draft=3) == 0.0


def test_an_unknown_device_figure_is_named_not_guessed() -> None:
    with pytest.raises(Unknown, match=r"no bandwidth known for host \(give --bw host=GB/s\)"):
        pass_seconds(split(0.5), {GPU: DevicePeak(272e9, 15e12, "t")}, 1)
    with pytest.raises(Unknown, match=r"no peak FLOP/s known for gpu0 \(give --flops gpu0="):
        pass_seconds(split(0.5), {GPU: DevicePeak(272e9, None, "t")}, 1)


def test_gpu_table_matches_the_most_specific_name() -> None:
    plain, ti, laptop = (
        gpu_peak("NVIDIA GeForce RTX 4060"),
        gpu_peak("NVIDIA GeForce RTX 4060 Ti"),
        gpu_peak("NVIDIA GeForce RTX 4060 Laptop GPU"),
    )
    assert plain and ti and laptop
    assert plain.bandwidth_bytes_per_s == 272e9
    assert ti.bandwidth_bytes_per_s == 288e9 and laptop.bandwidth_bytes_per_s == 256e9
    assert gpu_peak("Tesla K80") is None and gpu_peak(None) is None


def test_a_moe_reads_only_its_active_experts_per_token(tmp_path: Path) -> None:
    """Qwen3-30B-A3B (128 experts, 8 used) on one GPU: a token reads the non-expert weights
    and 8/128 of the experts, so the roofline is several times that of reading them all."""
    from arch_models import qwen3moe_30b_a3b

    from collectors.base import DeviceSample, Snapshot
    from monitor.analysis.predict import answer
    from monitor.analysis.predict_request import PredictRequest
    from monitor.estimate.model import devices_from_samples

    path = str(qwen3moe_30b_a3b().write(tmp_path))
    gib = 1024**3
    gpu = DeviceSample(
        "nvml:GPU-big", "nvml", "nvidia", "some GPU", "dedicated", 80 * gib, 0, free_bytes=80 * gib
    )
    host = DeviceSample(
        "host", "procfs", "host", "Host RAM", "host", 64 * gib, 0, available_bytes=60 * gib
    )
    snap = Snapshot(1_800_000_000_000, (gpu, host), (), (), (), (), ())
    req = PredictRequest(
        ["llama-server", "-m", path, "-c", "4096", "-ngl", "99"],
        bandwidth_gbs={"gpu": 1000.0, "host": 50.0},
        flops_tflops={"gpu": 100.0},
    )
    result = answer(req, snap, devices_from_samples(snap.devices, 300 * 1024**2))
    t = result.throughput
    assert t is not None and t.tokens_per_s is not None
    gpu_weights = result.prediction.estimate.total_bytes("weights", "nvml:GPU-big")
    all_read = 1000e9 / gpu_weights  # tokens/s if every expert were read per token
    assert t.tokens_per_s > 5 * all_read
