"""narrow_weight_storage: exact float16/bfloat16 weights (or all weights, rounded, under a half precision) are stored
narrow and widened by a Cast at the top of the kernel that reads them; small or inexact constants stay float32."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from core.graph.ir import Graph, Node, TensorType
from core.graph.passes.narrow_weight_storage import MIN_ELEMENTS, exact_storage, narrow_weight_storage

rng = np.random.default_rng(0)


def matmul_graph(weight: np.ndarray, bias: np.ndarray) -> Graph:
    types = {"x": TensorType((2, weight.shape[0]), "float32"), "w": TensorType(weight.shape, "float32"),
             "b": TensorType(bias.shape, "float32"), "h": TensorType((2, weight.shape[1]), "float32"),
             "y": TensorType((2, weight.shape[1]), "float32")}
    nodes = (Node("MatMul", ("x", "w"), ("h",)), Node("Add", ("h", "b"), ("y",)))
    return Graph(("x",), ("y",), nodes, types, {"w": weight, "b": bias})


def test_exact_halves_are_stored_narrow_and_widened_in_the_kernel():
    weight = rng.standard_normal((64, 32)).astype(np.float16).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    out = narrow_weight_storage(matmul_graph(weight, bias))
    assert "w" not in out.constants and "b" in out.constants  # the bias is too small to matter
    (narrow,) = [v for v in out.constants if out.type_of(v).dtype == "float16"]
    np.testing.assert_array_equal(out.constants[narrow].astype(np.float32), weight)
    fused = out.nodes[0]
    assert fused.op == "Fused" and narrow in fused.inputs and "w" not in fused.inputs
    body = fused.attr("body")
    assert [n.op for n in body.nodes] == ["Cast", "MatMul"] and body.nodes[0].inputs == (narrow,)
    assert body.nodes[0].outputs == ("w",) and body.type_of("w").dtype == "float32"
    assert out.nodes[1] == matmul_graph(weight, bias).nodes[1]  # the Add reads no big constant


def test_inexact_weights_stay_float32_unless_rounded():
    weight = rng.standard_normal((64, 32)).astype(np.float32)
    graph = matmul_graph(weight, np.zeros(32, np.float32))
    assert narrow_weight_storage(graph) is graph
    rounded = narrow_weight_storage(graph, round_to="bfloat16")
    (narrow,) = [v for v in rounded.constants if rounded.type_of(v).dtype == "bfloat16"]
    np.testing.assert_array_equal(rounded.constants[narrow], weight.astype(ml_dtypes.bfloat16))


def test_the_backend_s_dtypes_decide():
    weight = rng.standard_normal((64, 32)).astype(np.float16).astype(np.float32)
    graph = matmul_graph(weight, np.zeros(32, np.float32))
    assert narrow_weight_storage(graph, ()) is graph  # e.g. cuda: weights stay float32
    only_bf16 = narrow_weight_storage(graph, ("bfloat16",))  # x86 without F16C: float16 values are rarely bfloat16
    assert only_bf16 is graph
    with pytest.raises(ValueError, match="round_to"):
        narrow_weight_storage(graph, ("bfloat16",), round_to="float16")


def test_exact_storage_prefers_float16_and_keeps_nan():
    assert exact_storage(np.array([1.0, 0.5, np.nan, -np.inf], np.float32), ("float16", "bfloat16")) == "float16"
    assert exact_storage(np.array([2.0 ** 100, 3.0], np.float32), ("float16", "bfloat16")) == "bfloat16"
    assert exact_storage(np.array([1 / 3], np.float32), ("float16", "bfloat16")) is None
    assert MIN_ELEMENTS >= 256  # biases and scalars are never worth a conversion
