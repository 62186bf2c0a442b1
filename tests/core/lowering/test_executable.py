"""Kernel lowering of fused groups (core.executor): regressions compiled and run end to end."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from core.onnx_backend.backend import KilnBackend


def _model(nodes, inputs, output, initializers=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, [4, 3])], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_fused_value_that_no_kernel_output_reads_is_not_scheduled():
    # RotaryEmbedding's expansion with rotary_dim == head size concatenates an empty slice: Concat's
    # compute skips the empty part, so the slice has no stage in the fused kernel (was a ScheduleError).
    ints = lambda name, values: helper.make_tensor(name, TensorProto.INT64, [len(values)], values)  # noqa: E731
    nodes = [
        helper.make_node("Slice", ["x", "start", "end", "axis"], ["empty"]),
        helper.make_node("Mul", ["x", "x"], ["square"]),
        helper.make_node("Concat", ["square", "empty"], ["joined"], axis=1),
        helper.make_node("Transpose", ["joined"], ["y"], perm=[1, 0]),
    ]
    model = _model(nodes, [("x", [3, 4])], "y",
                   [ints("start", [4]), ints("end", [8]), ints("axis", [1])])
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    (y,) = KilnBackend.prepare(model).run([x])
    np.testing.assert_allclose(y, (x * x).T, rtol=1e-6)
