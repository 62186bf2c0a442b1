"""padded_value_axes: which values may stop at a padded variable's actual size, and which an op mixing rows keeps."""
from __future__ import annotations

import numpy as np
import onnx.helper as h
import onnx.numpy_helper as nh
from onnx import TensorProto

from core.frontend import import_onnx
from core.graph.padding import padded_value_axes


def _two_branches() -> bytes:
    """x [2, 4]: one branch doubles it (rows stay apart); the other flattens relu(x) and gathers it back with row 0
    reading row 1 (mixes rows)."""
    nodes = [h.make_node("Mul", ["x", "two"], ["doubled"]), h.make_node("Add", ["doubled", "x"], ["y"]),
             h.make_node("Relu", ["x"], ["positive"]), h.make_node("Reshape", ["positive", "flat_shape"], ["flat"]),
             h.make_node("Gather", ["flat", "index"], ["crossed"], axis=0)]
    graph = h.make_graph(
        nodes, "branches", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
         h.make_tensor_value_info("crossed", TensorProto.FLOAT, [2, 4, 1])],
        [nh.from_array(np.array(2.0, np.float32), "two"), nh.from_array(np.array([8, 1], np.int64), "flat_shape"),
         nh.from_array(np.array([[4, 5, 6, 7], [0, 1, 2, 3]], np.int64), "index")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_values_whose_rows_stay_apart_carry_the_axis_and_what_feeds_a_row_mixing_op_does_not():
    graph = import_onnx(_two_branches())
    axes = padded_value_axes(graph, {"x": frozenset({0})})
    producers = graph.producers()
    mul = next(v for v in axes if v in producers and producers[v].op == "Mul")
    assert axes[mul] == frozenset({0}) and axes["y"] == frozenset({0})
    # x flows into the gather through relu and the reshape: none of them may skip rows, nor x itself
    assert not any(producers[v].op in ("Relu", "Reshape", "Gather") for v in axes if v in producers)
    assert "x" not in axes and "crossed" not in axes
