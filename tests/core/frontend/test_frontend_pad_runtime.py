"""Pad over run-time image sides (core/frontend/converters/pad_runtime.py): one ranged compile, any height and
width in range, against ONNX Runtime."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper as h, numpy_helper as nh

from tests.core.driver.dynamic_models import check_image_sides

IN_RANGE = ((7, 11), (12, 6), (9, 9), (6, 6), (8, 12))


def _model(nodes, inits, out_shape) -> bytes:
    graph = h.make_graph(nodes, "pad", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "H", "W"])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                         [nh.from_array(np.asarray(v), k) for k, v in inits.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def _check_sizes(model: bytes, seed: int) -> None:
    check_image_sides(model, seed, IN_RANGE)


def test_a_constant_pad_at_the_end_of_run_time_sides_grows_them():
    """Pads [.., 2, 3] after the height and width: the output is cut to (height + 2, width + 3) at run time and
    holds the fill (not the input's padding) between."""
    model = _model([h.make_node("Pad", ["x", "pads", "fill"], ["y"])],
                   {"pads": np.array([0, 0, 0, 0, 0, 0, 2, 3], np.int64), "fill": np.array(0.5, np.float32)},
                   [1, 2, "H2", "W3"])
    _check_sizes(model, 1)


def _multiple_of_four(side: str, out: str) -> list:
    """out = ceil(side / 4) * 4 - side through float arithmetic, as torchvision's batch_images computes its pad."""
    return [h.make_node("Cast", [side], [f"{side}_f"], to=TensorProto.FLOAT),
            h.make_node("Div", [f"{side}_f", "four_f"], [f"{side}_q"]), h.make_node("Ceil", [f"{side}_q"], [f"{side}_c"]),
            h.make_node("Mul", [f"{side}_c", "four_f"], [f"{side}_m"]),
            h.make_node("Cast", [f"{side}_m"], [f"{side}_t"], to=TensorProto.INT64),
            h.make_node("Sub", [f"{side}_t", side], [out])]


def test_pads_up_to_a_multiple_computed_at_run_time_pad_the_image_there():
    """The pads vector is built torch-style (pairs per axis, last axis first, reversed by a Slice and a Transpose);
    an average over the padded image reads the zeros up to the multiple of 4 and nothing past it."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "two"], ["height"]),
             h.make_node("Gather", ["s", "three"], ["width"]),
             *_multiple_of_four("height", "pad_h"), *_multiple_of_four("width", "pad_w"),
             h.make_node("Concat", ["zero", "pad_w", "zero", "pad_h", "zero", "zero", "zero", "zero"], ["torch_pads"],
                         axis=0),
             h.make_node("Reshape", ["torch_pads", "pairs"], ["paired"]),
             h.make_node("Slice", ["paired", "last", "before_first", "axis0", "back"], ["reversed"]),
             h.make_node("Transpose", ["reversed"], ["begin_end"], perm=[1, 0]),
             h.make_node("Reshape", ["begin_end", "flat"], ["pads"]),
             h.make_node("Pad", ["x", "pads"], ["padded"]),
             h.make_node("Conv", ["padded", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("GlobalAveragePool", ["c"], ["y"])]
    inits = {"two": np.array([2], np.int64), "three": np.array([3], np.int64), "four_f": np.array(4, np.float32),
             "zero": np.array([0], np.int64), "pairs": np.array([-1, 2], np.int64),
             "last": np.array([-1], np.int64), "before_first": np.array([-5], np.int64),
             "axis0": np.array([0], np.int64), "back": np.array([-1], np.int64), "flat": np.array([-1], np.int64),
             "w": np.random.default_rng(2).standard_normal((3, 2, 3, 3)).astype(np.float32)}
    _check_sizes(_model(nodes, inits, [1, 3, 1, 1]), 2)
