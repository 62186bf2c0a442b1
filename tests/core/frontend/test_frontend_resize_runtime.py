"""Resize over run-time image sides (core/frontend/converters/resize_runtime.py): one ranged compile, any height
and width in range, against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper as h, numpy_helper as nh

from tests.core.driver.dynamic_models import check_image_sides

IN_RANGE = ((7, 11), (12, 6), (9, 9), (6, 6))


def _model(nodes, inits, out_shape) -> bytes:
    graph = h.make_graph(nodes, "resize", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "H", "W"])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                         [nh.from_array(v, k) for k, v in inits.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def _check_sizes(model: bytes, seed: int) -> None:
    check_image_sides(model, seed, IN_RANGE)


@pytest.mark.parametrize("mode, transform", [("linear", "half_pixel"), ("linear", "align_corners"),
                                             ("linear", "pytorch_half_pixel"), ("nearest", "asymmetric")])
def test_whole_scales_resize_the_run_time_sides_and_the_output_is_cut_to_them(mode, transform):
    model = _model([h.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode,
                                coordinate_transformation_mode=transform)],
                   {"scales": np.array([1, 1, 2, 2], np.float32)}, [1, 2, "H2", "W2"])
    _check_sizes(model, 1)


@pytest.mark.parametrize("mode, transform", [("linear", "half_pixel"), ("nearest", "half_pixel"),
                                             ("linear", "half_pixel_symmetric")])
def test_fractional_scales_take_floored_run_time_sizes(mode, transform):
    """1.5 up and 0.75 down: the output sides are floor(side * scale) at run time, and what follows (an average
    over the valid part) reads every resized entry."""
    model = _model([h.make_node("Resize", ["x", "", "scales"], ["r"], mode=mode,
                                coordinate_transformation_mode=transform),
                    h.make_node("GlobalAveragePool", ["r"], ["y"])],
                   {"scales": np.array([1, 1, 1.5, 0.75], np.float32)}, [1, 2, 1, 1])
    _check_sizes(model, 2)


@pytest.mark.parametrize("mode, transform", [("nearest", "asymmetric"), ("linear", "half_pixel")])
def test_a_pyramid_upsamples_to_its_laterals_run_time_size(mode, transform):
    """A feature pyramid's top-down path: a strided conv's map resized to the input's own run-time shape
    (sizes from Shape), then added to it."""
    weights = np.random.default_rng(3).standard_normal((2, 2, 3, 3)).astype(np.float32)
    model = _model([h.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
                    h.make_node("Shape", ["x"], ["s"]),
                    h.make_node("Resize", ["c", "", "", "s"], ["u"], mode=mode, coordinate_transformation_mode=transform),
                    h.make_node("Add", ["x", "u"], ["y"])], {"w": weights}, [1, 2, "H", "W"])
    _check_sizes(model, 3)


def test_sizes_computed_in_floats_from_the_shape_are_sliced_at_run_time():
    """sizes = floor(shape * 1.5) through float arithmetic: each output side is read from the sizes vector at run
    time (not a sum of the input lengths, so a pool ends the graph)."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             h.make_node("Mul", ["sf", "factor"], ["scaled"]), h.make_node("Floor", ["scaled"], ["floored"]),
             h.make_node("Cast", ["floored"], ["sizes"], to=TensorProto.INT64),
             h.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode="linear"),
             h.make_node("GlobalAveragePool", ["r"], ["y"])]
    model = _model(nodes, {"factor": np.array([1, 1, 1.5, 1.5], np.float32)}, [1, 2, 1, 1])
    _check_sizes(model, 4)
