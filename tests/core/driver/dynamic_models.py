"""Small ONNX models with symbolic dims for the shape-bucket tests (onnx.helper, seeded weights)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper as h, numpy_helper as nh


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> bytes:
    graph = h.make_graph(nodes, "dyn", inputs, outputs, [nh.from_array(v, k) for k, v in inits.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def small_cnn(height="H", width="W", seed: int = 0) -> bytes:
    """x[N,3,H,W] -> conv 3x3 (4 channels) -> relu -> global average pool -> dense 5 -> softmax: y[N,5]."""
    rng = np.random.default_rng(seed)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
             "g": rng.standard_normal((4, 5)).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["a"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("GlobalAveragePool", ["r"], ["p"]), h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("MatMul", ["f", "g"], ["m"]), h.make_node("Softmax", ["m"], ["y"], axis=1)]
    return _model(nodes, [h.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, height, width])],
                  [h.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)


def tiny_encoder(vocab: int = 50, dim: int = 16, heads: int = 2, seed: int = 0) -> bytes:
    """input_ids[batch, seq] (int64) -> embedding -> one self-attention block (MatMul + Softmax) with a residual
    and LayerNormalization -> hidden[batch, seq, dim]."""
    rng = np.random.default_rng(seed)
    f32 = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    dh = dim // heads
    inits = {"emb": f32(vocab, dim), "wq": f32(dim, dim), "wk": f32(dim, dim), "wv": f32(dim, dim), "wo": f32(dim, dim),
             "gamma": np.ones(dim, np.float32), "beta": np.zeros(dim, np.float32),
             "heads_shape": np.array([0, 0, heads, dh], np.int64), "merge_shape": np.array([0, 0, dim], np.int64),
             "scale": np.array(1.0 / np.sqrt(dh), np.float32)}
    nodes = [h.make_node("Gather", ["emb", "input_ids"], ["x"])]
    for p in "qkv":
        nodes += [h.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"]),
                  h.make_node("Reshape", [f"{p}0", "heads_shape"], [f"{p}1"]),
                  h.make_node("Transpose", [f"{p}1"], [p], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [h.make_node("MatMul", ["q", "k"], ["s0"]), h.make_node("Mul", ["s0", "scale"], ["s"]),
              h.make_node("Softmax", ["s"], ["attn"], axis=-1), h.make_node("MatMul", ["attn", "v"], ["c0"]),
              h.make_node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["c1", "merge_shape"], ["c"]), h.make_node("MatMul", ["c", "wo"], ["o"]),
              h.make_node("Add", ["o", "x"], ["res"]),
              h.make_node("LayerNormalization", ["res", "gamma", "beta"], ["hidden"], axis=-1)]
    return _model(nodes, [h.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
                  [h.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", dim])], inits)
