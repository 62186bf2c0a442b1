"""Padded and masked dims need no bucket per size: their upper bound serves the whole range (a few default
specializations spread over it keep small sizes fast), so ranges that used to make too many buckets compile, and
sizes between the compiled ones match ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper as h, numpy_helper as nh

import core
from core.driver.buckets import DEFAULT_SHAPES, default_specializations, plan_buckets
from core.driver.shape_ranges import DimRange
from core.errors import ShapeError
from core.runtime.loader import KilnRuntimeError

from tests.core.driver.dynamic_models import (assert_same_outputs, greedy_tokens, ort_runner, tiny_decoder,
                                              tiny_encoder)


def test_default_specializations_spread_powers_of_two_over_the_range_within_the_budget():
    assert not DimRange(1, 512).names_sizes and DimRange(224, 512, 32).names_sizes
    assert DimRange(0, 512).sizes()[0] == 1  # a dim that must match exactly never compiles size 0
    assert DimRange(1, 512).thinned(3) == (1, 8, 64, 512) and DimRange(1, 512).thinned(0) == (512,)
    bert = default_specializations({"batch": DimRange(1, 4), "seq": DimRange(1, 512)}, DEFAULT_SHAPES)
    assert bert == {"batch": (1, 4), "seq": (1, 16, 512)}  # the smallest size and hi stay while two fit
    decoder = default_specializations({"batch": DimRange(1, 4), "seq": DimRange(1, 64), "past": DimRange(0, 512)},
                                      DEFAULT_SHAPES)
    assert decoder == {"batch": (1, 4), "seq": (1, 64), "past": (1, 512)}  # the one-token step has its own shape
    assert default_specializations({"seq": DimRange(1, 512)}, 1) == {"seq": (512,)}


def test_encoder_compiles_default_specializations_and_matches_onnxruntime_between_them():
    model = tiny_encoder()
    art = core.compile(model, input_shapes={"input_ids": "1..4,1..64"}, benchmark=False)
    shapes = art.metadata["dynamic_shapes"]
    compiled = [list(b["input_ids"]) for b in shapes["buckets"]]
    assert len(compiled) == 6 + 2 and [1, 4] in compiled and [1, 16] in compiled  # and the masked seq's length classes
    assert [(v["name"], v["sizes"], v["padded"], v["masked"]) for v in shapes["variables"]] == [
        ("batch", [1, 4], True, False), ("seq", [1, 8, 64], False, True)]
    validated = [s["input_ids"] for s in art.report["validation"]["shapes"]]
    assert [1, 1] in validated and [4, 33] in validated and [4, 63] in validated  # low end, between, below max
    run = ort_runner(model)
    rng = np.random.default_rng(7)
    with art.load() as module:
        for batch, seq in ((1, 1), (3, 5), (2, 33), (1, 47), (4, 64)):  # 3, 5, 33, 47: no power of two
            feeds = {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64)}
            assert_same_outputs(module.run(feeds), run(feeds))
        with pytest.raises(KilnRuntimeError, match="is 65, outside the declared range 1..64"):
            module.run({"input_ids": np.zeros((1, 65), np.int64)})


def test_decoder_whose_ranges_made_too_many_buckets_compiles_once_and_generates_like_onnxruntime(one_compiled_shape):
    model = tiny_decoder()
    shapes = {"input_ids": "1..4,1..8", "past_key_values.0.key": "1..4,2,0..56,4"}
    exact = plan_buckets(onnx.load_from_string(model), shapes)
    assert len(exact.buckets) > 64  # what every size compiled (the old buckets) would have been: refused
    art = core.compile(model, input_shapes=shapes, benchmark=False)
    assert len(art.metadata["dynamic_shapes"]["buckets"]) == 1
    prompt = [3, 1, 4, 1, 5, 9, 2]  # a prompt of 7 (between buckets), then one token a step over a growing cache
    expected, reference = greedy_tokens(ort_runner(model), prompt, steps=24)
    with art.load() as module:
        tokens, outputs = greedy_tokens(module.run, prompt, steps=24)
        assert tokens == expected
        for got, ref in zip(outputs, reference):  # present keys come back at past + new length
            assert_same_outputs(got, ref, atol=1e-4)
        feeds = {"input_ids": np.array([[1, 2, 3]] * 3, np.int64), "attention_mask": np.ones((3, 13), np.int64),
                 **{f"past_key_values.{i}.{n}": np.random.default_rng(i).standard_normal((3, 2, 10, 4)).astype(
                     np.float32) for i in (0, 1) for n in ("key", "value")}}  # batch 3, past 10, seq 3
        assert_same_outputs(module.run(feeds), ort_runner(model)(feeds), atol=1e-4)


def _double_pad() -> bytes:
    """Pad along both axes: neither dim can be padded or masked, so each must match a compiled size."""
    graph = h.make_graph([h.make_node("Pad", ["x", "pads"], ["y"])], "pad2",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "L"])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, ["A2", "L2"])],
                         [h.make_tensor("pads", TensorProto.INT64, [4], [1, 1, 1, 1])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_dims_that_must_match_exactly_still_make_buckets_and_too_many_are_refused_with_the_reason():
    with pytest.raises(ShapeError, match=r"121 shape buckets.*at most 64.*L: Pad .y. has no padding rule"):
        core.compile(_double_pad(), input_shapes={"x": "1..1000,1..1000"}, benchmark=False)


def _flattened_mask_softmax() -> bytes:
    """transformers' BERT padding mask: the [batch, seq] mask flattened to [batch*seq, 1], gathered back at
    batch*seq + position (seq read at run time from the mask's shape), reshaped to [batch, seq] and added as
    -10000 before a softmax over the scores."""
    def const(name, value):
        return nh.from_array(np.asarray(value), name)

    nodes = [h.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
             h.make_node("Flatten", ["m"], ["flat"], axis=2),
             h.make_node("Shape", ["m"], ["shape"]),
             h.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
             h.make_node("Gather", ["shape", "one"], ["cols"], axis=0),
             h.make_node("Range", ["zero", "rows", "one"], ["row_ids"]),
             h.make_node("Range", ["zero", "cols", "one"], ["col_ids"]),
             h.make_node("Unsqueeze", ["row_ids", "ax1"], ["row_col"]),
             h.make_node("Unsqueeze", ["col_ids", "ax0"], ["col_row"]),
             h.make_node("Mul", ["row_col", "cols"], ["row_start"]),
             h.make_node("Add", ["row_start", "col_row"], ["index"]),
             h.make_node("Gather", ["flat", "index"], ["picked"], axis=0),
             h.make_node("Shape", ["index"], ["index_shape"]),
             h.make_node("Reshape", ["picked", "index_shape"], ["back"]),
             h.make_node("Sub", ["one_f", "back"], ["hidden"]),
             h.make_node("Mul", ["hidden", "big"], ["bias"]),
             h.make_node("Add", ["x", "bias"], ["scores"]),
             h.make_node("Softmax", ["scores"], ["y"], axis=-1)]
    inits = [const("zero", np.int64(0)), const("one", np.int64(1)), const("ax0", np.array([0], np.int64)),
             const("ax1", np.array([1], np.int64)), const("one_f", np.float32(1)), const("big", np.float32(-1e4))]
    graph = h.make_graph(nodes, "flat_mask", [h.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"]),
                                              h.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_a_mask_flattened_and_gathered_back_runs_masked_at_every_length(one_compiled_shape):
    """The merged [batch*seq] axis is laid out as the model at the actual length would (compacted), so the
    model's own batch*seq + position indices read the right entries; the reshape back spreads it out again."""
    model = _flattened_mask_softmax()
    art = core.compile(model, input_shapes={"x": "1..4,1..64"}, benchmark=False)
    assert len(art.metadata["dynamic_shapes"]["buckets"]) == 1
    assert art.metadata["dynamic_shapes"]["variables"][1]["masked"]
    run = ort_runner(model)
    rng = np.random.default_rng(8)
    with art.load() as module:
        for batch, seq in ((1, 1), (3, 5), (2, 33), (4, 47), (4, 64)):
            mask = (rng.random((batch, seq)) < 0.7).astype(np.int64)
            mask[:, 0] = 1
            feeds = {"x": rng.standard_normal((batch, seq)).astype(np.float32), "mask": mask}
            assert_same_outputs(module.run(feeds), run(feeds), rtol=1e-5, atol=1e-6)


def _rows_projection() -> bytes:
    """GPT-2's projections: x[batch, seq, 8] flattened to [batch*seq, 8] rows, times a weight, reshaped back by
    x's shape, then a softmax over the sequence (so seq runs masked while the merged batch stays padded)."""
    w = np.random.default_rng(9).standard_normal((8, 8)).astype(np.float32)
    nodes = [h.make_node("Reshape", ["x", "rows_shape"], ["rows"]),
             h.make_node("MatMul", ["rows", "w"], ["projected"]),
             h.make_node("Shape", ["x"], ["x_shape"]),
             h.make_node("Reshape", ["projected", "x_shape"], ["back"]),
             h.make_node("Softmax", ["back"], ["y"], axis=1)]
    graph = h.make_graph(nodes, "rows", [h.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])],
                         [nh.from_array(np.array([-1, 8], np.int64), "rows_shape"), nh.from_array(w, "w")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_a_batch_merged_into_matmul_rows_stays_padded_while_the_sequence_runs_masked(one_compiled_shape):
    model = _rows_projection()
    art = core.compile(model, input_shapes={"x": "1..4,1..16,8"}, benchmark=False)
    shapes = art.metadata["dynamic_shapes"]
    assert len(shapes["buckets"]) == 1
    assert [(v["name"], v["padded"], v["masked"]) for v in shapes["variables"]] == [("batch", True, False),
                                                                                    ("seq", False, True)]
    run = ort_runner(model)
    rng = np.random.default_rng(10)
    with art.load() as module:
        for batch, seq in ((1, 1), (3, 5), (2, 11), (4, 16)):
            feeds = {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32)}
            assert_same_outputs(module.run(feeds), run(feeds), rtol=1e-5, atol=1e-6)
