"""Resize (Interpolate kernel): nearest/linear/cubic, coordinate modes, antialias and crop, compiled vs ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from .spatial_cases import assert_kiln_matches_ort

rng = np.random.default_rng(3)
X = rng.standard_normal((1, 2, 6, 7)).astype(np.float32)

CASES = [
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil", "coordinate_transformation_mode": "asymmetric"},
     None, [1, 1, 11, 5]),
    ({"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "align_corners"}, None,
     [1, 1, 12, 10]),  # sizes: with a fractional scale ORT and ONNX's reference disagree on align_corners
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, [1, 1, 1.7, 0.6], None),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, None, [1, 2, 3, 14]),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.4], None),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, [1, 1, 2.5, 0.8], None),
    ({"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "half_pixel_symmetric"}, [1, 1, 0.3, 0.5],
     None),
]


@pytest.mark.parametrize("attrs,scales,sizes", CASES)
def test_resize_matches_reference(attrs, scales, sizes):
    constants = {"roi": np.zeros(0, np.float32)}
    names = ["x", "roi"]
    if scales is not None:
        constants["scales"] = np.array(scales, np.float32)
        names.append("scales")
    else:
        constants["sizes"] = np.array(sizes, np.int64)
        names += ["", "sizes"]
    # ORT departs from ONNX's reference at the borders of antialiased resizes.
    reference = "onnx" if attrs.get("antialias") else "ort"
    assert_kiln_matches_ort(helper.make_node("Resize", names, ["y"], **attrs), {"x": X}, constants, reference=reference)


def test_tf_crop_and_resize_extrapolates_outside_the_roi():
    node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear", extrapolation_value=7.0,
                            coordinate_transformation_mode="tf_crop_and_resize", axes=[2, 3])
    constants = {"roi": np.array([-0.2, 0.1, 0.9, 1.3], np.float32), "sizes": np.array([5, 6], np.int64)}
    y = assert_kiln_matches_ort(node, {"x": X}, constants)[0]
    assert (y == 7.0).any()


def test_many_taps_resample_one_axis_at_a_time():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic", antialias=1)
    x = rng.standard_normal((1, 1, 40, 36)).astype(np.float32)
    assert_kiln_matches_ort(node, {"x": x}, {"scales": np.array([1, 1, 0.2, 0.25], np.float32)}, reference="onnx")


def test_upsample_nearest_integer_input():
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")
    x = rng.integers(-9, 9, (1, 2, 3, 4)).astype(np.int64)
    assert_kiln_matches_ort(node, {"x": x}, {"scales": np.array([1, 1, 2, 3], np.float32)}, opset=9,
                            reference="onnx")  # ORT has no Upsample-9 kernel


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10_rounds_nearest_as_ort(mode):
    # Resize-10: asymmetric coordinates; nearest rounds down when upsampling and up when downsampling.
    node = helper.make_node("Resize", ["x", "scales"], ["y"], mode=mode)
    assert_kiln_matches_ort(node, {"x": X}, {"scales": np.array([1, 1, 0.6, 2.5], np.float32)}, opset=10)


def _conv_then_resize(tail_conv: bool):
    """A segmentation head: conv, bilinear 2x upsampling, then either another conv or the model's output."""
    from onnx import TensorProto, numpy_helper

    w1 = numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((8, 16, 1, 1)) * 0.2).astype(np.float32), "w2")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Resize", ["r", "", "scales"], ["up" if tail_conv else "y"], mode="linear",
                              coordinate_transformation_mode="half_pixel")]
    if tail_conv:
        nodes.append(helper.make_node("Conv", ["up", "w2"], ["y"]))
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8 if tail_conv else 16, 12, 14])],
                              [w1, w2, scales])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("tail_conv", [False, True])
def test_resize_between_blocked_convs_runs_on_channel_blocks(tail_conv):
    from core.frontend import import_onnx
    from tests.backend_calls import optimize
    from core.target import get_target
    from .spatial_cases import assert_model_matches

    model = _conv_then_resize(tail_conv)
    assert_model_matches(model, {"x": rng.standard_normal((1, 8, 6, 7)).astype(np.float32)})
    for target in ("x86-64-v3", "x86-64-v4"):  # 8 and 16 lanes: the graph only, whatever the host
        graph = optimize(import_onnx(model), 3, get_target(target))
        (resize,) = [n for n in graph.nodes if "Interpolate" in n.attrs.get("ops", (n.op,))]
        # resized in NCHW[x]c, and never fused with a transform back to NCHW (whose lanes would each gather a tap)
        assert resize.attrs.get("ops", (resize.op,)) == ("Interpolate",)
        assert graph.type_of(resize.inputs[0]).rank == graph.type_of(resize.outputs[0]).rank == 5
