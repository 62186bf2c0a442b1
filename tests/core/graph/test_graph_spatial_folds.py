"""Constant-folding references of the spatial IR ops (ConvND, MaxUnpool) against known answers."""
from __future__ import annotations

import numpy as np

from core.graph.op_defs.conv import conv2d_nchw
from core.graph.op_defs.conv_nd import conv_nd_fold
from core.graph.op_defs.unpool import max_unpool_fold


def test_conv_nd_fold_agrees_with_the_2d_conv_reference():
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 5, 6), (6, 2, 3, 2), (6,)))
    got = conv_nd_fold([x, w, b], {"pads": (1, 0, 2, 1), "group": 2})[0]
    want = conv2d_nchw([x, w, b], {"strides": (1, 1), "pads": (1, 0, 2, 1), "dilations": (1, 1), "group": 2})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_max_unpool_fold_pads_a_larger_output_shape_after_the_unpooled_one():
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    indices = np.array([[[[5, 7], [13, 15]]]], np.int64)
    attrs = {"kernel": (2, 2), "strides": (2, 2), "pads": (0, 0, 0, 0), "output_shape": (1, 1, 5, 5)}
    expected = np.zeros((5, 5), np.float32)
    expected[1, 1], expected[1, 3], expected[3, 1], expected[3, 3] = 5, 6, 7, 8
    np.testing.assert_array_equal(max_unpool_fold([x, indices], attrs)[0][0, 0], expected)


def test_conv_nd_fold_strides_and_dilations_agree_with_the_2d_conv_reference():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 4, 9, 11)).astype(np.float32), rng.standard_normal((4, 2, 3, 2)).astype(np.float32)
    attrs = {"strides": (2, 3), "dilations": (2, 1), "pads": (1, 2, 0, 1), "group": 2}
    np.testing.assert_allclose(conv_nd_fold([x, w], attrs)[0], conv2d_nchw([x, w], attrs)[0], rtol=1e-5, atol=1e-5)
