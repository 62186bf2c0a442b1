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
