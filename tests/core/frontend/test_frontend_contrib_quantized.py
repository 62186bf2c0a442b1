"""ONNX Runtime's com.microsoft quantized ops (QLinearAdd/Mul/Sigmoid/LeakyRelu/Concat/AveragePool/
GlobalAveragePool, QGemm) compiled to native code and compared with ONNX Runtime: at most one quantization step
apart (ORT rounds through lookup tables and fixed-point sums), u8 and s8, zero points at the ends."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from core.driver.reference import reference_session
from core.onnx_backend.backend import KilnBackend

MS = "com.microsoft"
rng = np.random.default_rng(12)
LIMITS = {"uint8": (0, 255), "int8": (-128, 127)}


def _model(node, data: dict, params: dict, out_shape, out_type):
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for n, v in data.items()]
    graph = helper.make_graph([node], "q", inputs, [helper.make_tensor_value_info("y", out_type, list(out_shape))],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _compare(model, data, step=1.0):
    theirs = reference_session(model.SerializeToString(), 1).run(None, data)[0]
    ours = KilnBackend.prepare(model).run([data[i.name] for i in model.graph.input])[0]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    distance = np.abs(ours.astype(np.float64) - theirs.astype(np.float64)) / step
    assert distance.max() <= 1 + 1e-3, f"{distance.max()} steps apart"


def _data(shape, dtype):
    return rng.integers(*LIMITS[dtype], size=shape, endpoint=True).astype(dtype)


def _params(dtype, prefix, scale, zero):
    return {f"{prefix}_scale": np.float32(scale), f"{prefix}_zero": np.asarray(zero, dtype)}


@pytest.mark.parametrize("dtype,zero", [("uint8", 0), ("uint8", 255), ("int8", -128), ("int8", 5)])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary(op, dtype, zero):
    data = {"a": _data((2, 3, 4, 4), dtype), "b": _data((1, 3, 1, 4), dtype)}
    params = {**_params(dtype, "a", 0.05, zero), **_params(dtype, "b", 0.02, LIMITS[dtype][1] // 2),
              **_params(dtype, "y", 0.09 if op == "QLinearAdd" else 2.0, zero)}
    node = helper.make_node(op, ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"], ["y"],
                            domain=MS)
    _compare(_model(node, data, params, (2, 3, 4, 4), helper.np_dtype_to_tensor_dtype(np.dtype(dtype))), data)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_unary(op, attrs, dtype):
    data = {"x": _data((2, 8, 5), dtype)}
    lo = LIMITS[dtype][0]
    params = {**_params(dtype, "x", 0.06, lo + 100), **_params(dtype, "y", 1 / 256 if op == "QLinearSigmoid" else 0.05,
                                                               lo if op == "QLinearSigmoid" else lo + 60)}
    node = helper.make_node(op, ["x", "x_scale", "x_zero", "y_scale", "y_zero"], ["y"], domain=MS, **attrs)
    _compare(_model(node, data, params, (2, 8, 5), helper.np_dtype_to_tensor_dtype(np.dtype(dtype))), data)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("op,attrs", [("QLinearGlobalAveragePool", {}),
                                      ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2],
                                                              "pads": [1, 1, 1, 1], "count_include_pad": 1})])
def test_pools(op, attrs, channels_last):
    shape = (1, 7, 7, 6) if channels_last else (1, 6, 7, 7)
    data = {"x": _data(shape, "uint8")}
    params = {**_params("uint8", "x", 0.04, 120), **_params("uint8", "y", 0.03, 100)}
    node = helper.make_node(op, ["x", "x_scale", "x_zero", "y_scale", "y_zero"], ["y"], domain=MS,
                            channels_last=channels_last, **attrs)
    spatial = (1, 1) if op == "QLinearGlobalAveragePool" else (4, 4)
    out = (1, *spatial, 6) if channels_last else (1, 6, *spatial)
    _compare(_model(node, data, params, out, onnx.TensorProto.UINT8), data)


def test_concat():
    data = {"a": _data((1, 2, 3, 3), "int8"), "b": _data((1, 4, 3, 3), "int8")}
    params = {**_params("int8", "y", 0.05, 0), **_params("int8", "a", 0.05, 0), **_params("int8", "b", 0.11, -7)}
    node = helper.make_node("QLinearConcat", ["y_scale", "y_zero", "a", "a_scale", "a_zero", "b", "b_scale", "b_zero"],
                            ["y"], domain=MS, axis=1)
    _compare(_model(node, data, params, (1, 6, 3, 3), onnx.TensorProto.INT8), data)


@pytest.mark.parametrize("quantized_output", [True, False])
def test_qgemm_with_per_column_weights_and_bias(quantized_output):
    a, w = _data((3, 20), "uint8"), _data((7, 20), "int8")  # transB: w is [N, K]
    a_scale, w_scale = np.float32(0.03), rng.uniform(0.005, 0.02, 7).astype(np.float32)
    params = {"a_scale": a_scale, "a_zero": np.uint8(128), "w": w, "w_scale": w_scale, "w_zero": np.zeros(7, np.int8),
              "c": rng.integers(-3000, 3000, 7).astype(np.int32)}
    inputs = ["a", "a_scale", "a_zero", "w", "w_scale", "w_zero", "c"]
    if quantized_output:
        params.update(_params("uint8", "y", 0.2, 110))
        inputs += ["y_scale", "y_zero"]
    node = helper.make_node("QGemm", inputs, ["y"], domain=MS, transB=1)
    out_type = onnx.TensorProto.UINT8 if quantized_output else onnx.TensorProto.FLOAT
    model = _model(node, {"a": a}, params, (3, 7), out_type)
    _compare(model, {"a": a}, step=1.0 if quantized_output else 1e-4)
