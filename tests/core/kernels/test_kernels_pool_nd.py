"""PoolND (3-D pooling, dilated averages, LpPool) compiled vs ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from .spatial_cases import assert_kiln_matches_ort, assert_model_matches

rng = np.random.default_rng(5)
X3 = rng.standard_normal((1, 2, 7, 6, 8)).astype(np.float32)
X2 = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)

CASES = [
    ("MaxPool", X3, {"kernel_shape": [3, 2, 3], "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0], "ceil_mode": 1}),
    ("MaxPool", X3, {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 3]}),
    ("AveragePool", X3, {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1],
                         "count_include_pad": 1}),
    ("AveragePool", X3, {"kernel_shape": [3, 2, 2], "strides": [2, 2, 3], "pads": [1, 0, 1, 1, 1, 1], "ceil_mode": 1}),
    ("AveragePool", X2, {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [2, 1, 1, 1]}),
    ("AveragePool", X2, {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("LpPool", X2, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "p": 3}),
    ("LpPool", X2, {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER"}),
    ("LpPool", X3, {"kernel_shape": [2, 2, 2], "p": 1}),
]


@pytest.mark.parametrize("op,x,attrs", CASES)
def test_pool_nd_matches_ort(op, x, attrs):
    assert_kiln_matches_ort(helper.make_node(op, ["x"], ["y"], **attrs), {"x": x}, opset=19)


# Shapes the unpooling restores exactly: indices are flat over the unpooled shape.
@pytest.mark.parametrize("shape,attrs", [
    ((2, 3, 8, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 3, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # overlapping windows
    ((1, 2, 8, 7), {"kernel_shape": [3, 2], "strides": [2, 1], "storage_order": 1}),
])
def test_max_pool_indices_and_unpool_round_trip(shape, attrs):
    unpool_attrs = {k: v for k, v in attrs.items() if k != "storage_order"}
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], **attrs)]
    outputs = ["p", "i"]
    if not attrs.get("storage_order"):
        nodes.append(helper.make_node("MaxUnpool", ["p", "i"], ["u"], **unpool_attrs))
        outputs.append("u")
    x = rng.standard_normal(shape).astype(np.float32)
    graph = helper.make_graph(nodes, "unpool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    assert_model_matches(model, {"x": x})
