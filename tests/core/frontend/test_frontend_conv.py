"""Conv converter (2-D, 1-D lifted to 2-D, groups, auto_pad) compared with ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.errors import KilnError
from core.frontend import import_onnx

F32 = "float32"


def _weights(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.3


@pytest.mark.parametrize("attrs,x_shape,w_shape", [
    ({}, [1, 3, 9, 9], [4, 3, 3, 3]),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, [2, 3, 10, 11], [5, 3, 3, 3]),
    ({"pads": [0, 2, 1, 0], "dilations": [2, 1]}, [1, 2, 12, 12], [3, 2, 3, 2]),
    ({"group": 2, "pads": [1, 1, 1, 1]}, [1, 4, 8, 8], [6, 2, 3, 3]),
    ({"group": 6, "strides": [2, 1], "pads": [1, 1, 1, 1]}, [1, 6, 9, 7], [6, 1, 3, 3]),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, [1, 3, 9, 8], [4, 3, 4, 3]),
    ({"auto_pad": "SAME_LOWER", "strides": [2, 3]}, [1, 3, 9, 8], [4, 3, 4, 3]),
    ({"auto_pad": "VALID", "strides": [3, 2]}, [1, 3, 11, 8], [2, 3, 3, 3]),
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, [1, 1, 7, 7], [2, 1, 5, 5]),
])
def test_conv2d(attrs, x_shape, w_shape, onnx_model, check_ort):
    m = w_shape[0]
    model = onnx_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": (F32, x_shape)},
                       {"y": F32}, initializers={"w": _weights(w_shape), "b": _weights([m], 1)})
    graph = check_ort(model)
    assert [n.op for n in graph.nodes] == ["Conv"]


def test_conv_without_bias_and_dynamic_weights(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       {"x": (F32, [1, 2, 5, 5]), "w": (F32, [3, 2, 3, 3])}, {"y": F32}, opset=11)
    check_ort(model)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2], "pads": [1, 2], "dilations": [2]}, {"auto_pad": "SAME_UPPER"}])
def test_conv1d_is_lifted_to_2d(attrs, onnx_model, check_ort):
    model = onnx_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": (F32, [2, 3, 17])},
                       {"y": F32}, initializers={"w": _weights([4, 3, 3]), "b": _weights([4], 2)})
    graph = check_ort(model)
    assert [n.op for n in graph.nodes] == ["Reshape", "Conv", "Reshape"]
    assert graph.constants[graph.nodes[1].inputs[1]].shape == (4, 3, 1, 3)


def test_conv3d_becomes_conv_nd(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[1, 2, 1], dilations=[2, 1, 1])],
                       {"x": (F32, [1, 2, 6, 5, 4])}, {"y": F32}, initializers={"w": _weights([2, 2, 3, 3, 3])})
    graph = check_ort(model)
    assert [(n.op, n.attrs["strides"], n.attrs["dilations"]) for n in graph.nodes] == [("ConvND", (1, 2, 1), (2, 1, 1))]


def test_conv_of_a_6d_input_is_refused(onnx_model):
    model = onnx_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": (F32, [1, 2, 4, 4, 4, 4])}, {"y": F32},
                       initializers={"w": _weights([2, 2, 3, 3, 3, 3])})
    with pytest.raises(KilnError, match=r"convolution expects a \(N, C, L\) or .* input"):
        import_onnx(model)
