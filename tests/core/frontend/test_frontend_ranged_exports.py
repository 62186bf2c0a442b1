"""Real exports with every symbolic dim ranged: a transformers T5 decoder with past (its causal mask built over
past + new tokens from shapes, a slice-assign of the padding mask, its position bias cut to the new tokens with
x[-n:]) compiles once and matches ONNX Runtime at sizes in range; a start counted from the end follows the
run-time length (and is not taken as one where the length may be 0)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper as h

import core

from tests.core.driver.dynamic_models import assert_same_outputs

DATA = Path(__file__).parent / "data"
PAST = [f"past_key_values.{i}.decoder.{n}" for i in range(2) for n in ("key", "value")]


@pytest.fixture
def one_compiled_shape(monkeypatch):
    """The upper bounds alone serve every size: each size below them runs on the run-time lengths."""
    monkeypatch.setattr("core.driver.shape_plan.DEFAULT_SHAPES", 1)
    monkeypatch.setattr("core.driver.shape_plan.LENGTH_CLASSES", 0)


def _ort_run(model):
    session = ort.InferenceSession(str(model) if isinstance(model, Path) else model)
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds)))


def _t5_feeds(rng, batch: int, new: int, source: int, past: int) -> dict:
    mask = np.ones((batch, source), np.int64)
    mask[0, source // 2 + 1:] = 0  # one source row padded
    return {"input_ids": rng.integers(0, 48, (batch, new)).astype(np.int64),
            "encoder_hidden_states": rng.standard_normal((batch, source, 16)).astype(np.float32),
            "encoder_attention_mask": mask,
            **{n: rng.standard_normal((batch, 2, past, 8)).astype(np.float32) for n in PAST}}


def test_t5_decoder_with_past_compiles_once_with_every_dim_ranged_and_decodes_like_onnxruntime(one_compiled_shape):
    model = DATA / "t5_tiny_decoder.onnx"  # export_t5_decoder.py: 2 layers, 2 heads, d_model 16, vocab 48
    shapes = {"input_ids": "1..3,1..8", "encoder_hidden_states": "1..3,1..16,16",
              "past_key_values.0.decoder.key": "1..3,2,0..24,8"}
    art = core.compile(str(model), input_shapes=shapes, benchmark=False)
    variables = {v["name"]: v for v in art.metadata["dynamic_shapes"]["variables"]}
    assert len(art.metadata["dynamic_shapes"]["buckets"]) == 1
    assert all(variables[n]["masked"] for n in ("decoder_sequence_length", "encoder_sequence_length",
                                                "past_decoder_sequence_length"))
    run = _ort_run(model)
    rng = np.random.default_rng(3)
    with art.load() as module:
        for batch, new, source, past in ((1, 1, 5, 0), (3, 1, 16, 23), (2, 4, 7, 9), (1, 8, 1, 16)):
            feeds = _t5_feeds(rng, batch, new, source, past)
            assert_same_outputs(module.run(feeds), run(feeds), atol=1e-4)
        # greedy decoding over a growing cache: the same tokens, step for step
        feeds = _t5_feeds(rng, 2, 1, 11, 0)
        feeds["input_ids"][:] = 0
        tokens = {}
        for engine, step in (("kiln", module.run), ("onnxruntime", run)):
            state, tokens[engine] = dict(feeds), []
            for _ in range(12):
                out = step(state)
                state["input_ids"] = out["logits"][:, -1].argmax(-1).reshape(2, 1).astype(np.int64)
                tokens[engine].append(state["input_ids"][:, 0].tolist())
                state.update({n: out[n.replace("past_key_values", "present")] for n in PAST})
        assert tokens["kiln"] == tokens["onnxruntime"]


def _tail_model() -> bytes:
    """y = softmax(x[:, -Shape(q)[1]:] * 2 + q): the last S entries of x [1, T], with S the length of q [1, S]
    (the softmax over S: S cannot be zero-padded, it runs on its run-time length)."""
    nodes = [h.make_node("Shape", ["q"], ["qs"]), h.make_node("Gather", ["qs", "one"], ["s"], axis=0),
             h.make_node("Neg", ["s"], ["start"]), h.make_node("Unsqueeze", ["start", "zero"], ["starts"]),
             h.make_node("Slice", ["x", "starts", "big", "one_axis"], ["tail"]),
             h.make_node("Mul", ["tail", "two"], ["doubled"]), h.make_node("Add", ["doubled", "q"], ["scores"]),
             h.make_node("Softmax", ["scores"], ["y"], axis=1)]
    inits = [h.make_tensor("one", TensorProto.INT64, [], [1]), h.make_tensor("zero", TensorProto.INT64, [1], [0]),
             h.make_tensor("big", TensorProto.INT64, [1], [2 ** 62]),
             h.make_tensor("one_axis", TensorProto.INT64, [1], [1]), h.make_tensor("two", TensorProto.FLOAT, [], [2.0])]
    graph = h.make_graph(nodes, "tail", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T"]),
                                         h.make_tensor_value_info("q", TensorProto.FLOAT, [1, "S"])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, "S"])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_a_slice_start_counted_back_from_the_end_follows_the_run_time_length(one_compiled_shape):
    model = _tail_model()
    art = core.compile(model, input_shapes={"x": "1,8..32", "q": "1,1..8"}, benchmark=False)
    run = _ort_run(model)
    rng = np.random.default_rng(0)
    with art.load() as module:
        for total, tail in ((8, 1), (19, 5), (32, 8), (9, 8)):
            feeds = {"x": rng.standard_normal((1, total)).astype(np.float32),
                     "q": rng.standard_normal((1, tail)).astype(np.float32)}
            assert_same_outputs(module.run(feeds), run(feeds))


def test_a_start_that_may_be_minus_zero_is_not_counted_from_the_end(one_compiled_shape):
    """x[-0:] is all of x: with S in 0..8 the start is not always negative, so S gets no run-time length from
    the from-the-end rewrite; it runs at its compiled sizes, which match ONNX Runtime."""
    model = _tail_model()
    art = core.compile(model, input_shapes={"x": "1,8..32", "q": "1,0..8"}, benchmark=False)
    variables = {v["name"]: v for v in art.metadata["dynamic_shapes"]["variables"]}
    assert not variables["S"]["masked"] and not variables["S"]["padded"]
    run = _ort_run(model)
    with art.load() as module:
        for total, tail in ((8, 1), (32, 8)):
            feeds = {"x": np.linspace(0, 1, total, dtype=np.float32).reshape(1, total),
                     "q": np.ones((1, tail), np.float32)}
            assert_same_outputs(module.run(feeds), run(feeds))
