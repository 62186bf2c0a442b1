"""8-bit weights for the dot-product intrinsics (core/te/intrinsics.py): a [K, N] matrix as blocks
[N/lanes][K/depth][lanes][depth] (each call's lanes x 4 weights are 64 contiguous bytes on AVX-512), padded
with zeros to whole blocks, plus the per-column int32 correction that the zero points leave."""
from __future__ import annotations

import numpy as np

DEPTH = 4  # weights per lane and call (AVX2's vpmaddwd intrinsic: 2); conv channels are padded to groups of 4


def shifted_weights(b: np.ndarray, zero_point: np.ndarray) -> np.ndarray | None:
    """b - zero_point (per tensor or per column) as int8, or None when a value leaves int8's range
    (asymmetric int8 weights; those run on the generic int32 kernel)."""
    shifted = b.astype(np.int32) - np.asarray(zero_point, np.int32).reshape(-1 if np.size(zero_point) > 1 else ())
    if shifted.min(initial=0) < -128 or shifted.max(initial=0) > 127:
        return None
    return shifted.astype(np.int8)


def pack_dot_weights(b: np.ndarray, lanes: int, depth: int = DEPTH) -> np.ndarray:
    """[K, N] -> [ceil(N/lanes), ceil(K/depth), lanes, depth] of the same 8-bit dtype, zero padded."""
    k, n = b.shape
    kp, np_ = -(-k // depth) * depth, -(-n // lanes) * lanes
    padded = np.zeros((kp, np_), b.dtype)
    padded[:k, :n] = b
    return np.ascontiguousarray(padded.reshape(kp // depth, depth, np_ // lanes, lanes).transpose(2, 0, 3, 1))


def unpack_dot_weights(packed: np.ndarray, k: int, n: int) -> np.ndarray:
    blocks, depth_blocks, lanes, depth = packed.shape
    return packed.transpose(1, 3, 0, 2).reshape(depth_blocks * depth, blocks * lanes)[:k, :n]


def conv_weights_as_columns(w: np.ndarray) -> np.ndarray:
    """OIHW conv weights as the [kh * kw * C4, O] matrix the packed conv reads: taps outer, channels
    inner (four consecutive channels of one pixel per intrinsic call), C padded with zeros to C4."""
    o, c, kh, kw = w.shape
    c4 = -(-c // DEPTH) * DEPTH
    padded = np.zeros((o, c4, kh, kw), w.dtype)
    padded[:, :c] = w
    return np.ascontiguousarray(padded.transpose(2, 3, 1, 0).reshape(kh * kw * c4, o))


def unpack_conv_weights(packed: np.ndarray, kernel: tuple[int, int], c: int, o: int) -> np.ndarray:
    kh, kw = kernel
    c4 = packed.shape[1] * packed.shape[3] // (kh * kw)
    columns = unpack_dot_weights(packed, kh * kw * c4, o)
    return np.ascontiguousarray(columns.reshape(kh, kw, c4, o).transpose(3, 2, 0, 1)[:, :c])


def column_correction(b: np.ndarray, data_zero_point: int) -> np.ndarray:
    """-data_zero_point * sum_k b[k, j]: what sum_k (a - zp) * b adds to the raw products sum_k a * b."""
    return (-int(data_zero_point) * b.astype(np.int64).sum(axis=0)).astype(np.int32)
