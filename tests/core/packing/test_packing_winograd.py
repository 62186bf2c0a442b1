"""Winograd F(2x2, 3x3) and F(4x4, 3x3) in numpy: the transforms compute a 3x3 conv and the weight transform inverts."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.graphs import rng
from core.packing.winograd import TRANSFORMS, transforms_for_positions, winograd_weights, weights_from_winograd


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
