"""GridSample (every mode and padding, 2-D and 3-D) and AffineGrid compiled vs ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from .spatial_cases import assert_kiln_matches_ort

rng = np.random.default_rng(11)
X = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
GRID = rng.uniform(-1.6, 1.6, (2, 4, 7, 2)).astype(np.float32)  # points beyond the borders too
X3 = rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)
GRID3 = rng.uniform(-1.3, 1.3, (1, 3, 2, 4, 3)).astype(np.float32)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode, padding, align):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align)
    # ORT departs from ONNX's reference on nearest-mode halves (np.rint) and border-clamped cubic taps.
    assert_kiln_matches_ort(node, {"x": X, "grid": GRID}, opset=20, reference="onnx" if mode == "nearest" or (mode, padding) == ("cubic", "border") else "ort")


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_grid_sample_3d(mode, padding):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding)
    assert_kiln_matches_ort(node, {"x": X3, "grid": GRID3}, opset=20, reference="onnx")


@pytest.mark.parametrize("size,align", [([2, 3, 4, 5], 0), ([2, 3, 4, 5], 1), ([2, 1, 3, 4, 2], 0)])
def test_affine_grid(size, align):
    spatial = len(size) - 2
    theta = rng.standard_normal((size[0], spatial, spatial + 1)).astype(np.float32)
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    assert_kiln_matches_ort(node, {"theta": theta}, {"size": np.array(size, np.int64)}, opset=20, reference="onnx")


@pytest.mark.parametrize("attrs,with_mask", [({}, False), ({"strides": [2, 1], "pads": [1, 1, 1, 1], "group": 2,
                                                             "offset_group": 2, "dilations": [1, 2]}, True)])
def test_deform_conv_matches_reference(attrs, with_mask):
    group, offset_group = attrs.get("group", 1), attrs.get("offset_group", 1)
    x = rng.standard_normal((1, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4 // group, 2, 2)).astype(np.float32)
    strides, pads, dil = attrs.get("strides", [1, 1]), attrs.get("pads", [0, 0, 0, 0]), attrs.get("dilations", [1, 1])
    oh = (5 + pads[0] + pads[2] - dil[0] - 1) // strides[0] + 1
    ow = (6 + pads[1] + pads[3] - dil[1] - 1) // strides[1] + 1
    feeds = {"x": x, "w": w, "offset": rng.uniform(-2, 2, (1, offset_group * 8, oh, ow)).astype(np.float32),
             "b": rng.standard_normal(4).astype(np.float32)}
    names = ["x", "w", "offset", "b"]
    if with_mask:
        feeds["mask"] = rng.uniform(0, 1, (1, offset_group * 4, oh, ow)).astype(np.float32)
        names.append("mask")
    node = helper.make_node("DeformConv", names, ["y"], kernel_shape=[2, 2], **attrs)
    assert_kiln_matches_ort(node, feeds, opset=19, reference="onnx")


@pytest.mark.parametrize("mode,transform", [("avg", "half_pixel"), ("avg", "output_half_pixel"), ("max", "half_pixel")])
def test_roi_align_matches_ort(mode, transform):
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 7.5, 8.0], [2.0, 0.0, 10.0, 3.0], [-3.0, -2.0, 4.0, 12.0], [4.0, 4.0, 4.2, 4.1]],
                    np.float32)  # one reaching beyond the map, one degenerate
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, output_height=3, output_width=4,
                            sampling_ratio=2, spatial_scale=0.9, coordinate_transformation_mode=transform)
    feeds = {"x": x, "rois": rois, "batch": np.array([0, 1, 1, 0], np.int64)}
    # ORT's max mode is known to depart from the spec's; ONNX's reference defines the expected values.
    assert_kiln_matches_ort(node, feeds, opset=16, reference="onnx" if mode == "max" else "ort")
