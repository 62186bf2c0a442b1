"""Unary, binary, variadic, Cast and Clip converters compared with ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

F32 = "float32"
SHAPE = [2, 3, 4]


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Abs", "Floor", "Ceil", "Identity"])
def test_unary_float_ops(op, onnx_model, check_ort):
    model = onnx_model([helper.make_node(op, ["x"], ["y"])], {"x": (F32, SHAPE)}, {"y": F32})
    check_ort(model)


@pytest.mark.parametrize("op", ["Sqrt", "Log", "Reciprocal"])
def test_unary_ops_on_positive_inputs(op, onnx_model, check_ort):
    model = onnx_model([helper.make_node(op, ["x"], ["y"])], {"x": (F32, SHAPE)}, {"y": F32})
    check_ort(model, {"x": np.random.default_rng(1).uniform(0.1, 4.0, SHAPE).astype(F32)})


def test_not_and_isnan(onnx_model, check_ort):
    nodes = [helper.make_node("IsNaN", ["x"], ["nan"]), helper.make_node("Not", ["nan"], ["y"])]
    model = onnx_model(nodes, {"x": (F32, SHAPE)}, {"y": "bool"})
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(F32)
    x[0, 1, 2] = np.nan
    check_ort(model, {"x": x})


@pytest.mark.parametrize("op,dtype", [("Add", F32), ("Sub", F32), ("Mul", F32), ("Div", F32), ("Max", F32),
                                      ("Min", F32), ("Add", "int64"), ("Mul", "int32"), ("Div", "int64"),
                                      ("Equal", "int64"), ("Less", F32), ("Greater", F32),
                                      ("LessOrEqual", "int64"), ("GreaterOrEqual", F32)])
def test_binary_ops_broadcast(op, dtype, onnx_model, check_ort):
    out = "bool" if op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual") else dtype
    model = onnx_model([helper.make_node(op, ["a", "b"], ["y"])], {"a": (dtype, [2, 3, 4]), "b": (dtype, [3, 1])},
                       {"y": out})
    feeds = {"a": np.random.default_rng(3).integers(-9, 10, (2, 3, 4)).astype(dtype),
             "b": np.array([[3], [-2], [4]]).astype(dtype)}
    if dtype == F32:
        feeds["a"] += np.float32(0.25)
    check_ort(model, feeds)


def test_integer_division_truncates_toward_zero(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Div", ["a", "b"], ["y"])], {"a": ("int64", [6]), "b": ("int64", [6])},
                       {"y": "int64"})
    check_ort(model, {"a": np.array([7, -7, 7, -7, 0, -1], np.int64), "b": np.array([2, 2, -2, -2, 3, 4], np.int64)})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_ops(op, onnx_model, check_ort):
    model = onnx_model([helper.make_node(op, ["a", "b"], ["y"])], {"a": ("bool", [3, 4]), "b": ("bool", [4])},
                       {"y": "bool"})
    check_ort(model)


def test_pow_with_integer_exponent(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Pow", ["a", "b"], ["y"])], {"a": (F32, [2, 3]), "b": ("int64", [3])},
                       {"y": F32})
    check_ort(model, {"a": np.random.default_rng(4).uniform(0.5, 2, (2, 3)).astype(F32),
                      "b": np.array([2, 3, -1], np.int64)})


def test_where(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Where", ["c", "x", "y"], ["z"])],
                       {"c": ("bool", [1, 4]), "x": (F32, [3, 1]), "y": (F32, [3, 4])}, {"z": F32})
    check_ort(model)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_ops_chain(op, onnx_model, check_ort):
    model = onnx_model([helper.make_node(op, ["a", "b", "c"], ["y"])],
                       {"a": (F32, [2, 3]), "b": (F32, [3]), "c": (F32, [2, 1])}, {"y": F32})
    graph = check_ort(model)
    assert len(graph.nodes) == 2 + (op == "Mean")


def test_variadic_single_input_still_produces_output(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Max", ["a"], ["y"])], {"a": (F32, [2, 3])}, {"y": F32})
    graph = check_ort(model)
    assert [n.op for n in graph.nodes] == ["Identity"]


@pytest.mark.parametrize("target,onnx_type", [("int64", TensorProto.INT64), ("bool", TensorProto.BOOL),
                                              ("float64", TensorProto.DOUBLE), ("int32", TensorProto.INT32)])
def test_cast(target, onnx_type, onnx_model, check_ort):
    model = onnx_model([helper.make_node("Cast", ["x"], ["y"], to=onnx_type)], {"x": (F32, [2, 5])}, {"y": target})
    check_ort(model, {"x": np.array([[0, 1.5, -2.7, 3.2, 0.0], [7, -0.4, 100.9, 2, -3]], np.float32)})


def test_cast_like(onnx_model, check_ort):
    model = onnx_model([helper.make_node("CastLike", ["x", "like"], ["y"])],
                       {"x": (F32, [4]), "like": ("int64", [1])}, {"y": "int64"})
    check_ort(model, {"x": np.array([1.7, -2.2, 0, 5], np.float32), "like": np.array([0], np.int64)})


def test_clip_opset6_attributes(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.7)], {"x": (F32, SHAPE)}, {"y": F32},
                       opset=6)
    graph = check_ort(model)
    assert dict(graph.nodes[0].attrs) == {"min": -0.5, "max": pytest.approx(0.7)}


def test_clip_opset6_default_bounds_mean_unbounded(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Clip", ["x"], ["y"], min=0.0)], {"x": (F32, SHAPE)}, {"y": F32}, opset=6)
    graph = check_ort(model)
    assert graph.nodes[0].attr("max") is None


@pytest.mark.parametrize("given", [("lo", "hi"), ("lo", ""), ("", "hi")])
def test_clip_opset13_inputs(given, onnx_model, check_ort):
    model = onnx_model([helper.make_node("Clip", ["x", *given], ["y"])], {"x": (F32, SHAPE)}, {"y": F32}, opset=13,
                       initializers={"lo": np.float32(-0.3), "hi": np.float32(0.6)})
    check_ort(model)


def test_clip_integer_input(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": ("int64", [8])}, {"y": "int64"},
                       opset=13, initializers={"lo": np.int64(-2), "hi": np.int64(3)})
    check_ort(model)


def test_clip_dynamic_bound_is_rejected(onnx_model):
    from core.errors import ShapeError
    from core.frontend import import_onnx
    model = onnx_model([helper.make_node("Clip", ["x", "lo"], ["y"])], {"x": (F32, SHAPE), "lo": (F32, [])},
                       {"y": F32}, opset=13)
    with pytest.raises(ShapeError, match="min .* must be a constant"):
        import_onnx(model)


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.1}), ("LeakyRelu", {}), ("HardSigmoid", {}),
                                      ("HardSwish", {}), ("Elu", {"alpha": 0.7}), ("Gelu", {}),
                                      ("Gelu", {"approximate": "tanh"})])
def test_activations(op, attrs, onnx_model, check_ort):
    model = onnx_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": (F32, SHAPE)}, {"y": F32}, opset=20)
    check_ort(model)


def test_prelu_with_channel_slope(onnx_model, check_ort):
    model = onnx_model([helper.make_node("PRelu", ["x", "slope"], ["y"])], {"x": (F32, [2, 3, 4, 4])}, {"y": F32},
                       initializers={"slope": np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1, 1)})
    check_ort(model)


def test_dropout_is_identity(onnx_model, check_ort):
    nodes = [helper.make_node("Dropout", ["x"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    graph = check_ort(onnx_model(nodes, {"x": (F32, SHAPE)}, {"y": F32}))
    assert [n.op for n in graph.nodes] == ["Relu"]
