"""MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv compiled to native code (KilnBackend) and
compared with ONNX Runtime bit for bit, including sums too large for a float32 accumulator to hold exactly."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from core.onnx_backend.backend import KilnBackend

U8, I8, F32, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT, TensorProto.INT32


def _model(node, inputs, outputs, opset=13):
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    onnx.checker.check_model(model)
    return model


def _compare(model, feeds, runner):
    feeds = {name: np.asarray(value) for name, value in feeds.items()}  # ORT takes arrays, not numpy scalars
    got = KilnBackend.prepare(model).run([feeds[i.name] for i in model.graph.input])
    for ours, theirs in zip(got, runner(model, feeds)):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)


def test_matmul_integer_large_sums_are_exact(ort_runner):
    rng = np.random.default_rng(0)
    a = rng.integers(200, 256, (3, 600)).astype(np.uint8)  # sums near 3.7e7 > 2^24
    b = rng.integers(200, 256, (600, 5)).astype(np.uint8)
    model = _model(helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]),
                   [("a", U8, [3, 600]), ("b", U8, [600, 5]), ("az", U8, []), ("bz", U8, [5])], [("y", I32, [3, 5])])
    feeds = {"a": a, "b": b, "az": np.uint8(1), "bz": rng.integers(0, 9, 5).astype(np.uint8)}
    _compare(model, feeds, ort_runner)


def test_conv_integer_with_padding_and_channel_zero_points(ort_runner):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)
    w = rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8)
    model = _model(helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
                   [("x", U8, [1, 3, 6, 6]), ("w", U8, [4, 3, 3, 3]), ("xz", U8, []), ("wz", U8, [])],
                   [("y", I32, [1, 4, 3, 3])])
    _compare(model, {"x": x, "w": w, "xz": np.uint8(7), "wz": np.uint8(128)}, ort_runner)


def test_qlinear_matmul_matches_ort(ort_runner):
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (2, 4, 32)).astype(np.int8)
    b = rng.integers(-128, 128, (2, 32, 6)).astype(np.int8)
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    model = _model(helper.make_node("QLinearMatMul", names, ["y"]),
                   [("a", I8, [2, 4, 32]), ("as", F32, []), ("az", I8, []), ("b", I8, [2, 32, 6]), ("bs", F32, []),
                    ("bz", I8, []), ("ys", F32, []), ("yz", I8, [])], [("y", I8, [2, 4, 6])])
    feeds = {"a": a, "as": np.float32(0.02), "az": np.int8(-3), "b": b, "bs": np.float32(0.013), "bz": np.int8(5),
             "ys": np.float32(0.9), "yz": np.int8(2)}
    _compare(model, feeds, ort_runner)


def test_qlinear_conv_with_bias_and_per_channel_scales():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(-100, 100, (3, 2, 3, 3)).astype(np.int8)
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"]
    model = _model(helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1]),
                   [("x", U8, [1, 2, 5, 5]), ("xs", F32, []), ("xz", U8, []), ("w", I8, [3, 2, 3, 3]),
                    ("ws", F32, [3]), ("wz", I8, [3]), ("ys", F32, []), ("yz", U8, []), ("bias", I32, [3])],
                   [("y", U8, [1, 3, 5, 5])])
    feeds = {"x": x, "xs": np.float32(0.01), "xz": np.uint8(120), "w": w,
             "ws": np.array([0.004, 0.002, 0.003], np.float32), "wz": np.zeros(3, np.int8),
             "ys": np.float32(0.05), "yz": np.uint8(100), "bias": np.array([-500, 0, 800], np.int32)}
    # ONNX's reference: ORT requantizes with a float32 multiplier and rounds some halves the other way.
    _compare(model, feeds, lambda m, f: ReferenceEvaluator(m).run(None, f))
