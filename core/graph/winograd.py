"""Winograd F(2x2, 3x3) (Lavin & Gray 2016) in numpy: its transform matrices and the compile-time
transform of packed conv weights, out = A^T [(G g G^T) * (B^T d B)] A per 2x2 output tile.

A 3x3 stride-1 conv then costs 16 multiplies per 2x2 outputs and input channel instead of 36.
"""
from __future__ import annotations

import numpy as np

TILE, ALPHA = 2, 4  # outputs per tile side; transformed tile side (TILE + 3 - 1)

B_T = np.array([[1, 0, -1, 0],
                [0, 1, 1, 0],
                [0, -1, 1, 0],
                [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0],
              [0.5, 0.5, 0.5],
              [0.5, -0.5, 0.5],
              [0, 0, 1]], dtype=np.float64)
A_T = np.array([[1, 1, 1, 0],
                [0, 1, -1, -1]], dtype=np.float64)


def winograd_weights(w: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """OIHW 3x3 weights -> (16, O/ob, I/ib, ib, ob): for each of the 16 transformed positions a
    packed GEMM operand whose output-channel block is the vector axis (as Conv2dNCHWc's weights)."""
    o, i, kh, kw = w.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"Winograd F(2x2, 3x3) needs 3x3 weights, got {kh}x{kw}")
    u = np.einsum("ar,oirs,bs->aboi", G, w.astype(np.float64), G).reshape(ALPHA * ALPHA, o, i)
    packed = u.reshape(ALPHA * ALPHA, o // out_block, out_block, i // in_block, in_block).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(packed.astype(w.dtype))


def weights_from_winograd(u: np.ndarray) -> np.ndarray:
    """The inverse of winograd_weights (G has full column rank, so pinv(G) G = I): OIHW weights."""
    ab, ocb, icb, ib, ob = u.shape
    plain = u.astype(np.float64).transpose(0, 1, 4, 2, 3).reshape(ALPHA, ALPHA, ocb * ob, icb * ib)
    g_inv = np.linalg.pinv(G)
    return np.ascontiguousarray(np.einsum("ra,aboi,sb->oirs", g_inv, plain, g_inv).astype(u.dtype))
