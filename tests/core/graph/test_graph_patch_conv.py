"""patch_conv_as_matmul: a Conv whose kernel equals its stride (no padding) becomes a MatMul over
patches with the same values; other convs are left alone."""
from __future__ import annotations

import numpy as np

from core.graph.ir import Graph, Node, TensorType
from core.graph.passes.patch_conv_as_matmul import patch_conv_as_matmul
from tests.helpers.graphs import F32, assert_same_meaning, ops

rng = np.random.default_rng(3)


def conv_graph(x_shape, w_shape, stride, pads=(0, 0, 0, 0), bias=True, group=1):
    n, _, h, w = x_shape
    m, _, kh, kw = w_shape
    ho, wo = (h + pads[0] + pads[2] - kh) // stride + 1, (w + pads[1] + pads[3] - kw) // stride + 1
    constants = {"w": rng.standard_normal(w_shape).astype(np.float32)}
    inputs = ("x", "w")
    types = {"x": TensorType(x_shape, F32), "w": TensorType(w_shape, F32), "c": TensorType((n, m, ho, wo), F32),
             "y": TensorType((n, m, ho, wo), F32)}
    if bias:
        constants["b"] = rng.standard_normal((m,)).astype(np.float32)
        types["b"] = TensorType((m,), F32)
        inputs += ("b",)
    attrs = {"strides": (stride, stride), "pads": pads, "dilations": (1, 1), "group": group}
    nodes = (Node("Conv", inputs, ("c",), attrs, "conv"), Node("Relu", ("c",), ("y",)))
    return Graph(("x",), ("y",), nodes, types, constants, "hand")


def test_patch_convs_become_one_matmul_with_the_same_values():
    # ViT-like 16x16/16 on 3 channels (with bias), a 4x4/4 on 16 channels without bias, a batch of 2
    for x_shape, w_shape, stride, bias in (((1, 3, 32, 48), (10, 3, 16, 16), 16, True),
                                           ((2, 16, 12, 8), (7, 16, 4, 4), 4, False)):
        graph = conv_graph(x_shape, w_shape, stride, bias=bias)
        after = patch_conv_as_matmul(graph)
        assert "Conv" not in ops(after) and ops(after).count("MatMul") == 1
        assert ("Add" in ops(after)) == bias
        assert_same_meaning(graph, after, rtol=1e-4, atol=1e-4)


def test_other_convs_stay_convs():
    kept = [conv_graph((1, 16, 12, 12), (8, 16, 4, 4), 2),  # overlapping windows
            conv_graph((1, 16, 12, 12), (8, 16, 4, 4), 4, pads=(1, 1, 1, 1)),  # padded
            conv_graph((1, 16, 14, 14), (8, 16, 4, 4), 4),  # 14 is not a whole number of windows
            conv_graph((1, 64, 12, 12), (8, 64, 2, 2), 2),  # a 2x2 window
            conv_graph((1, 3, 16, 16), (8, 3, 4, 4), 4),  # 48 deep: a stem the direct conv keeps
            conv_graph((1, 16, 12, 12), (8, 8, 4, 4), 4, group=2)]
    for graph in kept:
        assert patch_conv_as_matmul(graph) is graph
