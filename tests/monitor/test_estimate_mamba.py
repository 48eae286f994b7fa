"""The replay of ggml-alloc's placement rule that gives a Mamba2 hybrid's compute peak
(monitor/estimate/mamba.py); the real-architecture fixtures check its figures."""

from __future__ import annotations

from monitor.estimate.mamba import _Arena


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
