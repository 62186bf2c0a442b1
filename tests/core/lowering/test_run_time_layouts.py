"""Which graph inputs and outputs a ranged compile lays out at their run-time lengths, and the runtime's tables."""
from __future__ import annotations

from core.driver.buckets import BucketPlan, ShapeVariable
from core.driver.shape_ranges import DimRange
from core.lowering.run_time_layouts import layout_table, planned_layouts

PAST, SEQ = "past::length", "seq::length"


def _plan(masked=frozenset({"past", "seq"})) -> BucketPlan:
    """ids[batch, seq], mask[batch, past + seq], cache[batch, 2, past, 4], bias[batch, past + 1]; batch padded."""
    variables = (ShapeVariable("batch", DimRange(1, 4), (("ids", 0), ("mask", 0), ("cache", 0), ("bias", 0))),
                 ShapeVariable("seq", DimRange(1, 8), (("ids", 1),)),
                 ShapeVariable("past", DimRange(0, 40), (("cache", 2),)))
    base = {"ids": (None, None), "mask": (None, None), "cache": (None, 2, None, 4), "bias": (None, None)}
    return BucketPlan(("ids", "mask", "cache", "bias"), base, variables, ((4, 8, 40),), padded=frozenset({"batch"}),
                      derived={("mask", 1): ((2, 1), 0), ("bias", 1): ((2,), 1)}, masked=masked)


def test_masked_dims_and_their_sums_are_laid_out_at_the_length_inputs_a_constant_or_padded_dim_is_not():
    outputs = {"present": {2: ({"past": 1, "seq": 1}, 0)}, "logits": {1: ({"seq": 1}, 0)},
               "shifted": {1: ({"past": 1}, 1)}, "doubled": {1: ({"seq": 2}, 0)}}
    assert planned_layouts(_plan(), outputs) == {
        "ids": ((1, SEQ),), "mask": ((1, f"{PAST}+{SEQ}"),), "cache": ((2, PAST),),
        "present": ((2, f"{PAST}+{SEQ}"),), "logits": ((1, SEQ),)}
    # a variable that is not masked (exact sizes only) lays nothing out, nor the sums holding it
    assert planned_layouts(_plan(frozenset({"past"})), {}) == {"cache": ((2, PAST),)}


def test_the_runtime_table_marks_each_laid_out_dim_per_bucket():
    buckets = [{"cache": ((2, PAST),)}, {}]
    assert layout_table(buckets, ["ids", "cache"], [2, 4]) == (0, 0, 0, 0, 1, 0) + (0,) * 6
