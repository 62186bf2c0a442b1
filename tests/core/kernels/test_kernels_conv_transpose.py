"""ConvTranspose (phase-decomposed onto one Conv) compiled vs ONNX Runtime: strides, dilations, groups,
pads, output_padding, output_shape, auto_pad, 1-D, bias, run-time and constant weights."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.frontend.converters.conv_transpose import phase_axis

from .spatial_cases import assert_kiln_matches_ort

rng = np.random.default_rng(13)

CASES = [
    ((1, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2]}),
    ((2, 4, 5, 6), (4, 2, 3, 4), {"strides": [3, 2], "pads": [1, 2, 2, 0], "output_padding": [1, 1]}),
    ((1, 6, 4, 5), (6, 2, 3, 3), {"strides": [2, 1], "dilations": [2, 3], "group": 3}),
    ((1, 2, 5, 5), (2, 4, 2, 2), {"strides": [2, 2], "pads": [3, 1, 2, 3]}),  # pads beyond a stride
    ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 9]}),
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 4, 5), (3, 2, 4, 3), {"strides": [3, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 4, 5), (3, 5, 1, 1), {"strides": [4, 3]}),  # kernel smaller than the stride: zero phases
    ((2, 3, 7), (3, 4, 5), {"strides": [3], "pads": [2, 1]}),
    ((1, 4, 3, 4, 2), (4, 2, 2, 3, 2), {"strides": [2, 1, 3], "pads": [1, 0, 0, 0, 1, 1], "group": 2}),  # ConvND
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES)
@pytest.mark.parametrize("constant_weights", [False, True])
def test_conv_transpose_matches_ort(x_shape, w_shape, attrs, constant_weights):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    inputs, constants = ({"x": x}, {"w": w, "b": b}) if constant_weights else ({"x": x, "w": w, "b": b}, {})
    assert_kiln_matches_ort(node, inputs, constants, opset=17, atol=1e-4)


def test_phases_cover_the_output_window():
    for size_in, kernel, stride, dilation, pad, out in [(5, 3, 2, 1, 0, 11), (4, 2, 3, 2, 4, 5), (6, 1, 4, 1, 0, 21)]:
        axis = phase_axis(size_in, kernel, stride, dilation, pad, out)
        assert axis.crop + axis.size <= axis.rows * stride
        assert axis.pad_begin >= 0 and axis.pad_end >= 0


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 6], [2, 3], {}),
    ([7, 6], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
    ([4, 5, 3], [2, 2, 2], {"strides": [1, 2, 1]}),
])
def test_col2im_matches_ort(image, block, attrs):
    k = len(image)
    strides, dilations = attrs.get("strides", [1] * k), attrs.get("dilations", [1] * k)
    pads = attrs.get("pads", [0] * 2 * k)
    counts = [(image[a] + pads[a] + pads[a + k] - (block[a] - 1) * dilations[a] - 1) // strides[a] + 1 for a in range(k)]
    x = rng.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(counts)))).astype(np.float32)
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    constants = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    assert_kiln_matches_ort(node, {"x": x}, constants, opset=18)
