"""widen_narrow_floats: accumulating ops on bfloat16/float8 compute in float32 between Casts; compiled bfloat16
MatMul with a long reduction then matches a float32-accumulated reference rounded once."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

from core.onnx_backend.backend import KilnBackend
from core.frontend import import_onnx
from core.graph.passes.widen_narrow_floats import widen_narrow_floats


def _matmul_model(elem: int, k: int):
    a = helper.make_tensor_value_info("a", elem, [4, k])
    b = helper.make_tensor_value_info("b", elem, [k, 3])
    y = helper.make_tensor_value_info("y", elem, [4, 3])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", [a, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bfloat16_matmul_runs_in_float32_between_casts():
    graph = widen_narrow_floats(import_onnx(_matmul_model(TensorProto.BFLOAT16, 8)))
    assert [n.op for n in graph.nodes] == ["Cast", "Cast", "MatMul", "Cast"]
    matmul = graph.nodes[2]
    assert {graph.type_of(v).dtype for v in (*matmul.inputs, *matmul.outputs)} == {"float32"}
    assert graph.nodes[3].outputs == ("y",) and graph.type_of("y").dtype == "bfloat16"


def test_float16_matmul_is_widened_too():
    graph = widen_narrow_floats(import_onnx(_matmul_model(TensorProto.FLOAT16, 8)))
    assert [n.op for n in graph.nodes] == ["Cast", "Cast", "MatMul", "Cast"]
    assert graph.type_of(graph.nodes[2].outputs[0]).dtype == "float32"


def test_float32_graphs_are_left_alone():
    graph = import_onnx(_matmul_model(TensorProto.FLOAT, 8))
    assert widen_narrow_floats(graph) is graph


def test_long_bfloat16_reduction_does_not_stagnate():
    k = 2048  # partial sums reach ~500, where a bfloat16 step is 2: adding ~0.25 per term would round away
    rng = np.random.default_rng(0)
    a = rng.uniform(0.25, 0.75, (4, k)).astype(ml_dtypes.bfloat16)
    b = rng.uniform(0.25, 0.75, (k, 3)).astype(ml_dtypes.bfloat16)
    (y,) = KilnBackend.prepare(_matmul_model(TensorProto.BFLOAT16, k)).run([a, b])
    reference = a.astype(np.float32) @ b.astype(np.float32)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float32), reference, rtol=2.0 ** -8)  # one bfloat16 rounding
