"""ONNX Runtime's com.microsoft contrib ops (GELU family, skip/simplified layer norms, FusedMatMul,
Attention, MultiHeadAttention, EmbedLayerNormalization, RotaryEmbedding): compiled by Kiln and
compared with ONNX Runtime, which runs them natively."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.errors import UnsupportedOpError
from core.frontend import import_onnx
from core.onnx_backend.backend import KilnBackend

from .conftest import make_model, run_ort

MS = "com.microsoft"
F32, I32, I64 = "float32", "int32", "int64"
rng = np.random.default_rng(21)


def _f(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def compiled_matches_ort(node, inputs: dict, outputs: dict, initializers=None, rtol=1e-4, atol=1e-5):
    """inputs: name -> array (graph inputs); initializers: name -> array (constants)."""
    model = make_model([node], {n: (str(a.dtype), list(a.shape)) for n, a in inputs.items()}, outputs,
                       initializers=initializers, domains={MS: 1})
    expected = run_ort(model, inputs)
    got = KilnBackend.prepare(model).run(inputs)
    for name, g, e in zip(outputs, got, expected):
        assert g.shape == e.shape, f"{name}: shape {g.shape} != ORT {e.shape}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)
    return model


@pytest.mark.parametrize("op,extra,attrs", [
    ("Gelu", {}, {}),
    ("BiasGelu", {"bias": _f(16)}, {}),
    ("FastGelu", {}, {}),
    ("FastGelu", {"bias": _f(16)}, {}),
    ("QuickGelu", {}, {"alpha": 1.5}),
])
def test_gelu_family(op, extra, attrs):
    node = helper.make_node(op, ["x"] + list(extra), ["y"], domain=MS, **attrs)
    compiled_matches_ort(node, {"x": _f(2, 3, 16, scale=2)}, {"y": F32}, initializers=extra)


@pytest.mark.parametrize("with_beta,with_bias,sum_out", [(True, False, False), (True, True, True), (False, True, False)])
def test_skip_layer_normalization(with_beta, with_bias, sum_out):
    names = ["x", "skip", "gamma", "beta" if with_beta else "", "bias" if with_bias else ""]
    consts = {"gamma": _f(32), "beta": _f(32), "bias": _f(32)}
    outputs = ["y", "", "", "sum"] if sum_out else ["y"]
    node = helper.make_node("SkipLayerNormalization", names, outputs, domain=MS, epsilon=1e-5)
    compiled_matches_ort(node, {"x": _f(2, 5, 32), "skip": _f(2, 5, 32)}, {o: F32 for o in outputs if o},
                         initializers={k: v for k, v in consts.items() if k in names})


def test_simplified_layer_normalizations():
    # ONNX Runtime registers SimplifiedLayerNormalization in the ONNX domain (onnx.checker has no schema for it).
    rms = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=1e-6)
    compiled_matches_ort(rms, {"x": _f(2, 4, 24)}, {"y": F32}, initializers={"scale": _f(24)})
    skip = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "scale", "bias"], ["y", "", "", "sum"],
                            domain=MS, epsilon=1e-6)
    compiled_matches_ort(skip, {"x": _f(2, 4, 24), "skip": _f(2, 4, 24)}, {"y": F32, "sum": F32},
                         initializers={"scale": _f(24), "bias": _f(24)})


@pytest.mark.parametrize("a_shape,b_shape,attrs", [
    ((2, 3, 8, 5), (2, 3, 5, 7), {"alpha": 0.5}),
    ((4, 8, 5), (4, 7, 5), {"transB": 1}),
    ((5, 8), (5, 7), {"transA": 1, "alpha": 2.0}),
])
def test_fused_matmul(a_shape, b_shape, attrs):
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, **attrs)
    compiled_matches_ort(node, {"a": _f(*a_shape), "b": _f(*b_shape)}, {"y": F32})


@pytest.mark.parametrize("mask,attrs", [
    (None, {}),
    ("lengths", {}),
    ("raw", {"mask_filter_value": -1e4}),
    (None, {"unidirectional": 1}),
    ("raw", {"qkv_hidden_sizes": [16, 16, 8], "scale": 0.3}),
])
def test_attention(mask, attrs):
    batch, seq, hidden, heads = 2, 6, 16, 2
    sizes = attrs.get("qkv_hidden_sizes", [hidden] * 3)
    inputs = {"x": _f(batch, seq, hidden)}
    names = ["x", "w", "b"]
    if mask == "lengths":
        inputs["mask"] = np.array([4, 6], np.int32)
    elif mask == "raw":
        inputs["mask"] = (rng.random((batch, seq)) < 0.7).astype(np.int32)
        inputs["mask"][:, 0] = 1
    if mask:
        names.append("mask")
    node = helper.make_node("Attention", names, ["y"], domain=MS, num_heads=heads, **attrs)
    compiled_matches_ort(node, inputs, {"y": F32}, initializers={"w": _f(hidden, sum(sizes), scale=0.3),
                                                                 "b": _f(sum(sizes), scale=0.1)})


def test_attention_with_attention_bias():
    inputs = {"x": _f(1, 5, 8), "bias": _f(1, 2, 5, 5)}
    node = helper.make_node("Attention", ["x", "w", "", "", "", "bias"], ["y"], domain=MS, num_heads=2)
    compiled_matches_ort(node, inputs, {"y": F32}, initializers={"w": _f(8, 24, scale=0.3)})


@pytest.mark.parametrize("past,key_mask", [(False, False), (False, True), (True, False)])
def test_multi_head_attention(past, key_mask):
    """Cross-attention (5 keys for 3 queries), with a key padding mask, and causal self-attention
    decoding after 4 cached positions (present = past + new)."""
    batch, q_len, heads, hidden = 2, 3, 2, 8
    kv_len = q_len if past else 5
    inputs = {"q": _f(batch, q_len, hidden), "k": _f(batch, kv_len, hidden), "v": _f(batch, kv_len, hidden)}
    names, outputs = ["q", "k", "v", "bias", "", ""], {"y": F32}
    if key_mask:
        inputs["mask"] = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)[:, :kv_len]
        names[4] = "mask"
    if past:
        inputs.update(past_k=_f(batch, heads, 4, hidden // heads), past_v=_f(batch, heads, 4, hidden // heads))
        names += ["past_k", "past_v"]
        outputs.update(present_k=F32, present_v=F32)
    node = helper.make_node("MultiHeadAttention", names, list(outputs), domain=MS, num_heads=heads,
                            unidirectional=int(past))
    compiled_matches_ort(node, inputs, outputs, initializers={"bias": _f(3 * hidden, scale=0.1)})


@pytest.mark.parametrize("segments,mask,positions", [(True, True, False), (False, False, False), (True, True, True)])
def test_embed_layer_normalization(segments, mask, positions):
    batch, seq, vocab, hidden = 2, 7, 30, 16
    inputs = {"ids": rng.integers(0, vocab, (batch, seq)).astype(np.int32)}
    consts = {"word": _f(vocab, hidden), "pos": _f(16, hidden), "gamma": _f(hidden), "beta": _f(hidden)}
    names = ["ids", "", "word", "pos", "", "gamma", "beta", "", ""]
    if segments:
        inputs["seg"] = rng.integers(0, 2, (batch, seq)).astype(np.int32)
        consts["segw"] = _f(2, hidden)
        names[1], names[4] = "seg", "segw"
    if mask:
        inputs["mask"] = np.array([[1] * 5 + [0] * 2, [1] * 7], np.int32)
        names[7] = "mask"
    if positions:
        inputs["positions"] = rng.integers(0, 16, (batch, seq)).astype(np.int32)
        names[8] = "positions"
    outputs = {"y": F32, "mask_index": I32}
    node = helper.make_node("EmbedLayerNormalization", names, list(outputs), domain=MS, epsilon=1e-5)
    compiled_matches_ort(node, inputs, outputs, initializers=consts)


@pytest.mark.parametrize("interleaved,offset", [(0, False), (1, False), (0, True)])
def test_rotary_embedding(interleaved, offset):
    batch, seq, heads, head_size = 2, 5, 2, 8
    positions = np.array([3], np.int64) if offset else rng.integers(0, 12, (batch, seq)).astype(np.int64)
    inputs = {"x": _f(batch, seq, heads * head_size), "positions": positions}
    node = helper.make_node("RotaryEmbedding", ["x", "positions", "cos", "sin"], ["y"], domain=MS,
                            interleaved=interleaved, num_heads=heads)
    angles = np.arange(16)[:, None] * (1.0 / 10000 ** (np.arange(head_size // 2) / (head_size // 2)))
    compiled_matches_ort(node, inputs, {"y": F32}, initializers={"cos": np.cos(angles).astype(np.float32),
                                                                 "sin": np.sin(angles).astype(np.float32)})


def test_attention_with_past_state_is_refused_clearly():
    node = helper.make_node("Attention", ["x", "w", "", "", "past"], ["y", "present"], domain=MS, num_heads=2)
    model = make_model([node], {"x": (F32, [1, 2, 8]), "past": (F32, [2, 1, 2, 3, 4])}, {"y": F32, "present": F32},
                       initializers={"w": _f(8, 24)}, domains={MS: 1})
    with pytest.raises(UnsupportedOpError, match=r"Attention .*past/present state"):
        import_onnx(model)
