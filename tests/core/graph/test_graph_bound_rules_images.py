"""Bound rules for images with run-time height and width (core/graph/bound_rules_multi.py,
bound_rules_spatial.py): flattening the sides into one axis, RoiAlign over the valid map, a product of the
sides as a length; one ranged compile each, against ONNX Runtime at several sizes."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper as h, numpy_helper as nh

from tests.core.driver.dynamic_models import check_image_sides

IN_RANGE = ((7, 11), (12, 6), (9, 9), (6, 6), (12, 12))


def _model(nodes, inits, outputs, opset: int = 17) -> bytes:
    graph = h.make_graph(nodes, "image", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "H", "W"])],
                         [h.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in outputs],
                         [nh.from_array(np.asarray(v), k) for k, v in inits.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def _check_sizes(model: bytes, seed: int) -> None:
    check_image_sides(model, seed, IN_RANGE)


def test_height_and_width_flattened_into_one_axis_are_compacted():
    """[1, H, W, 2] -> [1, H*W, 2] (a detector's anchors): the rows at the actual sides, in their order, and the
    output cut at H*W (a product of the sides, not a sum: it comes back with its own run-time length)."""
    model = _model([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                    h.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
                    h.make_node("Reshape", ["t", "rows"], ["y"])],
                   {"w": np.random.default_rng(1).standard_normal((2, 2, 3, 3)).astype(np.float32),
                    "rows": np.array([1, -1, 2], np.int64)}, [("y", [1, "HW", 2])])
    _check_sizes(model, 1)


def test_roi_align_samples_the_valid_map_and_clamps_at_its_run_time_edges():
    """Regions reaching past the smaller maps (x, y up to 13): samples clamp to the valid last row and column and
    count as zero past them, as on a map of the actual size."""
    rois = np.array([[0, 0, 5, 5], [2.5, 1, 13, 9], [4, 4, 12.6, 12.9], [-1, -1, 3, 2]], np.float32)
    model = _model([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                    h.make_node("RoiAlign", ["c", "rois", "batch"], ["y"], output_height=3, output_width=2,
                                sampling_ratio=2, spatial_scale=1.0, mode="avg",
                                coordinate_transformation_mode="half_pixel")],
                   {"w": np.random.default_rng(2).standard_normal((3, 2, 3, 3)).astype(np.float32), "rois": rois,
                    "batch": np.zeros(4, np.int64)}, [("y", [4, 3, 3, 2])], opset=16)
    _check_sizes(model, 2)


def test_levels_flattened_joined_and_sliced_back_by_their_run_time_counts():
    """A detector's per-level scores: two maps (full and half size) flattened to H*W*2 entries each, joined, then
    the second level sliced back at [n0, n0 + n1) with both counts products of run-time sides (no sums of them)."""
    def count(shape: str, out: str) -> list:
        return [h.make_node("Gather", [shape, "two"], [f"{out}_h"]), h.make_node("Gather", [shape, "three"], [f"{out}_w"]),
                h.make_node("Mul", [f"{out}_h", f"{out}_w"], [f"{out}_hw"]), h.make_node("Mul", [f"{out}_hw", "two"], [out])]

    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 3, 1]), h.make_node("Reshape", ["ct", "flat"], ["c0"]),
             h.make_node("Transpose", ["p"], ["pt"], perm=[0, 2, 3, 1]), h.make_node("Reshape", ["pt", "flat"], ["c1"]),
             h.make_node("Concat", ["c0", "c1"], ["joined"], axis=1),
             h.make_node("Shape", ["c"], ["sc"]), h.make_node("Shape", ["p"], ["sp"]), *count("sc", "n0"),
             *count("sp", "n1"), h.make_node("Add", ["n0", "n1"], ["end"]),
             h.make_node("Slice", ["joined", "n0", "end", "one"], ["level"]),
             h.make_node("ReduceSum", ["level", "one"], ["y"], keepdims=0)]
    inits = {"w": np.random.default_rng(3).standard_normal((2, 2, 3, 3)).astype(np.float32),
             "flat": np.array([1, -1], np.int64), "two": np.array([2], np.int64), "three": np.array([3], np.int64),
             "one": np.array([1], np.int64)}
    _check_sizes(_model(nodes, inits, [("y", [1])]), 3)
