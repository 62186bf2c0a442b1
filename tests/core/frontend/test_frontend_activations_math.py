"""Activation decompositions (ThresholdedRelu, Softplus, Softsign, Selu, Celu, Shrink, Mish, Swish) and the
math/bit converters (Mod, BitShift, Bitwise*, trigonometry, Round, Sign, IsInf) against ONNX Runtime: import
plus the reference interpreter, and once compiled end to end."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core.onnx_backend.backend import KilnBackend
from core.frontend import import_onnx

F32 = "float32"
SHAPE = [3, 4, 5]
ACTIVATIONS = [("ThresholdedRelu", {"alpha": 0.4}), ("ThresholdedRelu", {}), ("Softplus", {}), ("Softsign", {}),
               ("Selu", {}), ("Selu", {"alpha": 2.0, "gamma": 3.0}), ("Celu", {"alpha": 2.0}), ("Celu", {}),
               ("Shrink", {"lambd": 0.6, "bias": 0.2}), ("Shrink", {}), ("Mish", {}), ("Elu", {"alpha": 0.7}),
               ("Elu", {"alpha": -0.5})]


def _wide_input(shape=SHAPE) -> np.ndarray:
    # Spans the branches of every activation, including Softplus's large-|x| tails.
    return np.random.default_rng(5).uniform(-30, 30, shape).astype(np.float32)


@pytest.mark.parametrize("op,attrs", ACTIVATIONS, ids=lambda v: str(v))
def test_activation_decompositions(op, attrs, onnx_model, check_ort):
    model = onnx_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": (F32, SHAPE)}, {"y": F32}, opset=22)
    check_ort(model, {"x": _wide_input()})
    check_ort(model, {"x": np.random.default_rng(6).standard_normal(SHAPE).astype(np.float32)})


def test_swish_alpha_matches_its_definition(onnx_model):
    # ONNX Runtime has no opset-24 Swish; its definition is x * sigmoid(alpha * x).
    from core.graph.interpret import evaluate
    model = onnx_model([helper.make_node("Swish", ["x"], ["y"], alpha=0.7)], {"x": (F32, SHAPE)}, {"y": F32}, opset=24)
    x = _wide_input()
    (got,) = evaluate(import_onnx(model), {"x": x}).values()
    np.testing.assert_allclose(got, x / (1 + np.exp(-0.7 * x.astype(np.float64))), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmod,dtype", [(0, "int64"), (1, "int64"), (0, "int32"), (1, F32)])
def test_mod(fmod, dtype, onnx_model, check_ort):
    model = onnx_model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
                       {"a": (dtype, [2, 6]), "b": (dtype, [6])}, {"y": dtype}, opset=13)
    feeds = {"a": np.array([[7, -7, 7, -7, 0, 9], [5, -4, 13, -13, 1, -1]], dtype),
             "b": np.array([3, 3, -3, -3, 4, 2], dtype)}
    graph = check_ort(model, feeds)
    assert [n.op for n in graph.nodes] == ["TruncMod" if fmod else "FloorMod"]


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_uint8(direction, onnx_model, check_ort):
    model = onnx_model([helper.make_node("BitShift", ["a", "b"], ["y"], direction=direction)],
                       {"a": ("uint8", [5]), "b": ("uint8", [5])}, {"y": "uint8"}, opset=11)
    check_ort(model, {"a": np.array([1, 255, 16, 3, 128], np.uint8), "b": np.array([0, 1, 3, 7, 2], np.uint8)})


def test_bitwise_and_not(onnx_model, check_ort):
    nodes = [helper.make_node("BitwiseAnd", ["a", "b"], ["t"]), helper.make_node("BitwiseNot", ["t"], ["u"]),
             helper.make_node("BitwiseXor", ["u", "a"], ["v"]), helper.make_node("BitwiseOr", ["v", "b"], ["y"])]
    model = onnx_model(nodes, {"a": ("int32", [3, 4]), "b": ("int32", [4])}, {"y": "int32"}, opset=18)
    check_ort(model, {"a": np.arange(-6, 6, dtype=np.int32).reshape(3, 4) * 37,
                      "b": np.array([1, -2, 0x0F0F, 7], np.int32)})


@pytest.mark.parametrize("op", ["Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Round", "Sign"])
def test_unary_math(op, onnx_model, check_ort):
    model = onnx_model([helper.make_node(op, ["x"], ["y"])], {"x": (F32, SHAPE)}, {"y": F32}, opset=22)
    check_ort(model, {"x": (np.random.default_rng(7).integers(-8, 8, SHAPE) / 2).astype(np.float32)})


@pytest.mark.parametrize("op,low,high", [("Asin", -1, 1), ("Acos", -1, 1), ("Atanh", -0.95, 0.95), ("Acosh", 1, 9)])
def test_unary_math_in_domain(op, low, high, onnx_model, check_ort):
    model = onnx_model([helper.make_node(op, ["x"], ["y"])], {"x": (F32, SHAPE)}, {"y": F32}, opset=22)
    check_ort(model, {"x": np.random.default_rng(8).uniform(low, high, SHAPE).astype(np.float32)})


@pytest.mark.parametrize("pos,neg", [(1, 1), (1, 0), (0, 1)])
def test_isinf(pos, neg, onnx_model, check_ort):
    model = onnx_model([helper.make_node("IsInf", ["x"], ["y"], detect_positive=pos, detect_negative=neg)],
                       {"x": (F32, [5])}, {"y": "bool"}, opset=20)
    check_ort(model, {"x": np.array([np.inf, -np.inf, np.nan, 0, 1e38], np.float32)})


def test_activations_compiled_match_onnxruntime(onnx_model, ort_runner):
    # One model holding every activation, compiled to native code: the fused kernels, not only the folds.
    nodes = [helper.make_node(op, ["x"], [f"y{k}"], **attrs) for k, (op, attrs) in enumerate(ACTIVATIONS)]
    nodes += [helper.make_node("Sin", ["x"], ["sin"]), helper.make_node("Round", ["x"], ["round"])]
    outputs = {f"y{k}": F32 for k in range(len(ACTIVATIONS))} | {"sin": F32, "round": F32}
    model = onnx_model(nodes, {"x": (F32, SHAPE)}, outputs, opset=22)
    x = _wide_input()
    x.flat[:4] = [0.5, 1.5, -2.5, 2.5]  # Round's ties go to even
    got = KilnBackend.prepare(model).run([x])
    for name, mine, theirs in zip(outputs, got, ort_runner(model, {"x": x})):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6, err_msg=name)


def test_bitcast_compiled():
    graph = helper.make_graph([helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT32)], "bitcast",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    model.ir_version = onnx.helper.find_min_ir_version_for(model.opset_import, ignore_unknown=True)
    x = np.array([1.0, -2.5, 0.0, -0.0, np.inf, 3e-39], np.float32)
    (got,) = KilnBackend.prepare(model).run([x])
    np.testing.assert_array_equal(got, x.view(np.int32))


def test_swiglu_matches_its_definition(onnx_model):
    from core.graph.interpret import evaluate
    model = onnx_model([helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.5)],
                       {"a": (F32, SHAPE), "b": (F32, SHAPE)}, {"y": F32}, opset=28)
    a, b = _wide_input(), np.random.default_rng(9).standard_normal(SHAPE).astype(np.float32)
    (got,) = evaluate(import_onnx(model), {"a": a, "b": b}).values()
    want = a.astype(np.float64) / (1 + np.exp(-1.5 * a.astype(np.float64))) * b
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_binarizer(onnx_model, check_ort):
    model = onnx_model([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.3)],
                       {"x": (F32, SHAPE)}, {"y": F32}, domains={"ai.onnx.ml": 1})
    check_ort(model)
