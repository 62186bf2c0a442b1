"""Declared input-shape ranges: parsing, bucket planning, the padding analysis, and whole compiles of one
artifact for many shapes, each shape compared with ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import core
from core.driver.buckets import plan_buckets
from core.driver.shape_plan import find_padded
from core.driver.shape_ranges import DimRange, parse_dim, parse_input_shape
from core.errors import KilnError, ShapeError
from core.frontend import import_onnx
from core.runtime.loader import KilnRuntimeError

from tests.core.driver.dynamic_models import small_cnn, tiny_encoder


def test_dims_parse_as_sizes_ranges_steps_and_lists():
    assert parse_dim("7") == 7
    assert parse_dim("1..8") == DimRange(1, 8) and DimRange(1, 8).sizes() == (1, 2, 4, 8)
    assert DimRange(3, 100).sizes() == (4, 8, 16, 32, 64, 100)  # powers of two within the range, plus hi
    assert parse_dim("224..512:32").sizes() == tuple(range(224, 513, 32))
    assert parse_dim("384|8|128").sizes() == (8, 128, 384)
    assert parse_input_shape("input_ids=1..8,1..512") == ("input_ids", (DimRange(1, 8), DimRange(1, 512)))


@pytest.mark.parametrize("text,message", [
    ("x=0..0,3", "positive"), ("x=0..0:1,3", "positive"), ("x=0|4,3", "positive"), ("x=0..8:4|16", "within the range"), ("x=-2..4", "positive"), ("x=8..2", "above its high end"), ("x=1..8:0", "step"),
    ("x=a..b", "bad dimension"), ("x=1..1000:1", "at most 16"), ("x=", "expected NAME="),
])
def test_bad_ranges_are_one_clear_error(text, message):
    with pytest.raises(ShapeError, match=message):
        parse_input_shape(text)


def _proto(data: bytes) -> onnx.ModelProto:
    return onnx.load_from_string(data)


def test_buckets_follow_shared_dim_params_smallest_first():
    plan = plan_buckets(_proto(small_cnn("side", "side")), {"x": "1..4,3,8|16,8|16"})
    assert [v.name for v in plan.variables] == ["N", "side"]
    assert plan.buckets[0] == (1, 8) and plan.buckets[-1] == (4, 16) and len(plan.buckets) == 6
    assert plan.input_shapes(len(plan.buckets) - 1) == {"x": (4, 3, 16, 16)}
    assert plan.bounds("x") == ((1, 3, 8, 8), (4, 3, 16, 16))
    assert plan_buckets(_proto(small_cnn()), {"x": (2, 3, 8, 8)}) is None  # nothing ranged: the static compile


@pytest.mark.parametrize("shapes,message", [
    ({"x": "1..4,3,8"}, "rank 3"),
    ({"x": "1..4,1..3,8,8"}, "fixed to 3 by the model"),
    ({"x": "1..4,3,8..16,16..32"}, ""),  # H and W are different dim_params: allowed
    ({"y": "1..4"}, "unknown inputs"),
])
def test_ranges_that_do_not_fit_the_model_are_refused(shapes, message):
    if not message:
        assert plan_buckets(_proto(small_cnn()), shapes) is not None
        return
    with pytest.raises(ShapeError, match=message):
        plan_buckets(_proto(small_cnn()), shapes)


def test_one_dim_param_cannot_take_two_ranges():
    with pytest.raises(ShapeError, match="different ranges"):
        plan_buckets(_proto(small_cnn("side", "side")), {"x": "1,3,8..16,8..32"})


def test_padding_analysis_pads_the_batch_but_not_the_attended_sequence():
    data = tiny_encoder()
    plan = plan_buckets(_proto(data), {"input_ids": "1..4,8|16"})
    graph = import_onnx(data, input_shapes=plan.input_shapes(len(plan.buckets) - 1))
    plan, carried, refused = find_padded(plan, [graph])
    assert plan.padded == {"batch"} and carried == {"batch": {"hidden": [0]}}
    assert "Softmax" in refused["seq"]
    cnn = small_cnn("side", "side")
    plan = plan_buckets(_proto(cnn), {"x": "1..4,3,8|16,8|16"})
    plan, _, refused = find_padded(plan, [import_onnx(cnn, input_shapes=plan.input_shapes(len(plan.buckets) - 1))])
    assert plan.padded == {"N"} and "Conv" in refused["side"]  # zeros past the edge would change the average


def _check_against_ort(module, model: bytes, feeds: dict) -> None:
    expected = ort.InferenceSession(model).run(None, feeds)
    got = module.run(feeds)
    for name, ref in zip([o["name"] for o in module.outputs], expected):
        assert got[name].shape == ref.shape
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5)


def test_cnn_with_a_padded_batch_matches_onnxruntime_at_each_size():
    model = small_cnn()
    art = core.compile(model, input_shapes={"x": "1..16,3,8,8"}, benchmark=False)
    shapes = art.metadata["dynamic_shapes"]
    # padded: any batch runs in a compiled one at least as large; five powers of two fit the default specializations
    assert shapes["variables"][0]["sizes"] == [1, 2, 4, 8, 16] and shapes["variables"][0]["padded"]
    assert art.metadata["inputs"][0]["shape"] == [16, 3, 8, 8]  # kiln_run serves the upper bound
    assert [3, 3, 8, 8] not in [s["x"] for s in art.report["validation"]["shapes"]] and \
        [15, 3, 8, 8] in [s["x"] for s in art.report["validation"]["shapes"]]  # a padded shape was validated
    assert "Shape buckets" in art.report_html and "padded into the next bucket" in art.report_html
    static = core.compile(model, input_shapes={"x": (16, 3, 8, 8)}, validate=False, benchmark=False)
    assert art.metadata["weights_bytes"] == static.metadata["weights_bytes"]  # one copy of the weights
    rng = np.random.default_rng(1)
    with art.load() as module:
        for batch in (1, 3, 16):
            _check_against_ort(module, model, {"x": rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)})
        with pytest.raises(KilnRuntimeError, match=r"dim 0 \(N\) is 17, outside the declared range 1..16"):
            module.run({"x": np.zeros((17, 3, 8, 8), np.float32)})
        with pytest.raises(KilnRuntimeError, match="fixes it to 8"):
            module.run({"x": np.zeros((2, 3, 8, 9), np.float32)})
        with pytest.raises(ValueError, match="rank 3"):
            module.run({"x": np.zeros((2, 3, 8), np.float32)})


def test_encoder_with_batch_range_and_sequence_buckets_matches_onnxruntime():
    model = tiny_encoder()
    art = core.compile(model, input_shapes={"input_ids": "1..4,8|16|32"}, benchmark=False)
    section = art.report["dynamic_shapes"]
    assert section["kernels_compiled"] < section["kernel_calls"]  # identical kernels across buckets built once
    rng = np.random.default_rng(2)
    with art.load() as module:
        for batch, seq in ((1, 8), (3, 16), (4, 32), (2, 32)):
            _check_against_ort(module, model, {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64)})
        # between buckets the sequence runs masked (tests/core/driver/test_shape_lengths.py); below 8, out of range
        _check_against_ort(module, model, {"input_ids": rng.integers(0, 50, (2, 9)).astype(np.int64)})
        with pytest.raises(KilnRuntimeError, match="seq.* is 7, outside the declared range 8..32"):
            module.run({"input_ids": np.zeros((2, 7), np.int64)})


@pytest.mark.slow
def test_cnn_over_image_sizes_in_steps_matches_onnxruntime():
    model = small_cnn("side", "side")
    art = core.compile(model, input_shapes={"x": "1,3,224..512:32,224..512:32"}, benchmark=False)
    assert len(art.metadata["dynamic_shapes"]["buckets"]) == 10
    rng = np.random.default_rng(3)
    with art.load() as module:
        for side in (224, 320, 512):
            _check_against_ort(module, model, {"x": rng.standard_normal((1, 3, side, side)).astype(np.float32)})
        # a side between the steps runs in the next bucket, masked (tests/core/driver/test_shape_lengths.py)
        _check_against_ort(module, model, {"x": rng.standard_normal((1, 3, 300, 300)).astype(np.float32)})
        with pytest.raises(KilnRuntimeError, match="is 513, outside the declared range 224..512"):
            module.run({"x": np.zeros((1, 3, 513, 513), np.float32)})


def _flatten_gather(rows_of_index) -> bytes:
    """x[2,4] -> flatten to [8,1] -> Gather with constant indices -> y[2,4,1] (BERT's mask, as transformers
    exports it: the batch merged into one axis, then gathered back row by row)."""
    from onnx import TensorProto, helper as h, numpy_helper as nh

    index = np.array(rows_of_index, dtype=np.int64)
    graph = h.make_graph(
        [h.make_node("Reshape", ["x", "flat_shape"], ["flat"]), h.make_node("Gather", ["flat", "index"], ["y"], axis=0)],
        "fg", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 1])],
        [nh.from_array(np.array([8, 1], np.int64), "flat_shape"), nh.from_array(index, "index")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_padding_follows_a_batch_merged_into_one_axis_and_gathered_back():
    from core.graph.padding import NotPaddable, padded_output_axes

    in_place = import_onnx(_flatten_gather([[0, 1, 2, 3], [4, 5, 6, 7]]))
    assert padded_output_axes(in_place, {"x": frozenset({0})}) == {"y": frozenset({0})}
    crossing = import_onnx(_flatten_gather([[4, 5, 6, 7], [0, 1, 2, 3]]))  # row 0 reads row 1: not paddable
    with pytest.raises(NotPaddable, match="across rows"):
        padded_output_axes(crossing, {"x": frozenset({0})})


@pytest.mark.parametrize("options,message", [
    ({"bisect": True}, "cannot be combined with --bisect"),
    ({"precision": "fp64"}, "unknown precision"),
])
def test_what_ranges_do_not_support_yet_is_refused_before_any_build(options, message):
    with pytest.raises(KilnError, match=message):  # a ShapeError, or the precision check's PrecisionError
        core.compile(small_cnn(), input_shapes={"x": "1..4,3,8,8"}, **options)
