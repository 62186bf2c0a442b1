"""flatten_matmul_rows: MatMul(A[..., M, K], B[K, N]) with several batches of A of few rows becomes one [P*M, K]
GEMM between two Reshapes, with the same values; one batch, batches of a whole register tile of rows (their
epilogue stays fused), a batched B or a packed MatMul stay as they are. A torch-style
attention input projection ([seq, 1, embed] x W) compiles and matches ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import core
from core.graph.ir import Graph, Node, TensorType
from core.graph.passes.flatten_matmul_rows import flatten_matmul_rows
from tests.helpers.graphs import F32, assert_same_meaning, ops
from core.packing.panels import TILE_ROWS

rng = np.random.default_rng(5)


def matmul_graph(a_shape, b_shape, attrs=None) -> Graph:
    out = (*np.broadcast_shapes(a_shape[:-2], b_shape[:-2]), a_shape[-2], b_shape[-1])
    return Graph(("a",), ("y",), (Node("MatMul", ("a", "b"), ("y",), attrs or {}, "mm"),),
                 {"a": TensorType(a_shape, F32), "b": TensorType(b_shape, F32), "y": TensorType(out, F32)},
                 {"b": rng.standard_normal(b_shape).astype(np.float32)})


def test_batches_of_a_become_rows_of_one_gemm():
    graph = matmul_graph((4, 3, 1, 8), (8, 6))
    after = flatten_matmul_rows(graph)
    assert ops(after) == ["Reshape", "MatMul", "Reshape"]
    assert after.type_of(after.nodes[1].outputs[0]).shape == (12, 6)
    assert_same_meaning(graph, after)


def test_one_batch_a_batched_b_and_a_packed_matmul_stay():
    for graph in (matmul_graph((1, 5, 8), (8, 6)), matmul_graph((3, 5, 8), (3, 8, 6)),
                  matmul_graph((3, 1, 8), (8, 6), {"packed_columns": 6}), matmul_graph((3, TILE_ROWS, 8), (8, 6))):
        assert flatten_matmul_rows(graph) is graph


def test_a_torch_style_input_projection_matches_onnxruntime():
    """[batch=1, seq, embed] -> Transpose to [seq, 1, embed] -> MatMul W -> Add bias: 1-row products before."""
    w, b = rng.standard_normal((16, 48)).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]), helper.make_node("MatMul", ["t", "w"], ["p"]),
         helper.make_node("Add", ["p", "b"], ["y"])], "proj",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 37, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [37, 1, 48])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    art = core.compile(model, opt_level=3, benchmark=False)
    assert art.report["validation"]["passed"] and "flatten_matmul_rows" in art.report["graph"]["passes"]
    x = rng.standard_normal((1, 37, 16)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(art.load().run({"x": x})["y"], expected, rtol=1e-5, atol=1e-5)
