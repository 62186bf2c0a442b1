"""Target-aware optimization levels: GPU targets skip the CPU-only layout passes and keep fusion."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from core.backends import get_backend
from core.frontend import import_onnx
from core.graph.passes.manager import LEVELS
from tests.backend_calls import optimize
from core.target import get_target

CUDA = get_target("cuda")


def _conv_matmul_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((16 * 6 * 6, 32)).astype(np.float32), "m")
    shape = numpy_helper.from_array(np.array([1, 16 * 6 * 6], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("MatMul", ["f", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])], [w, m, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_cuda_levels_drop_only_the_cpu_layout_passes():
    assert get_backend(get_target("native")).pass_names(3) == LEVELS[3]
    cuda = get_backend(CUDA).pass_names(3)
    assert "alter_layout" not in cuda and "pack_matmul_weights" not in cuda
    assert "fuse_ops" in cuda and "patch_conv_as_matmul" in cuda
    assert [p for p in LEVELS[3] if p not in cuda] == ["fuse_attention", "pack_matmul_weights", "alter_layout",
                                                       "alter_layout_3d"]


def _ops(graph):
    return [node.op for node, _ in graph.walk()]


def test_cuda_graph_keeps_nchw_and_plain_weights_but_fuses():
    data = _conv_matmul_model()
    cpu = optimize(import_onnx(data), 3)
    gpu = optimize(import_onnx(data), 3, CUDA)
    assert "Conv2dNCHWc" in _ops(cpu) or any(n.attrs.get("packed_columns") for n, _ in cpu.walk())
    assert "Conv2dNCHWc" not in _ops(gpu) and "LayoutTransform" not in _ops(gpu)
    assert not any(n.attrs.get("packed_columns") for n, _ in gpu.walk())
    assert any(n.op == "Fused" for n in gpu.nodes)  # Conv + Relu stay one kernel
