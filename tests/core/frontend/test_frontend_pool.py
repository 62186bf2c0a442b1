"""MaxPool, AveragePool and global pools (ceil_mode, padding, count_include_pad) against ONNX Runtime."""
from __future__ import annotations

import pytest
from onnx import helper

from core.errors import UnsupportedOpError
from core.frontend import import_onnx

F32 = "float32"

WINDOWS = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 0, 0, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "strides": [3, 2], "pads": [2, 1, 2, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 1]},
]


@pytest.mark.parametrize("attrs", WINDOWS)
def test_max_pool(attrs, onnx_model, check_ort):
    model = onnx_model([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], {"x": (F32, [2, 3, 10, 9])}, {"y": F32})
    check_ort(model)


def test_max_pool_with_dilations(onnx_model, check_ort):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 3], pads=[1, 1, 1, 1])
    check_ort(onnx_model([node], {"x": (F32, [1, 2, 11, 12])}, {"y": F32}))


@pytest.mark.parametrize("attrs", WINDOWS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(attrs, count_include_pad, onnx_model, check_ort):
    node = helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=count_include_pad, **attrs)
    check_ort(onnx_model([node], {"x": (F32, [2, 3, 10, 9])}, {"y": F32}))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool1d_is_lifted_to_2d(op, onnx_model, check_ort):
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3], strides=[2], pads=[1, 1])
    graph = check_ort(onnx_model([node], {"x": (F32, [2, 3, 12])}, {"y": F32}))
    assert [n.op for n in graph.nodes] == ["Reshape", op, "Reshape"]


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [[2, 3, 5, 6], [2, 3, 7], [1, 2, 3, 4, 5]])
def test_global_pools(op, shape, onnx_model, check_ort):
    check_ort(onnx_model([helper.make_node(op, ["x"], ["y"])], {"x": (F32, shape)}, {"y": F32}))


def test_max_pool_indices_output_uses_the_indexed_pool(onnx_model):
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])]
    model = onnx_model(nodes, {"x": (F32, [1, 1, 4, 4])}, {"y": F32, "i": "int64"})
    assert [node.op for node in import_onnx(model).nodes] == ["MaxPoolWithIndices"]


def test_average_pool_opset10_ceil_mode(onnx_model, check_ort):
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    check_ort(onnx_model([node], {"x": (F32, [1, 2, 8, 8])}, {"y": F32}, opset=10))
