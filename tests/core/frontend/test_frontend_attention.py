"""Attention, FlexAttention, RotaryEmbedding, LinearAttention and CausalConvWithState compiled to native code,
compared with ONNX's reference implementation."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from core.onnx_backend.backend import KilnBackend
from core.errors import ShapeError
from core.frontend import import_onnx

_ELEM = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bool": TensorProto.BOOL,
         "int64": TensorProto.INT64}


def _model(node, inputs: dict, outputs: dict, opset: int):
    """inputs/outputs: name -> (dtype, shape)."""
    info = lambda n, d, s: helper.make_tensor_value_info(n, _ELEM[d], s)  # noqa: E731
    graph = helper.make_graph([node], "attention", [info(n, d, s) for n, (d, s) in inputs.items()],
                              [info(n, d, s) for n, (d, s) in outputs.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(inputs: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {n: (rng.random(s) < 0.7 if d == "bool" else rng.standard_normal(s).astype(d))
            for n, (d, s) in inputs.items() if d != "int64"}


def _check(model, feeds: dict, rtol=1e-5, atol=1e-6, rep=None):
    rep = rep or KilnBackend.prepare(model)
    ours = rep.run(feeds)
    expected = ReferenceEvaluator(model).run(None, feeds)
    for name, got, want in zip([o.name for o in model.graph.output], ours, expected):
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=rtol, atol=atol, err_msg=name)
    return ours


def test_grouped_query_attention_with_past_mask_and_every_output():
    # 6 query heads share 2 KV heads; a 2-key past; the float mask covers only the first 4 of 5 keys
    # (the rest is padded with -inf); all four outputs, scores exposed with their bias (mode 2).
    b, hq, hkv, s, past, d = 2, 6, 2, 3, 2, 4
    inputs = {"q": ("float32", [b, hq, s, d]), "k": ("float32", [b, hkv, s, d]), "v": ("float32", [b, hkv, s, 5]),
              "mask": ("float32", [s, 4]), "past_k": ("float32", [b, hkv, past, d]),
              "past_v": ("float32", [b, hkv, past, 5])}
    outputs = {"y": ("float32", [b, hq, s, 5]), "present_k": ("float32", [b, hkv, s + past, d]),
               "present_v": ("float32", [b, hkv, s + past, 5]), "qk": ("float32", [b, hq, s, s + past])}
    node = helper.make_node("Attention", list(inputs), list(outputs), is_causal=1, qk_matmul_output_mode=2)
    _check(_model(node, inputs, outputs, 23), _feeds(inputs))


@pytest.mark.parametrize("mode", [0, 1, 3])
def test_3d_inputs_with_bool_mask_scale_and_softcap(mode):
    inputs = {"q": ("float32", [2, 3, 16]), "k": ("float32", [2, 5, 8]), "v": ("float32", [2, 5, 6]),
              "mask": ("bool", [2, 1, 3, 5])}
    outputs = {"y": ("float32", [2, 3, 12]), "present_k": ("float32", [2, 2, 5, 4]),
               "present_v": ("float32", [2, 2, 5, 3]), "qk": ("float32", [2, 4, 3, 5])}
    node = helper.make_node("Attention", list(inputs), list(outputs), q_num_heads=4, kv_num_heads=2, scale=0.3,
                            softcap=2.0, qk_matmul_output_mode=mode)
    _check(_model(node, inputs, outputs, 23), _feeds(inputs, seed=1))


def test_a_fully_masked_row_attends_to_nothing_instead_of_nan():
    inputs = {"q": ("float32", [1, 2, 3, 4]), "k": ("float32", [1, 2, 4, 4]), "v": ("float32", [1, 2, 4, 4]),
              "mask": ("bool", [3, 4])}
    outputs = {"y": ("float32", [1, 2, 3, 4])}
    feeds = _feeds(inputs, seed=2)
    feeds["mask"][1] = False
    (y,) = _check(_model(helper.make_node("Attention", list(inputs), ["y"]), inputs, outputs, 23), feeds)
    assert np.all(y[:, :, 1] == 0) and np.isfinite(y).all()


def test_external_cache_lengths_are_read_at_run_time():
    # nonpad_kv_seqlen is an ordinary input: one compiled model serves any per-batch lengths.
    inputs = {"q": ("float32", [2, 4, 2, 8]), "k": ("float32", [2, 2, 6, 8]), "v": ("float32", [2, 2, 6, 8]),
              "lens": ("int64", [2])}
    node = helper.make_node("Attention", ["q", "k", "v", "", "", "", "lens"], ["y"], is_causal=1)
    model = _model(node, inputs, {"y": ("float32", [2, 4, 2, 8])}, 24)
    rep = KilnBackend.prepare(model)
    for lens in ([6, 3], [2, 5]):
        _check(model, {**_feeds(inputs, seed=3), "lens": np.array(lens, np.int64)}, rep=rep)


@pytest.mark.parametrize("left,right", [(1, -1), (2, 0), (-1, 1)])
def test_sliding_window(left, right):
    inputs = {"q": ("float32", [1, 2, 5, 4]), "k": ("float32", [1, 2, 5, 4]), "v": ("float32", [1, 2, 5, 4])}
    node = helper.make_node("Attention", list(inputs), ["y"], left_window_size=left, right_window_size=right)
    _check(_model(node, inputs, {"y": ("float32", [1, 2, 5, 4])}, 25), _feeds(inputs, seed=4))


def test_float16_attention_accumulates_in_float32():
    inputs = {"q": ("float16", [1, 2, 4, 32]), "k": ("float16", [1, 2, 16, 32]), "v": ("float16", [1, 2, 16, 32])}
    node = helper.make_node("Attention", list(inputs), ["y"], is_causal=1)
    model = _model(node, inputs, {"y": ("float16", [1, 2, 4, 32])}, 23)
    feeds = {n: (v * 2).astype(np.float16) for n, v in _feeds(inputs, seed=5).items()}
    _check(model, feeds, rtol=2e-3, atol=2e-3)
    assert [n.op for n in import_onnx(model).nodes].count("Cast") >= 3


def test_query_heads_must_be_a_multiple_of_kv_heads():
    inputs = {"q": ("float32", [1, 3, 2, 4]), "k": ("float32", [1, 2, 2, 4]), "v": ("float32", [1, 2, 2, 4])}
    model = _model(helper.make_node("Attention", list(inputs), ["y"]), inputs, {"y": ("float32", [1, 3, 2, 4])}, 23)
    with pytest.raises(ShapeError, match="Attention.*3 query heads.*2 key/value heads"):
        import_onnx(model)


@pytest.mark.parametrize("interleaved,rotary_dim", [(0, 0), (1, 0), (0, 4), (1, 4)])
def test_rotary_embedding_4d_with_position_ids(interleaved, rotary_dim):
    inputs = {"x": ("float32", [2, 3, 5, 8]), "cos": ("float32", [7, (rotary_dim or 8) // 2]),
              "sin": ("float32", [7, (rotary_dim or 8) // 2]), "pos": ("int64", [2, 5])}
    node = helper.make_node("RotaryEmbedding", list(inputs), ["y"], interleaved=interleaved,
                            rotary_embedding_dim=rotary_dim)
    feeds = {**_feeds(inputs, seed=6), "pos": np.random.default_rng(7).integers(0, 7, (2, 5))}
    _check(_model(node, inputs, {"y": ("float32", [2, 3, 5, 8])}, 23), feeds)


def test_rotary_embedding_3d_without_position_ids():
    inputs = {"x": ("float32", [2, 5, 12]), "cos": ("float32", [2, 5, 2]), "sin": ("float32", [2, 5, 2])}
    node = helper.make_node("RotaryEmbedding", list(inputs), ["y"], num_heads=2, rotary_embedding_dim=4)
    _check(_model(node, inputs, {"y": ("float32", [2, 5, 12])}, 23), _feeds(inputs, seed=8))


# decay_width: kv_heads (one decay per head) or kv_heads * head_size (one per key dimension).
@pytest.mark.parametrize("rule,q_heads,kv_heads,decay_width,beta_width,past", [
    ("linear", 2, 2, None, None, False),
    ("gated", 4, 2, 2, None, True),  # grouped query heads
    ("delta", 2, 2, None, 1, False),  # one beta for all heads
    ("gated_delta", 4, 1, 4, 1, True),  # a single KV head
])
def test_linear_attention_update_rules(rule, q_heads, kv_heads, decay_width, beta_width, past):
    d = 4
    inputs = {"q": ("float32", [2, 3, q_heads * d]), "k": ("float32", [2, 3, kv_heads * d]),
              "v": ("float32", [2, 3, kv_heads * d])}
    names = ["q", "k", "v", "", "", ""]
    if past:
        inputs["past"], names[3] = ("float32", [2, kv_heads, d, d]), "past"
    if decay_width:
        inputs["decay"], names[4] = ("float32", [2, 3, decay_width]), "decay"
    if beta_width:
        inputs["beta"], names[5] = ("float32", [2, 3, beta_width]), "beta"
    node = helper.make_node("LinearAttention", names, ["y", "state"], update_rule=rule, q_num_heads=q_heads,
                            kv_num_heads=kv_heads)
    outputs = {"y": ("float32", [2, 3, q_heads * d]), "state": ("float32", [2, kv_heads, d, d])}
    feeds = _feeds(inputs, seed=9)
    if "decay" in feeds:
        feeds["decay"] = -np.abs(feeds["decay"])  # log decay factors
    _check(_model(node, inputs, outputs, 27), feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("taps,past,bias,activation", [(4, False, False, "none"), (3, True, True, "silu"),
                                                       (1, False, True, "swish")])
def test_causal_conv_with_state(taps, past, bias, activation):
    inputs = {"x": ("float32", [2, 3, 5]), "w": ("float32", [3, 1, taps])}
    names = ["x", "w", "", ""]
    if bias:
        inputs["b"], names[2] = ("float32", [3]), "b"
    if past:
        inputs["past"], names[3] = ("float32", [2, 3, taps - 1]), "past"
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], activation=activation)
    outputs = {"y": ("float32", [2, 3, 5]), "state": ("float32", [2, 3, taps - 1])}
    _check(_model(node, inputs, outputs, 27), _feeds(inputs, seed=10))


def test_flex_attention_inlines_its_modifier_subgraphs():
    # score_mod adds a relative-position bias and caps scores; prob_mod rescales probabilities; GQA 4:2.
    shape = [1, 4, 3, 5]
    info = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)  # noqa: E731
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [3, 5], (np.arange(15) % 4 - 2.0).tolist())
    score_mod = helper.make_graph([helper.make_node("Add", ["s", "bias"], ["biased"]),
                                   helper.make_node("Tanh", ["biased"], ["s_out"])], "score_mod",
                                  [info("s")], [info("s_out")], [bias])
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    prob_mod = helper.make_graph([helper.make_node("Mul", ["p", "half"], ["p_out"])], "prob_mod",
                                 [info("p")], [info("p_out")], [half])
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", scale=0.4,
                            score_mod=score_mod, prob_mod=prob_mod)
    inputs = {"q": ("float32", [1, 4, 3, 8]), "k": ("float32", [1, 2, 5, 8]), "v": ("float32", [1, 2, 5, 6])}
    model = _model(node, inputs, {"y": ("float32", [1, 4, 3, 6])}, 26)
    model.opset_import.append(helper.make_opsetid("ai.onnx.preview", 1))
    _check(model, _feeds(inputs, seed=11))
