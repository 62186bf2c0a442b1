"""fuse_attention: MatMul [* / scalar] [+ bias] -> Softmax [-> Where(IsNaN)] -> MatMul becomes one SoftmaxAttention
with the same values; a constant causal mask becomes causal=1 (fused at any size; unmasked heads only from
MIN_SCORES); chains whose pieces are read elsewhere, broadcast heads or a softmax over another axis stay as they
are. One exported-style decoder compiles and matches ORT."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.graph.ir import Graph, Node, TensorType
from core.graph.passes.fuse_attention import fuse_attention
from tests.helpers.graphs import F32, assert_same_meaning, ops

rng = np.random.default_rng(11)
LOWEST = np.finfo(np.float32).min


def causal(m, n, fill=-np.inf):
    return np.where(np.arange(n)[None] <= np.arange(m)[:, None] + n - m, 0.0, fill).astype(np.float32)


def attention_graph(batch=(1, 2), m=6, d=8, n=10, e=8, scale=("Mul", 0.25), bias=None, guard=False, axis=-1,
                    kv_batch=None, extra_output=None):
    kv_batch = kv_batch or batch
    types = {"q": TensorType((*batch, m, d), F32), "kt": TensorType((*kv_batch, d, n), F32),
             "v": TensorType((*kv_batch, n, e), F32), "y": TensorType((*batch, m, e), F32)}
    scores = TensorType((*batch, m, n), F32)
    constants, nodes, x = {}, [Node("MatMul", ("q", "kt"), ("s",), {}, "qk")], "s"
    types["s"] = scores
    if scale:
        constants["c"] = np.array(scale[1], np.float32)
        types["c"], types["s2"] = TensorType((), F32), scores
        nodes.append(Node(scale[0], ("s", "c"), ("s2",), {}, "scale"))
        x = "s2"
    if bias is not None:
        constants["bias"] = bias
        types["bias"], types["s3"] = TensorType(bias.shape, F32), scores
        nodes.append(Node("Add", (x, "bias"), ("s3",), {}, "mask"))
        x = "s3"
    types["p"] = scores
    nodes.append(Node("Softmax", (x,), ("p",), {"axis": axis}, "softmax"))
    p = "p"
    if guard:
        constants["z"] = np.array(0.0, np.float32)
        types.update(z=TensorType((), F32), nan=TensorType(scores.shape, "bool"), pg=scores)
        nodes += [Node("IsNaN", ("p",), ("nan",), {}, "isnan"), Node("Where", ("nan", "z", "p"), ("pg",), {}, "guard")]
        p = "pg"
    nodes.append(Node("MatMul", (p, "v"), ("y",), {}, "pv"))
    outputs = ("y",) + ((extra_output,) if extra_output else ())
    return Graph(("q", "kt", "v"), outputs, tuple(nodes), types, constants, "hand")


@pytest.mark.parametrize("graph", [
    attention_graph(),
    attention_graph(scale=("Div", 8.0), bias=rng.standard_normal((2, 6, 10)).astype(np.float32)),
    attention_graph(scale=None, bias=rng.standard_normal((1, 1, 1, 10)).astype(np.float32)),
    attention_graph(batch=(3,), m=5, n=7),
], ids=["mul_scale", "div_scale_head_bias", "key_bias", "rank3"])
def test_fused_with_the_same_values(graph):
    assert fuse_attention(graph) is graph  # small unmasked heads stay three kernels by default (MIN_SCORES)
    fused = fuse_attention(graph, min_scores=0)
    assert ops(fused) == ["SoftmaxAttention"]
    assert_same_meaning(graph, fused)


def test_large_unmasked_heads_fused_by_default():
    graph = attention_graph(batch=(1,), m=1024, d=2, n=1024, e=2)
    assert ops(fuse_attention(graph)) == ["SoftmaxAttention"]


@pytest.mark.parametrize("fill", [-np.inf, LOWEST])
def test_constant_causal_mask_becomes_positions(fill):
    graph = attention_graph(m=6, n=10, bias=causal(6, 10, fill)[None, None], guard=True)
    fused = fuse_attention(graph)
    (node,) = fused.nodes
    assert node.op == "SoftmaxAttention" and node.inputs == ("q", "kt", "v")
    assert node.attrs["causal"] == 1 and node.attrs["nan_to_zero"] == 1 and node.attrs["scale"] == 0.25
    assert_same_meaning(graph, fused)


def test_a_mask_that_is_not_causal_stays_a_bias():
    mask = causal(6, 10)
    mask[3, 0] = -np.inf
    (node,) = fuse_attention(attention_graph(bias=mask), min_scores=0).nodes
    assert node.attrs["causal"] == 0 and node.inputs[3] == "bias"


@pytest.mark.parametrize("graph", [
    attention_graph(axis=2),  # softmax over the queries
    attention_graph(kv_batch=(1, 1)),  # heads broadcast over K and V
    attention_graph(extra_output="p"),  # the probabilities are an output too
    attention_graph(extra_output="s"),  # so are the raw scores
], ids=["other_axis", "broadcast_heads", "probs_read", "scores_read"])
def test_left_alone(graph):
    assert fuse_attention(graph, min_scores=0) is graph


def _decoder_onnx(seq=16, dim=32, heads=2):
    """One causal self-attention as PyTorch exports it: a constant mask added, the NaN guard, heads split."""
    f = TensorProto.FLOAT
    head = dim // heads
    w = [numpy_helper.from_array((rng.standard_normal((dim, dim)) * 0.2).astype(np.float32), f"w{k}") for k in range(3)]
    consts = [numpy_helper.from_array(np.array(v, dtype), name) for name, v, dtype in [
        ("split", [1, seq, heads, head], np.int64), ("merge", [1, seq, dim], np.int64),
        ("scale", head ** -0.5, np.float32), ("zero", 0.0, np.float32)]]
    consts.append(numpy_helper.from_array(causal(seq, seq, LOWEST)[None, None], "mask"))
    nodes = []
    for k, name in enumerate("qkv"):
        nodes += [helper.make_node("MatMul", ["x", f"w{k}"], [f"{name}0"]),
                  helper.make_node("Reshape", [f"{name}0", "split"], [f"{name}1"]),
                  helper.make_node("Transpose", [f"{name}1"], [name],
                                   perm=[0, 2, 3, 1] if name == "k" else [0, 2, 1, 3])]
    nodes += [helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["s1"]),
              helper.make_node("Add", ["s1", "mask"], ["s2"]), helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
              helper.make_node("IsNaN", ["p"], ["nan"]), helper.make_node("Where", ["nan", "zero", "p"], ["pg"]),
              helper.make_node("MatMul", ["pg", "v"], ["o"]),
              helper.make_node("Transpose", ["o"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "merge"], ["y"])]
    graph = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("x", f, [1, seq, dim])],
                              [helper.make_tensor_value_info("y", f, [1, seq, dim])], w + consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_exported_causal_attention_compiles_and_matches_onnxruntime():
    import core

    artifact = core.compile(_decoder_onnx(), "native", 3)
    report = artifact.report
    assert any(k["ops"] == ["SoftmaxAttention"] for k in report["kernels"])
    assert not any("Softmax" in k["ops"] for k in report["kernels"])
    assert report["validation"]["max_abs_err"] < 1e-5
