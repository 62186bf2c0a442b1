"""Winograd F(m x m, 3x3) (Lavin & Gray 2016) in numpy, for output tiles of m = 2 or 4: the
transform matrices and the compile-time transform of conv weights, out = A^T [(G g G^T) * (B^T d B)] A.

Per m x m outputs and input channel, a 3x3 stride-1 conv then costs (m+2)^2 multiplies instead of
9 m^2: 16 instead of 36 for m = 2, 36 instead of 144 for m = 4 (at the price of larger transforms,
larger weights and a little more rounding).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WinogradTransforms:
    tile: int  # m: output pixels per tile side
    B_T: np.ndarray  # (alpha, alpha): input tile -> transformed
    G: np.ndarray  # (alpha, 3): 3x3 kernel -> transformed
    A_T: np.ndarray  # (m, alpha): transformed product -> output tile

    @property
    def alpha(self) -> int:
        """Side of the input tile and of the transformed tiles: m + 3 - 1."""
        return self.tile + 2


TRANSFORMS = {
    2: WinogradTransforms(
        2,
        np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64),
        np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)),
    4: WinogradTransforms(  # interpolation points 0, +-1, +-2 and infinity
        4,
        np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], dtype=np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], dtype=np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                 dtype=np.float64)),
}


def transforms_for_positions(positions: int) -> WinogradTransforms:
    """The transforms whose alpha x alpha positions transformed weights of this leading extent hold."""
    for t in TRANSFORMS.values():
        if t.alpha * t.alpha == positions:
            return t
    raise ValueError(f"no Winograd transform has {positions} positions (16: F(2x2,3x3), 36: F(4x4,3x3))")


def winograd_weights(w: np.ndarray, in_block: int, out_block: int, tile: int = 2) -> np.ndarray:
    """OIHW 3x3 weights -> (alpha^2, O/ob, I/ib, ib, ob): for each transformed position a packed
    GEMM operand whose output-channel block is the vector axis (as Conv2dNCHWc's weights)."""
    o, i, kh, kw = w.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"Winograd F(m x m, 3x3) needs 3x3 weights, got {kh}x{kw}")
    t = TRANSFORMS[tile]
    u = np.einsum("ar,oirs,bs->aboi", t.G, w.astype(np.float64), t.G).reshape(t.alpha * t.alpha, o, i)
    packed = u.reshape(-1, o // out_block, out_block, i // in_block, in_block).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(packed.astype(w.dtype))


def weights_from_winograd(u: np.ndarray) -> np.ndarray:
    """The inverse of winograd_weights (G has full column rank, so pinv(G) G = I): OIHW weights."""
    positions, ocb, icb, ib, ob = u.shape
    t = transforms_for_positions(positions)
    plain = u.astype(np.float64).transpose(0, 1, 4, 2, 3).reshape(t.alpha, t.alpha, ocb * ob, icb * ib)
    g_inv = np.linalg.pinv(t.G)
    return np.ascontiguousarray(np.einsum("ra,aboi,sb->oirs", g_inv, plain, g_inv).astype(u.dtype))
