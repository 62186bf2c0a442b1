"""Fused kernels on cuda: the epilogue (bias, residual Add, ReLU/Clip, GELU chain) runs in the conv's
or matmul's output stage, one kernel per group, matching ONNX Runtime in CPU emulation."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from core.codegen.nvptx import emit_ptx
from tests.backend_calls import build_executable, optimize
from core.frontend import import_onnx
from core.target import get_target
from tests.helpers.onnx_models import make_model

from .test_gpu_models import emulate

rng = np.random.default_rng(3)


def _model(nodes, inputs, output, inits):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return make_model(graph)


def _check(model, feeds, tmp_path, kernels):
    data = model.SerializeToString()
    graph = optimize(import_onnx(data), 3, get_target("cuda"))
    exe = build_executable(graph, get_target("cuda"))
    assert len(exe.kernels) == kernels, [k.ops for k in exe.kernels]
    emit_ptx(list(exe.funcs), get_target("cuda"))  # verifies every kernel's launch, bindings and barriers
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = emulate(graph, exe, feeds, tmp_path)[model.graph.output[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv_bias_residual_relu_is_one_kernel(tmp_path):
    w = rng.standard_normal((12, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [("x", [1, 8, 11, 13]), ("r", [1, 12, 11, 13])], ("y", [1, 12, 11, 13]), {"w": w, "b": b})
    feeds = {"x": rng.standard_normal((1, 8, 11, 13)).astype(np.float32),
             "r": rng.standard_normal((1, 12, 11, 13)).astype(np.float32)}
    _check(model, feeds, tmp_path, kernels=1)


def test_depthwise_conv_clip_is_one_kernel(tmp_path):
    w = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    lo, hi = np.array(0, np.float32), np.array(6, np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2], group=16),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    model = _model(nodes, [("x", [1, 16, 15, 15])], ("y", [1, 16, 8, 8]), {"w": w, "lo": lo, "hi": hi})
    _check(model, {"x": rng.standard_normal((1, 16, 15, 15)).astype(np.float32) * 3}, tmp_path, kernels=1)


def test_matmul_bias_gelu_is_one_kernel(tmp_path):
    w = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    half, root2 = np.array(0.5, np.float32), np.array(np.sqrt(2), np.float32)
    one = np.array(1, np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Div", ["a", "root2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]), helper.make_node("Mul", ["a", "p"], ["q"]),
             helper.make_node("Mul", ["q", "half"], ["y"])]
    model = _model(nodes, [("x", [3, 17, 40])], ("y", [3, 17, 24]),
                   {"w": w, "b": b, "half": half, "root2": root2, "one": one})
    _check(model, {"x": rng.standard_normal((3, 17, 40)).astype(np.float32)}, tmp_path, kernels=1)

