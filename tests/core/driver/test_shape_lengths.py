"""Dims that cannot be zero-padded (a sequence under attention, a KV cache's length) run inside a bucket at any
size with the actual size as a run-time length: an encoder at sequence lengths between buckets and a decoder
generating with a growing KV cache from an empty one, each compared with ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper as h

import core
from core.driver.shape_ranges import DimRange
from core.runtime.loader import KilnRuntimeError

from tests.core.driver.dynamic_models import greedy_tokens, small_cnn, tiny_decoder, tiny_encoder

DECODER_SHAPES = {"input_ids": "1,1..8:1|8", "past_key_values.0.key": "1,2,0..40:40,4"}


def _ort_run(model: bytes):
    session = ort.InferenceSession(model)
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds)))


def test_ranges_may_start_at_zero_and_name_their_buckets():
    assert DimRange(0, 40, 40).sizes() == (40,) and DimRange(1, 384, choices=(8, 128, 384)).sizes() == (8, 128, 384)


def test_encoder_runs_sequence_lengths_between_buckets_and_matches_onnxruntime():
    model = tiny_encoder()
    art = core.compile(model, input_shapes={"input_ids": "1..2,1..16:8|16"}, benchmark=False)
    shapes = art.metadata["dynamic_shapes"]
    assert [(v["name"], v["padded"], v["masked"]) for v in shapes["variables"]] == [("batch", True, False),
                                                                                    ("seq", False, True)]
    assert shapes["masked_outputs"] == {"hidden": {1: {"variables": {"seq": 1}, "constant": 0}}}
    assert [2, 15] in [s["input_ids"] for s in art.report["validation"]["shapes"]]  # validated between buckets
    assert "masked in the next bucket" in art.report_html
    run = _ort_run(model)
    rng = np.random.default_rng(4)
    with art.load() as module:
        for batch, seq in ((1, 1), (2, 7), (1, 9), (2, 16)):
            feeds = {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64)}
            got, ref = module.run(feeds)["hidden"], run(feeds)["hidden"]
            assert got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
        with pytest.raises(KilnRuntimeError, match="is 17, outside the declared range 1..16"):
            module.run({"input_ids": np.zeros((1, 17), np.int64)})


def test_cnn_runs_image_sides_between_buckets_and_matches_onnxruntime():
    model = small_cnn("side", "side")
    art = core.compile(model, input_shapes={"x": "1..2,3,8..32:16|32,8..32:16|32"}, benchmark=False)
    assert [(v["name"], v["padded"], v["masked"]) for v in art.metadata["dynamic_shapes"]["variables"]] == [
        ("N", True, False), ("side", False, True)]  # conv and pool read zeros past the valid edge
    run = _ort_run(model)
    rng = np.random.default_rng(5)
    with art.load() as module:
        for batch, side in ((1, 8), (2, 9), (1, 17), (2, 32)):
            feeds = {"x": rng.standard_normal((batch, 3, side, side)).astype(np.float32)}
            np.testing.assert_allclose(module.run(feeds)["y"], run(feeds)["y"], rtol=1e-4, atol=1e-5)


def test_decoder_generates_the_same_tokens_as_onnxruntime_from_an_empty_cache():
    model = tiny_decoder()
    art = core.compile(model, input_shapes=DECODER_SHAPES, benchmark=False)
    assert len(art.metadata["dynamic_shapes"]["buckets"]) == 2  # one cache size, the prompt and the 1-token step
    assert [i["name"] for i in art.metadata["inputs"]][-1] == "past_key_values.1.value"  # lengths stay inside
    prompt = [3, 1, 4, 1, 5]
    expected, reference = greedy_tokens(_ort_run(model), prompt)
    with art.load() as module:
        tokens, outputs = greedy_tokens(module.run, prompt)
        assert tokens == expected
        for got, ref in zip(outputs, reference):  # present keys come back at past + new length
            for name, value in ref.items():
                assert got[name].shape == value.shape
                np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)
        feeds = {"input_ids": np.zeros((1, 2), np.int64), "attention_mask": np.ones((1, 5), np.int64),
                 **{f"past_key_values.{i}.{n}": np.zeros((1, 2, 2, 4), np.float32) for i in (0, 1)
                    for n in ("key", "value")}}
        with pytest.raises(KilnRuntimeError, match="attention_mask.*is 5, but the sizes of the other inputs make it 4"):
            module.run(feeds)


def test_ops_without_a_run_time_length_rule_keep_exact_buckets():
    """Padding along the sequence cannot take a run-time length: its sizes must match a bucket, as before."""
    graph = h.make_graph([h.make_node("Pad", ["x", "pads"], ["y"])], "pad",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, "L"])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, "L2"])],
                         [h.make_tensor("pads", TensorProto.INT64, [4], [0, 1, 0, 1])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    art = core.compile(model, input_shapes={"x": "1,1..8:4|8"}, benchmark=False)
    assert "padding along the data-dependent axis" in art.metadata["dynamic_shapes"]["not_padded"]["L"]
    with art.load() as module:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        np.testing.assert_array_equal(module.run({"x": x})["y"], np.pad(x, ((0, 0), (1, 1))))
        with pytest.raises(KilnRuntimeError, match="L is 5, but this model was compiled for 4, 8 only"):
            module.run({"x": np.zeros((1, 5), np.float32)})


def test_ranges_combine_with_half_precision_weights():
    model = tiny_encoder()
    art = core.compile(model, input_shapes={"input_ids": "1..2,1..16:8|16"}, precision="fp16", benchmark=False)
    assert art.metadata["precision"] == "fp16"  # validated against ONNX Runtime at float16's epsilon, or no artifact
    feeds = {"input_ids": np.random.default_rng(6).integers(0, 50, (2, 11)).astype(np.int64)}
    with art.load() as module:  # float16 weights: float16's epsilon, against ONNX Runtime's float32
        np.testing.assert_allclose(module.run(feeds)["hidden"], _ort_run(model)(feeds)["hidden"], rtol=2e-2, atol=2e-2)
