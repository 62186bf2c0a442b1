"""A regnet/resnext-style block (1x1 -> grouped 3x3 -> squeeze-excitation -> block-diagonal grouped 3x3 -> 1x1)
compiles at -O3 as one blocked region and matches ONNX Runtime."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import core
from tests.conftest import assert_artifact_matches_onnxruntime


def grouped_block_model() -> bytes:
    rng = np.random.default_rng(3)
    inits = []

    def conv(name, x, out, cin_per_group, k, group=1, stride=1):
        w = numpy_helper.from_array((rng.standard_normal((out, cin_per_group, k, k)) / np.sqrt(cin_per_group * k * k))
                                    .astype(np.float32), f"{name}_w")
        b = numpy_helper.from_array(rng.standard_normal(out).astype(np.float32), f"{name}_b")
        inits.extend([w, b])
        return helper.make_node("Conv", [x, w.name, b.name], [name], group=group, kernel_shape=[k, k],
                                pads=[k // 2] * 4, strides=[stride] * 2)

    nodes = [
        conv("expand", "x", 64, 32, 1), helper.make_node("Relu", ["expand"], ["a"]),
        conv("grouped", "a", 64, 8, 3, group=8), helper.make_node("Relu", ["grouped"], ["b"]),  # 8 per group
        helper.make_node("GlobalAveragePool", ["b"], ["pooled"]),
        conv("squeeze", "pooled", 16, 64, 1), helper.make_node("Relu", ["squeeze"], ["s"]),
        conv("excite", "s", 64, 16, 1), helper.make_node("Sigmoid", ["excite"], ["gate"]),
        helper.make_node("Mul", ["b", "gate"], ["scaled"]),
        conv("diagonal", "scaled", 64, 4, 3, group=16, stride=2),  # 4 per group: 2 groups per block of 8
        conv("project", "diagonal", 32, 64, 1),
    ]
    graph = helper.make_graph(nodes, "grouped_block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
                              [helper.make_tensor_value_info("project", TensorProto.FLOAT, [1, 32, 7, 7])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_grouped_convs_and_squeeze_excitation_run_blocked_and_match_onnxruntime(tmp_path):
    model = grouped_block_model()
    artifact = core.compile(model, "x86-64-v3", 3, benchmark=False)  # AVX2's 8 lanes, whatever the host
    report = artifact.report
    assert report["graph"]["layout_transforms"] == 2  # into the region and out of it: nothing in between
    assert sum("Conv2dNCHWc" in k["ops"] for k in report["kernels"]) == 6
    assert report["validation"]["max_abs_err"] < 1e-4
    path = tmp_path / "grouped.tar.gz"
    artifact.save(path)
    assert_artifact_matches_onnxruntime(path, model)
