"""Reshape/Flatten/Squeeze/Unsqueeze (opset 11 vs 13), Transpose, Concat, Expand, Tile, and the
constant-producing ops (Shape, Size, Constant, ConstantOfShape, Range) against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.errors import ShapeError
from core.frontend import import_onnx

F32 = "float32"


@pytest.mark.parametrize("target,allowzero,expected", [([0, -1], 0, (2, 12)), ([4, 0, 2], 0, (4, 3, 2)),
                                                       ([-1], 0, (24,)), ([2, 3, 4], 1, (2, 3, 4))])
def test_reshape(target, allowzero, expected, onnx_model, check_ort):
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=allowzero)
    model = onnx_model([node], {"x": (F32, [2, 3, 4])}, {"y": F32}, opset=14,
                       initializers={"shape": np.array(target, np.int64)})
    graph = check_ort(model)
    assert graph.type_of("y").shape == expected


def test_reshape_with_dynamic_shape_is_rejected(onnx_model):
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    model = onnx_model([node], {"x": (F32, [2, 3]), "shape": ("int64", [2])}, {"y": F32})
    with pytest.raises(ShapeError, match="shape .* must be a constant"):
        import_onnx(model)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis, onnx_model, check_ort):
    check_ort(onnx_model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], {"x": (F32, [2, 3, 4])}, {"y": F32}))


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [[1, -1], None])
def test_squeeze_opsets(opset, axes, onnx_model, check_ort):
    inits, inputs, attrs = {}, ["x"], {}
    if axes is not None and opset >= 13:
        inits["axes"], inputs = np.array(axes, np.int64), ["x", "axes"]
    elif axes is not None:
        attrs["axes"] = axes
    model = onnx_model([helper.make_node("Squeeze", inputs, ["y"], **attrs)], {"x": (F32, [2, 1, 3, 1])}, {"y": F32},
                       opset=opset, initializers=inits)
    graph = check_ort(model)
    assert [n.op for n in graph.nodes] == ["Reshape"]


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_opsets(opset, onnx_model, check_ort):
    axes = [0, -1, 2]
    if opset >= 13:
        node, inits = helper.make_node("Unsqueeze", ["x", "axes"], ["y"]), {"axes": np.array(axes, np.int64)}
    else:
        node, inits = helper.make_node("Unsqueeze", ["x"], ["y"], axes=axes), {}
    graph = check_ort(onnx_model([node], {"x": (F32, [2, 3])}, {"y": F32}, opset=opset, initializers=inits))
    assert graph.type_of("y").shape == (1, 2, 1, 3, 1)


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1]])
def test_transpose(perm, onnx_model, check_ort):
    attrs = {} if perm is None else {"perm": perm}
    check_ort(onnx_model([helper.make_node("Transpose", ["x"], ["y"], **attrs)], {"x": (F32, [2, 3, 4])}, {"y": F32}))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis, onnx_model, check_ort):
    shapes = {0: ([2, 3, 4], [1, 3, 4]), 1: ([2, 3, 4], [2, 5, 4]), -1: ([2, 3, 4], [2, 3, 1])}[axis]
    model = onnx_model([helper.make_node("Concat", ["a", "b", "a"], ["y"], axis=axis)],
                       {"a": (F32, shapes[0]), "b": (F32, shapes[1])}, {"y": F32})
    check_ort(model)


@pytest.mark.parametrize("x_shape,target", [([3, 1], [2, 3, 4]), ([2, 1, 4], [3, 1]), ([1], [1])])
def test_expand(x_shape, target, onnx_model, check_ort):
    model = onnx_model([helper.make_node("Expand", ["x", "shape"], ["y"])], {"x": (F32, x_shape)}, {"y": F32},
                       initializers={"shape": np.array(target, np.int64)})
    check_ort(model)


@pytest.mark.parametrize("repeats", [[2, 3], [1, 1], [3, 1], [0, 2]])
def test_tile(repeats, onnx_model, check_ort):
    model = onnx_model([helper.make_node("Tile", ["x", "r"], ["y"])], {"x": (F32, [2, 3])}, {"y": F32},
                       initializers={"r": np.array(repeats, np.int64)})
    check_ort(model)


@pytest.mark.parametrize("op,attrs,shape", [("DepthToSpace", {"blocksize": 2}, [1, 8, 3, 2]),
                                            ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [2, 8, 2, 3]),
                                            ("SpaceToDepth", {"blocksize": 2}, [1, 3, 4, 6])])
def test_block_rearrangements(op, attrs, shape, onnx_model, check_ort):
    graph = check_ort(onnx_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": (F32, shape)}, {"y": F32}))
    assert [n.op for n in graph.nodes] == ["Reshape", "Transpose", "Reshape"]


def test_shape_subgraph_folds_into_reshape(onnx_model, check_ort):
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = onnx_model(nodes, {"x": (F32, [2, 3, 4])}, {"y": F32},
                       initializers={"zero": np.array(0, np.int64), "axes0": np.array([0], np.int64),
                                     "minus1": np.array([-1], np.int64)})
    graph = check_ort(model)
    assert [n.op for n in graph.nodes] == ["Reshape"] and graph.nodes[0].attr("shape") == (2, 12)
    assert not graph.constants


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-2, -1), (0, 10)])
def test_shape_with_start_end(start, end, onnx_model, check_ort):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    nodes = [helper.make_node("Shape", ["x"], ["s"], **attrs), helper.make_node("Size", ["x"], ["n"])]
    graph = check_ort(onnx_model(nodes, {"x": (F32, [2, 3, 4])}, {"s": "int64", "n": "int64"}, opset=15))
    assert [n.op for n in graph.nodes] == ["Identity", "Identity"]


def test_constants_and_constant_of_shape(onnx_model, check_ort):
    value = numpy_helper.from_array(np.array([1.5, -2.0, 3.0], np.float32))
    nodes = [
        helper.make_node("Constant", [], ["c"], value=value),
        helper.make_node("Constant", [], ["shape"], value_ints=[2, 3]),
        helper.make_node("ConstantOfShape", ["shape"], ["filled"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("Add", ["filled", "c"], ["sum"]),
        helper.make_node("Mul", ["x", "sum"], ["y"]),
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"]),
    ]
    graph = check_ort(onnx_model(nodes, {"x": (F32, [2, 3])}, {"y": F32, "zeros": F32}))
    assert [n.op for n in graph.nodes] == ["Mul", "Identity"]


def test_range(onnx_model, check_ort):
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])]
    model = onnx_model(nodes, {"x": ("int64", [3])}, {"y": "int64"},
                       initializers={"start": np.array(10, np.int64), "limit": np.array(1, np.int64),
                                     "delta": np.array(-3, np.int64)})
    check_ort(model)
