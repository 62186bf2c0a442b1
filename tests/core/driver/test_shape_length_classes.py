"""Length classes: short run-time lengths run in buckets compiled near their size inside one ranged artifact."""
from __future__ import annotations

import numpy as np
import pytest

import core
from core.driver.buckets import BucketPlan, ShapeVariable, length_classes
from core.driver.shape_ranges import DimRange

from tests.core.driver.dynamic_models import assert_same_outputs, greedy_tokens, ort_runner, tiny_decoder

# the new tokens at the sizes named (1 and 8: no classes), the past left to Kiln's defaults
SHAPES = {"input_ids": "1,1..8:1|8", "past_key_values.0.key": "1,2,0..40,4"}
PAST = [f"past_key_values.{i}.{n}" for i in range(2) for n in ("key", "value")]


def _decoder_plan() -> BucketPlan:
    """batch 1..4, seq 1..64, past 0..512 at the default specializations of each (1 and hi)."""
    variables = (ShapeVariable("batch", DimRange(1, 4), (("ids", 0), ("past", 0))),
                 ShapeVariable("seq", DimRange(1, 64), (("ids", 1),)),
                 ShapeVariable("past", DimRange(0, 512), (("past", 2),)))
    plan = BucketPlan(("ids", "past"), {"ids": (None, None), "past": (None, 4, None, 64)}, variables, ())
    return plan.resized({"batch": (1, 4), "seq": (1, 64), "past": (1, 512)})


def test_length_classes_are_powers_of_four_at_the_other_variables_smallest_sizes():
    plan = _decoder_plan()
    assert length_classes(plan, {"seq", "past"}, 6) == (
        (1, 4, 1), (1, 16, 1), (1, 1, 4), (1, 1, 16), (1, 1, 64), (1, 1, 256))
    # over the budget, the smallest classes of the variable with the most go first (a tie: the wider range's)
    assert length_classes(plan, {"seq", "past"}, 3) == ((1, 4, 1), (1, 16, 1), (1, 1, 256))
    assert length_classes(plan, {"past"}, 0) == () and length_classes(plan, set(), 6) == ()
    named = BucketPlan(("x",), {"x": (None,)}, (ShapeVariable("n", DimRange(1, 512, 64), (("x", 0),)),), ())
    assert length_classes(named.resized({}), {"n"}, 6) == ()  # the user named the sizes: no classes
    # the first bucket holding a one-token step (kiln_shaped.c's pick) is the class of its past
    grown = plan.with_buckets(length_classes(plan, {"past"}, 6))
    assert grown.buckets[-1] == (4, 64, 512)
    first = lambda shape: next(b for b in grown.buckets if all(a <= s for a, s in zip(shape, b)))  # noqa: E731
    assert [first((1, 1, past))[2] for past in (0, 3, 4, 5, 16, 50, 200, 300)] == [1, 4, 4, 16, 16, 64, 256, 512]


@pytest.fixture
def classes_beside_the_upper_bound(monkeypatch):
    """No default specializations: the upper bound and the length classes alone."""
    monkeypatch.setattr("core.driver.shape_plan.DEFAULT_SHAPES", 1)


def _feeds(rng, seq: int, past: int) -> dict:
    return {"input_ids": rng.integers(0, 32, (1, seq)).astype(np.int64),
            "attention_mask": np.ones((1, past + seq), np.int64),
            **{n: rng.standard_normal((1, 2, past, 4)).astype(np.float32) for n in PAST}}


def test_a_short_past_runs_its_class_bucket_and_matches_onnxruntime_across_class_boundaries(
        classes_beside_the_upper_bound):
    model = tiny_decoder()
    art = core.compile(model, input_shapes=SHAPES, benchmark=False)
    buckets = [(b["input_ids"][1], b["past_key_values.0.key"][2]) for b in art.metadata["dynamic_shapes"]["buckets"]]
    assert buckets == [(1, 4), (1, 16), (1, 40), (8, 40)]
    run = ort_runner(model)
    rng = np.random.default_rng(3)
    with art.load() as module:
        # class boundaries, a shrinking past after a longer one (the padded inputs' buffers are reused), the prompt
        for seq, past, bucket in ((1, 30, 2), (1, 3, 0), (1, 4, 0), (1, 5, 1), (1, 16, 1), (1, 17, 2), (1, 0, 0),
                                  (1, 39, 2), (1, 40, 2), (1, 20, 2), (8, 0, 3), (3, 21, 3), (8, 32, 3)):
            feeds = _feeds(rng, seq, past)
            assert_same_outputs(module.run(feeds), run(feeds), atol=1e-4)
            calls = module.profile(repeat=1, feeds=feeds)  # the bucket that runs names its calls b<index>_...
            assert calls and {c["name"].split("_")[0] for c in calls} == {f"b{bucket}"}, (seq, past)
            assert all(c["time_ms"] >= 0 for c in calls)
        tokens, _ = greedy_tokens(module.run, [3, 1, 4], steps=20)  # the cache grows through classes 4, 16 and 40
    assert tokens == greedy_tokens(run, [3, 1, 4], steps=20)[0]
