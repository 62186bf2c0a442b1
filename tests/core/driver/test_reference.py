"""The exact reference for quantized models: each rewritten integer op against numpy's int64 arithmetic or ONNX's own
reference evaluator (exact by definition), including convolutions whose float32 sums would leave 2^24."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from core.driver.reference import (EXACT_REFERENCE, exact_model, is_quantized, onnxruntime_on_host, open_sessions,
                                   reference_outputs)

rng = np.random.default_rng(3)
MS = "com.microsoft"


def _model(nodes, inputs: dict, consts: dict, out_type, out_name="y", opset=13):
    graph = helper.make_graph(
        nodes, "q", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                     for n, v in inputs.items()],
        [helper.make_tensor_value_info(out_name, out_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _conv_int64(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """NCHW convolution, stride 1, in int64: the exact result."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    out = np.zeros((n, m, h - kh + 1, wd - kw + 1), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,mc->nmhw", x[:, :, i:i + out.shape[2], j:j + out.shape[3]], w[:, :, i, j].astype(np.int64))
    return out


def test_a_conv_whose_float32_sums_would_round_is_split_into_exact_digits():
    # 256 channels x 3x3 at the ends of int8: sums reach 255 * 128 * 2304 = 75M, far beyond float32's 2^24.
    x = np.full((1, 256, 5, 5), 255, np.uint8)
    x[0, ::2] = rng.integers(200, 256, (128, 5, 5))
    w = np.where(rng.random((4, 256, 3, 3)) < 0.9, -128, 127).astype(np.int8)
    model = _model([helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1])],
                   {"x": x}, {"w": w, "xz": np.uint8(0)}, TensorProto.INT32)
    rewritten = exact_model(model)
    assert sum(n.op_type == "Conv" for n in rewritten.graph.node) >= 2  # digits, each exact
    got = reference_outputs(model, {"x": x})["y"]
    want = _conv_int64(x, w, 1)
    assert np.abs(want).max() > 2 ** 24
    np.testing.assert_array_equal(got, want)


def test_a_small_conv_stays_one_float32_conv_and_is_exact():
    x = rng.integers(0, 256, (1, 8, 6, 6)).astype(np.uint8)
    w = rng.integers(-128, 128, (4, 8, 3, 3)).astype(np.int8)
    wz = np.array([0, 1, -3, 7], np.int8)
    model = _model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])],
                   {"x": x}, {"w": w, "xz": np.uint8(17), "wz": wz}, TensorProto.INT32)
    assert sum(n.op_type == "Conv" for n in exact_model(model).graph.node) == 1
    want = _conv_int64(x.astype(np.int64) - 17, w.astype(np.int64) - wz.reshape(4, 1, 1, 1), 1)
    np.testing.assert_array_equal(reference_outputs(model, {"x": x})["y"], want)


def test_matmul_integer_with_per_row_and_per_column_zero_points_is_exact():
    a = rng.integers(0, 256, (5, 300)).astype(np.uint8)
    b = rng.integers(-128, 128, (300, 7)).astype(np.int8)
    az, bz = rng.integers(0, 256, 5).astype(np.uint8), rng.integers(-128, 128, 7).astype(np.int8)
    model = _model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
                   {"a": a}, {"b": b, "az": az, "bz": bz}, TensorProto.INT32)
    want = (a.astype(np.int64) - az[:, None].astype(np.int64)) @ (b.astype(np.int64) - bz.astype(np.int64))
    np.testing.assert_array_equal(reference_outputs(model, {"a": a})["y"], want)


@pytest.mark.parametrize("op", ["QLinearConv", "QLinearMatMul"])
def test_qlinear_ops_match_onnx_reference_evaluator(op):
    x = rng.integers(0, 256, (1, 16, 6, 6) if op == "QLinearConv" else (6, 64)).astype(np.uint8)
    w = rng.integers(-128, 128, (8, 16, 3, 3) if op == "QLinearConv" else (64, 8)).astype(np.int8)
    consts = {"xs": np.float32(0.02), "xz": np.uint8(120), "w": w,
              "ws": np.float32(0.004) if op == "QLinearMatMul" else rng.uniform(0.001, 0.005, 8).astype(np.float32),
              "wz": np.int8(0) if op == "QLinearMatMul" else np.zeros(8, np.int8),
              "ys": np.float32(0.3), "yz": np.uint8(100)}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    attrs = {"pads": [1, 1, 1, 1]} if op == "QLinearConv" else {}
    if op == "QLinearConv":
        consts["b"] = rng.integers(-5000, 5000, 8).astype(np.int32)
        names.append("b")
    model = _model([helper.make_node(op, names, ["y"], **attrs)], {"x": x}, consts, TensorProto.UINT8)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(reference_outputs(model, {"x": x})["y"], want)


