"""Winograd F(2x2, 3x3) and F(4x4, 3x3) at the graph level: the numpy transforms compute a 3x3 conv, the weight
transform inverts, and the layout pass picks Conv2dWinogradNCHWc for exactly the convs it fits."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.passes import get_pass, run_passes
from core.graph.passes.alter_layout import _LANES
from core.graph.interpret import evaluate
from core.graph.testing import CONV, conv, feeds_for, image_builder, rng
from core.graph.winograd import TRANSFORMS, transforms_for_positions, winograd_weights, weights_from_winograd


@pytest.fixture(autouse=True)
def eight_lanes():
    token = _LANES.set(8)
    yield
    _LANES.reset(token)


@pytest.mark.parametrize("m", [2, 4])
def test_the_transforms_compute_a_3x3_correlation_of_one_tile(m):
    t = TRANSFORMS[m]
    assert t.B_T.shape == (m + 2, m + 2) and t.G.shape == (m + 2, 3) and t.A_T.shape == (m, m + 2)
    d, g = rng(0).standard_normal((m + 2, m + 2)), rng(1).standard_normal((3, 3))
    y = t.A_T @ ((t.G @ g @ t.G.T) * (t.B_T @ d @ t.B_T.T)) @ t.A_T.T
    direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(y, direct, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [2, 4])
def test_weight_transform_layout_and_inverse(m):
    w = rng(2).standard_normal((16, 8, 3, 3)).astype(np.float32)
    u = winograd_weights(w, 4, 8, m)
    alpha = m + 2
    assert u.shape == (alpha * alpha, 2, 2, 4, 8) and transforms_for_positions(u.shape[0]).tile == m
    full = np.einsum("ar,oirs,bs->aboi", TRANSFORMS[m].G, w.astype(np.float64), TRANSFORMS[m].G)
    np.testing.assert_allclose(u[1 * alpha + 2, 1, 0, 3], full[1, 2, 8:16, 3], rtol=1e-6)  # (a, b) = (1, 2), ic 3
    np.testing.assert_allclose(weights_from_winograd(u), w, rtol=1e-5, atol=1e-5)


def test_weights_that_are_not_3x3_or_not_transformed_are_refused():
    with pytest.raises(ValueError, match="3x3"):
        winograd_weights(np.zeros((8, 8, 5, 5), np.float32), 8, 8)
    with pytest.raises(ValueError, match="25 positions"):
        transforms_for_positions(25)


def test_layout_pass_uses_winograd_for_wide_3x3_stride1_convs_only():
    b, x = image_builder((1, 32, 28, 28))
    x = conv(b, x, 32, 32, seed=0)  # Winograd F(4x4): a large map
    (x,) = b.add_node("Relu", [x])
    w = b.add_constant(rng(3).standard_normal((32, 32, 3, 3)).astype(np.float32), "w")
    (x,) = b.add_node("Conv", [x, w], **dict(CONV, strides=(2, 2)))  # strided: direct
    x = conv(b, x, 32, 32, seed=4)  # Winograd F(2x2): 14x14
    x = conv(b, x, 32, 16, seed=1)  # 16 output channels: direct
    x = conv(b, x, 16, 32, seed=2, bias=False)  # 16 input channels: direct
    b.set_outputs([x])
    graph = b.build()
    after = run_passes(graph, [(n, get_pass(n)) for n in ("alter_layout", "eliminate_dead_code")])
    convs = [n for n in after.nodes if n.op.startswith("Conv")]
    assert [n.op for n in convs] == ["Conv2dWinogradNCHWc", "Conv2dNCHWc", "Conv2dWinogradNCHWc"] + ["Conv2dNCHWc"] * 2
    assert after.constants[convs[0].inputs[1]].shape == (36, 4, 4, 8, 8)
    assert after.constants[convs[2].inputs[1]].shape == (16, 4, 4, 8, 8)
    # The interpreter folds the Winograd convs by the inverse weight transform; the outputs reach ~1e3
    # (four unnormalized convs), so the tolerance follows their scale.
    feeds = feeds_for(graph)
    expected, actual = evaluate(graph, feeds)[graph.outputs[0]], evaluate(after, feeds)[graph.outputs[0]]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))
