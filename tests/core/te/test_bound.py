"""Bounds inference for compute_at: the region one iteration of an attach loop reads, per axis."""
from __future__ import annotations

from core.te.bound import infer_region
from core.tir.expr import IntImm, Var
from core.tir.simplify import simplify

io, ii, jo, ji, f = Var("io"), Var("ii"), Var("jo"), Var("ji"), Var("f")


def _region(reads, inner, shape):
    return [(str(simplify(first)), extent) for first, extent in infer_region(reads, inner, shape)]


def test_a_tile_reads_its_own_box():
    reads = [(io * 4 + ii, jo * 8 + ji)]
    assert _region(reads, {ii: 4, ji: 8}, (13, 37)) == [("(io * 4)", 4), ("(jo * 8)", 8)]


def test_reads_at_constant_offsets_are_joined():
    # A stencil reads columns j and j + 1 (and a row above): one box covers both.
    reads = [(io * 4 + ii, jo * 8 + ji), (io * 4 + ii - 1, jo * 8 + ji + 1)]
    assert _region(reads, {ii: 4, ji: 8}, (13, 38)) == [("((io * 4) - 1)", 5), ("(jo * 8)", 9)]


def test_strided_and_negative_coefficients_span_their_range():
    reads = [(io * 8 + ii * 2, IntImm(6) - ji)]
    assert _region(reads, {ii: 4, ji: 3}, (64, 7)) == [("(io * 8)", 7), ("4", 3)]


def test_non_linear_or_disagreeing_reads_take_the_whole_axis():
    # An outer variable under a division is fine (a fused tile loop); an inner one is not.
    fused = [(f // 5 * 4 + ii, (f + ji) // 3)]
    assert _region(fused, {ii: 4, ji: 8}, (13, 12)) == [("((f // 5) * 4)", 4), ("0", 12)]
    two_rows = [(io, ji), (jo, ji)]  # different outer parts: no common first point
    assert _region(two_rows, {ji: 8}, (13, 37))[0] == ("0", 13)


def test_a_box_as_large_as_the_axis_is_the_axis():
    assert _region([(ii + io * 0, ji)], {ii: 13, ji: 40}, (13, 37)) == [("0", 13), ("0", 37)]