@pytest.mark.parametrize("quantized_output", [True, False])
def test_qgemm_is_the_exact_product_scaled(quantized_output):
    a, w = rng.integers(0, 256, (3, 40)).astype(np.uint8), rng.integers(-128, 128, (7, 40)).astype(np.int8)
    ws = rng.uniform(0.005, 0.02, 7).astype(np.float32)
    c = rng.integers(-3000, 3000, 7).astype(np.int32)
    consts = {"as": np.float32(0.03), "az": np.uint8(128), "w": w, "ws": ws, "wz": np.zeros(7, np.int8), "c": c}
    names = ["a", "as", "az", "w", "ws", "wz", "c"]
    if quantized_output:
        consts.update(ys=np.float32(0.2), yz=np.uint8(110))
        names += ["ys", "yz"]
    model = _model([helper.make_node("QGemm", names, ["y"], domain=MS, transB=1)], {"a": a}, consts,
                   TensorProto.UINT8 if quantized_output else TensorProto.FLOAT)
    acc = (a.astype(np.int64) - 128) @ w.astype(np.int64).T + c
    real = acc * (np.float64(np.float32(0.03)) * ws.astype(np.float64))
    got = reference_outputs(model, {"a": a})["y"]
    if quantized_output:
        want = np.clip(np.round(real / np.float64(np.float32(0.2))) + 110, 0, 255)
        assert np.abs(got.astype(np.int64) - want).max() <= 1 and np.mean(got == want) > 0.95
    else:
        np.testing.assert_allclose(got, real, rtol=1e-6, atol=1e-6)


def test_a_float_model_keeps_onnx_runtime_itself():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "f", [x],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]))
    model.ir_version = 8
    assert not is_quantized(model)
    sessions = open_sessions(model.SerializeToString(), 1)
    assert sessions.reference is sessions.baseline and not sessions.exact


def test_onnxruntime_on_the_host_is_compared_with_the_exact_result():
    """On an AVX2 host without VNNI, ORT's u8 x s8 conv saturates here (99 steps off, measured); with VNNI it is
    exact. Either way the exact reference is what onnx.reference computes, and the report says which ORT gave."""
    x = rng.integers(0, 256, (1, 32, 6, 6)).astype(np.uint8)
    consts = {"xs": np.float32(0.02), "xz": np.uint8(0), "w": np.full((8, 32, 1, 1), 127, np.int8),
              "ws": np.float32(0.002), "wz": np.int8(0), "ys": np.float32(0.5), "yz": np.uint8(0)}
    model = _model([helper.make_node("QLinearConv", ["x", *consts], ["y"])], {"x": x}, consts, TensorProto.UINT8)
    sessions = open_sessions(model.SerializeToString(), 1)
    assert sessions.exact and sessions.reference.reference_name == EXACT_REFERENCE
    np.testing.assert_array_equal(reference_outputs(model, {"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0])
    host = onnxruntime_on_host(sessions, {"x": x}, {})
    assert host["matches_exact"] in (True, False)
    if not host["matches_exact"]:
        assert host["output"] == "y" and host["max_abs_err"] > 1 and "saturate" in host["note"]


def test_subgraphs_are_rewritten_too():
    a = rng.integers(0, 256, (2, 9)).astype(np.uint8)
    b = rng.integers(-128, 128, (9, 4)).astype(np.int8)
    body = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.INT32, None)])
    other = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.INT32, None)])
    model = _model([helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=other)],
                   {"a": a, "cond": np.array(True)}, {"b": b}, TensorProto.INT32)
    rewritten = exact_model(model)
    inner = [n.op_type for n in rewritten.graph.node[0].attribute[0].g.node]
    assert "MatMulInteger" not in inner and "MatMul" in inner
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(reference_outputs(model, {"a": a, "cond": np.array(True)})["y"], want)
