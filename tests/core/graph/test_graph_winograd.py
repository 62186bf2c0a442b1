"""Winograd F(2x2, 3x3) at the graph level: the numpy transforms compute a 3x3 conv, the weight
transform inverts, and the layout pass picks Conv2dWinogradNCHWc for exactly the convs it fits."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.passes import get_pass, run_passes
from core.graph.passes.alter_layout import _LANES
from core.graph.testing import CONV, assert_same_meaning, conv, image_builder, ops, rng
from core.graph.winograd import A_T, B_T, G, winograd_weights, weights_from_winograd


@pytest.fixture(autouse=True)
def eight_lanes():
    token = _LANES.set(8)
    yield
    _LANES.reset(token)


def test_the_transforms_compute_a_3x3_correlation_of_one_tile():
    d, g = rng(0).standard_normal((4, 4)), rng(1).standard_normal((3, 3))
    y = A_T @ ((G @ g @ G.T) * (B_T @ d @ B_T.T)) @ A_T.T
    direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(2)] for i in range(2)])
    np.testing.assert_allclose(y, direct, rtol=1e-12, atol=1e-12)


def test_weight_transform_layout_and_inverse():
    w = rng(2).standard_normal((16, 8, 3, 3)).astype(np.float32)
    u = winograd_weights(w, 4, 8)
    assert u.shape == (16, 2, 2, 4, 8)
    full = np.einsum("ar,oirs,bs->aboi", G, w.astype(np.float64), G)
    np.testing.assert_allclose(u[1 * 4 + 2, 1, 0, 3], full[1, 2, 8:16, 3], rtol=1e-6)  # (a, b) = (1, 2), ic 3
    np.testing.assert_allclose(weights_from_winograd(u), w, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="3x3"):
        winograd_weights(np.zeros((8, 8, 5, 5), np.float32), 8, 8)


def test_layout_pass_uses_winograd_for_wide_3x3_stride1_convs_only():
    b, x = image_builder((1, 32, 8, 8))
    x = conv(b, x, 32, 32, seed=0)  # Winograd
    (x,) = b.add_node("Relu", [x])
    x = conv(b, x, 32, 16, seed=1)  # 16 output channels: direct
    x = conv(b, x, 16, 32, seed=2, bias=False)  # 16 input channels: direct
    w = b.add_constant(rng(3).standard_normal((32, 32, 3, 3)).astype(np.float32), "w")
    (x,) = b.add_node("Conv", [x, w], **dict(CONV, strides=(2, 2)))  # strided: direct
    b.set_outputs([x])
    graph = b.build()
    after = run_passes(graph, [(n, get_pass(n)) for n in ("alter_layout", "eliminate_dead_code")])
    assert [op for op in ops(after) if op.startswith("Conv")] == ["Conv2dWinogradNCHWc"] + ["Conv2dNCHWc"] * 3
    winograd = next(n for n in after.nodes if n.op == "Conv2dWinogradNCHWc")
    assert after.constants[winograd.inputs[1]].shape == (16, 4, 4, 8, 8)
    assert_same_meaning(graph, after, rtol=1e-4, atol=1e-4)  # the interpreter folds it by the inverse transform
