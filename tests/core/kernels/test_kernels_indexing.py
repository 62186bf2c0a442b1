"""Indexing, selection and reduction-like ops compiled end to end (KilnBackend) against ONNX Runtime:
ArgMax/ArgMin, Trilu, CumSum/CumProd, TopK, Scatter*, GatherND, OneHot, EyeLike, ReverseSequence, Einsum."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from core.backend import KilnBackend

F32, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


def _model(node: onnx.NodeProto, inputs: dict, outputs: dict, opset: int) -> onnx.ModelProto:
    """inputs: name -> array (the feeds); outputs: name -> ONNX elem type (shapes from inference)."""
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = {o.name: o for o in onnx.shape_inference.infer_shapes(model).graph.output}
    for output in model.graph.output:
        output.type.CopyFrom(inferred[output.name].type)
        output.type.tensor_type.shape.SetInParent()  # data-dependent shapes: known rank at least
    return model


def check(node: onnx.NodeProto, inputs: dict, outputs: dict, opset: int = 18) -> list[np.ndarray]:
    model = _model(node, inputs, outputs, opset)
    ours = KilnBackend.run_model(model, list(inputs.values()))
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
    for got, want in zip(ours, theirs):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return list(ours)


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(1, 1, 0), (-1, 0, 1), (0, 0, 0)])
def test_arg_extreme_with_ties(op, axis, keepdims, last):
    x = RNG.integers(0, 3, (3, 5, 4)).astype(np.float32)  # many ties: first vs last position matters
    check(helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last),
          {"x": x}, {"y": I64}, opset=13)
