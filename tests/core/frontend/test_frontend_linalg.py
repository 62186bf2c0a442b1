"""MatMul (vectors, batch broadcasting) and Gemm decomposition against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

F32 = "float32"


@pytest.mark.parametrize("a,b", [([3, 4], [4, 5]), ([2, 3, 4], [4, 5]), ([2, 1, 3, 4], [5, 4, 2]), ([4], [4, 3]),
                                 ([2, 3, 4], [4]), ([4], [4]), ([4], [2, 4, 3])])
def test_matmul_shapes(a, b, onnx_model, check_ort):
    model = onnx_model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": (F32, a), "b": (F32, b)}, {"y": F32})
    check_ort(model)


def test_matmul_integers(onnx_model, check_ort):
    model = onnx_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       {"a": ("int32", [3, 4]), "b": ("int32", [4, 2])}, {"y": "int32"})
    check_ort(model)


@pytest.mark.parametrize("attrs,with_c,c_shape", [
    ({}, True, [5]),
    ({"transA": 1, "transB": 1}, True, [3, 5]),
    ({"alpha": 0.5, "beta": 2.0}, True, [1, 5]),
    ({"transB": 1, "alpha": 3.0}, False, None),
    ({"beta": 0.0}, True, [5]),
])
def test_gemm(attrs, with_c, c_shape, onnx_model, check_ort):
    rng = np.random.default_rng(0)
    a_shape = [4, 3] if attrs.get("transA") else [3, 4]
    b_shape = [5, 4] if attrs.get("transB") else [4, 5]
    inputs = ["a", "b"] + (["c"] if with_c else [])
    initializers = {"b": rng.standard_normal(b_shape).astype(np.float32)}
    if with_c:
        initializers["c"] = rng.standard_normal(c_shape).astype(np.float32)
    model = onnx_model([helper.make_node("Gemm", inputs, ["y"], **attrs)], {"a": (F32, a_shape)}, {"y": F32},
                       initializers=initializers)
    graph = check_ort(model)
    ops = [n.op for n in graph.nodes]
    assert ops.count("MatMul") == 1 and "Gemm" not in ops
    assert ops.count("Transpose") == attrs.get("transA", 0)  # a constant B is transposed at import
    assert ("Mul" in ops) == (attrs.get("alpha", 1.0) != 1.0)


def test_gemm_with_dynamic_c_and_beta(onnx_model, check_ort):
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], beta=0.5, transB=1)
    model = onnx_model([node], {"a": (F32, [2, 3]), "b": (F32, [4, 3]), "c": (F32, [2, 4])}, {"y": F32}, opset=11)
    check_ort(model)
