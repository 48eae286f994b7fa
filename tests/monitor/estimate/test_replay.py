"""The replay of ggml-alloc's placement rule that gives a Mamba2 hybrid's compute peak
(monitor/estimate/replay.py); the real-architecture fixtures check its figures."""

from __future__ import annotations

from monitor.estimate.replay import _Arena


def test_best_fit_takes_the_smallest_hole_that_fits_not_the_tail() -> None:
    a = _Arena()
    for key, size in (("a", 320), ("gap1", 32), ("b", 128), ("gap2", 32), ("c", 640)):
        a.alloc(key, size)
    a.release("a")  # hole of 320 at 0
    a.release("b")  # hole of 128 at 352
    a.alloc("x", 96)
    assert a.at["x"] == (352, 96)  # the 128 hole, not the 320 one nor the tail
    a.alloc("y", 400)  # fits no hole: the tail grows the buffer
    assert a.at["y"][0] == 32 + 320 + 128 + 32 + 640
    assert a.peak == a.at["y"][0] + 416


def test_a_freed_tensor_merges_with_its_neighbours_and_sizes_are_aligned() -> None:
    a = _Arena()
    a.alloc("a", 10)  # aligned to 32
    a.alloc("b", 32)
    a.alloc("c", 32)
    a.release("a")
    a.release("b")
    assert a.free[0] == [0, 64]
    a.alloc("d", 64)  # the merged hole holds it exactly
    assert a.at["d"] == (0, 64)
    assert a.peak == 96


def test_ties_go_to_the_later_hole() -> None:
    """``block->size <= best_fit_size`` in ggml_dyn_tallocr_alloc: the last equal hole."""
    a = _Arena()
    for key in ("h1", "s1", "h2", "s2"):
        a.alloc(key, 64)
    a.release("h1")
    a.release("h2")
    a.alloc("x", 64)
    assert a.at["x"] == (128, 64)


def test_mla_with_flash_attention_is_said_approximate_only_above_the_checked_heads() -> None:
    """Checked up to 128 heads (DeepSeek-V3 slices at 32, 64, 128; V2-Lite at 16): a
    V3-shaped model at 128 heads is not marked, one at 256 heads is, and without flash
    attention (its own fitted term) neither is."""
    import dataclasses

    from arch_models import model_for

    from monitor.estimate.certainty import approximations

    shape = _shape(model_for("deepseek-v3-5l"))  # a sparse file: the header is read
    wide = dataclasses.replace(shape, n_head=tuple(256 for _ in shape.n_head))
    assert approximations(shape, True, "f16", False) == ()
    (line,) = approximations(wide, True, "f16", False)
    assert "MLA attention with flash attention at 256 heads is not checked" in line
    assert approximations(wide, False, "f16", False) == ()


def _shape(model):  # noqa: ANN001, ANN202
    import tempfile

    from monitor.estimate.shape import shape_from_header
    from monitor.gguf.reader import read_header

    with tempfile.TemporaryDirectory() as d:
        return shape_from_header(read_header(str(model.write(d))))


def test_the_mla_replay_finds_the_absorbed_query_at_128_heads_and_the_moe_below() -> None:
    """At 128 heads the peak is layer 1's ``Qcur`` (412.01 MiB logged at -ub 512); at 32
    the first MoE layer's down projection (262.01 MiB logged, the same slice): the replay
    gives both, the 4 MiB f16 mask of -c 4096 included."""
    from arch_models import model_for

    from monitor.estimate.replay import mla_flash_peak_bytes

    mib = 1024 * 1024
    mask = 2 * 512 * 4096
    wide = mla_flash_peak_bytes(_shape(model_for("deepseek-v3-5l")), 512, mask, 1)
    narrow = mla_flash_peak_bytes(_shape(model_for("deepseek-v3-5l-32h")), 512, mask, 1)
    assert abs(wide / mib - 412.01) < 0.01
    assert abs(narrow / mib - 262.01) < 0.01
