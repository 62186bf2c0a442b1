"""Reductions: axes as attribute (ReduceMean 13) or input (ReduceMean 18, ReduceSum 13), keepdims,
noop_with_empty_axes, and the decomposed ReduceL1/L2/SumSquare/LogSum/LogSumExp."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

F32 = "float32"
OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]
DECOMPOSED = ["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


def _model(onnx_model, op, opset, axes, keepdims=1, noop=None, dtype=F32):
    input_axes = opset >= (13 if op == "ReduceSum" else 18)
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    inputs, inits = ["x"], {}
    if axes is not None and input_axes:
        inputs.append("axes")
        inits["axes"] = np.array(axes, np.int64)
    elif axes is not None:
        attrs["axes"] = axes
    node = helper.make_node(op, inputs, ["y"], **attrs)
    return onnx_model([node], {"x": (dtype, [2, 3, 4])}, {"y": dtype}, opset=opset, initializers=inits)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([-1, 0], 0), (None, 1), (None, 0)])
def test_reductions_across_opsets(op, opset, axes, keepdims, onnx_model, check_ort):
    check_ort(_model(onnx_model, op, opset, axes, keepdims), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
def test_noop_with_empty_axes(op, onnx_model, check_ort):
    graph = check_ort(_model(onnx_model, op, 18, None, noop=1))
    assert [n.op for n in graph.nodes] == ["Identity"]


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_integer_reductions(op, onnx_model, check_ort):
    check_ort(_model(onnx_model, op, 18, [1], dtype="int64"))


@pytest.mark.parametrize("op", DECOMPOSED)
@pytest.mark.parametrize("opset,keepdims", [(13, 1), (18, 0)])
def test_decomposed_reductions(op, opset, keepdims, onnx_model, check_ort):
    model = _model(onnx_model, op, opset, [0, 2], keepdims)
    feeds = {"x": np.random.default_rng(2).uniform(0.1, 2.0, (2, 3, 4)).astype(np.float32)}
    check_ort(model, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,dtype,keepdims,fill", [("ReduceMax", F32, 1, -np.inf), ("ReduceMin", F32, 0, np.inf),
                                                    ("ReduceLogSumExp", F32, 1, -np.inf),
                                                    ("ReduceMin", "int64", 1, np.iinfo(np.int64).max),
                                                    ("ReduceMax", "bool", 0, False)])
def test_reduction_over_an_empty_axis_is_its_identity(op, dtype, keepdims, fill, onnx_model):
    from core.onnx_backend.backend import KilnBackend

    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    model = onnx_model([node], {"x": (dtype, [2, 0, 4])}, {"y": dtype}, opset=20,
                       initializers={"axes": np.array([1], np.int64)})
    (y,) = KilnBackend.prepare(model).run([np.zeros((2, 0, 4), dtype)])
    expected = np.full((2, 1, 4) if keepdims else (2, 4), fill, dtype)
    assert y.dtype == expected.dtype
    np.testing.assert_array_equal(y, expected)
