"""PoolND (3-D pooling, dilated averages, LpPool) compiled vs ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from .spatial_cases import assert_kiln_matches_ort

rng = np.random.default_rng(5)
X3 = rng.standard_normal((1, 2, 7, 6, 8)).astype(np.float32)
X2 = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)

CASES = [
    ("MaxPool", X3, {"kernel_shape": [3, 2, 3], "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0], "ceil_mode": 1}),
    ("MaxPool", X3, {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 3]}),
    ("AveragePool", X3, {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1],
                         "count_include_pad": 1}),
    ("AveragePool", X3, {"kernel_shape": [3, 2, 2], "strides": [2, 2, 3], "pads": [1, 0, 1, 1, 1, 1], "ceil_mode": 1}),
    ("AveragePool", X2, {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [2, 1, 1, 1]}),
    ("AveragePool", X2, {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("LpPool", X2, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "p": 3}),
    ("LpPool", X2, {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER"}),
    ("LpPool", X3, {"kernel_shape": [2, 2, 2], "p": 1}),
]


@pytest.mark.parametrize("op,x,attrs", CASES)
def test_pool_nd_matches_ort(op, x, attrs):
    assert_kiln_matches_ort(helper.make_node(op, ["x"], ["y"], **attrs), {"x": x}, opset=19)
