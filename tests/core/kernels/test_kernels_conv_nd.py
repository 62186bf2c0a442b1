"""3-D Conv (ConvND: strides, dilations, groups, depthwise, pads, auto_pad, bias) compiled vs ONNX Runtime,
with its schedule, fusion and tuning template."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.frontend import import_onnx
from tests.backend_calls import optimize

from .conv_nd_models import r3d_block_net, unet3d
from .spatial_cases import assert_kiln_matches_ort, assert_model_matches

rng = np.random.default_rng(31)

CASES = [
    ((1, 3, 6, 7, 9), (4, 3, 3, 3, 3), {}),
    ((2, 4, 5, 8, 8), (8, 4, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),
    ((1, 3, 9, 10, 11), (5, 3, 3, 3, 3), {"strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}),
    ((1, 2, 8, 9, 10), (3, 2, 2, 3, 2), {"dilations": [2, 1, 3], "pads": [0, 2, 1, 1, 0, 2]}),
    ((1, 4, 5, 6, 7), (6, 2, 3, 1, 3), {"group": 2, "strides": [1, 2, 3], "pads": [1, 0, 1, 1, 0, 1]}),
    ((1, 6, 4, 9, 9), (6, 1, 3, 3, 3), {"group": 6, "pads": [1, 1, 1, 1, 1, 1]}),  # depthwise
    ((1, 8, 4, 8, 8), (16, 8, 1, 1, 1), {}),  # pointwise
    ((1, 3, 6, 14, 14), (8, 3, 3, 7, 7), {"strides": [1, 2, 2], "pads": [1, 3, 3, 1, 3, 3]}),  # r3d stem
    ((1, 4, 4, 8, 8), (8, 4, 1, 1, 1), {"strides": [2, 2, 2]}),  # r3d downsample shortcut
    ((1, 3, 7, 8, 9), (4, 3, 3, 2, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 1, 2]}),
    ((1, 3, 7, 8, 9), (4, 3, 2, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [1, 2, 2]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES)
def test_conv3d_matches_ort(x_shape, w_shape, attrs):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    assert_kiln_matches_ort(node, {"x": x}, {"w": w, "b": b}, opset=17, atol=1e-4)


def test_conv3d_with_runtime_weights_and_no_bias():
    x = rng.standard_normal((1, 2, 5, 6, 7)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 0, 1, 1, 0, 1], strides=[1, 1, 2])
    assert_kiln_matches_ort(node, {"x": x, "w": w}, opset=17, atol=1e-4)


@pytest.mark.parametrize("build", [unet3d, r3d_block_net], ids=["unet3d", "r3d_blocks"])
def test_3d_models_compile_fused_and_match_ort(build):
    model = build()
    x = rng.standard_normal([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    assert_model_matches(model, {"x": x}, rtol=1e-4, atol=1e-4)
    graph = optimize(import_onnx(model), 3)
    groups = [[n.op for n in g.attr("body").nodes] if g.op == "Fused" else [g.op] for g in graph.nodes]
    convs = [g for g in groups if "ConvND" in g or "ConvNDNCHWc" in g]
    assert sum("ConvNDNCHWc" in g for g in convs) >= 4  # the blocked layout NCDHW[x]c (alter_layout_3d)
    # Every BatchNormalization folded into its conv; ReLU (and the residual Add) fused after it.
    assert convs and all(not any(op in ("BatchNormalization", "Mul") for op in g) for g in convs)
    assert sum("Relu" in g for g in convs) >= 4
