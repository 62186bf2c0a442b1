"""The blocked channel layout NCHW[x]c and its packed conv weights OIHW[x]i[y]o, in numpy: block
choice, packing and unpacking (shared by the layout pass, the blocked ops' folds, kernel benchmarks and tests)."""
from __future__ import annotations

import numpy as np


def block_for(channels: int, lanes: int) -> int:
    """The largest block <= lanes that divides `channels` (TVM's rule for odd channel counts)."""
    for b in range(min(lanes, channels), 0, -1):
        if channels % b == 0:
            return b
    return 1


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """(N, C, H, W) -> (N, C/block, H, W, block)."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def from_blocked(x: np.ndarray) -> np.ndarray:
    """(N, C/b, H, W, b) -> (N, C, H, W)."""
    n, cb, h, w, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w))


def relayout(x: np.ndarray, src_block: int, dst_block: int) -> np.ndarray:
    """Between NCHW (block 0) and NCHW[b]c layouts."""
    plain = from_blocked(x) if src_block else x
    return to_blocked(plain, dst_block) if dst_block else np.ascontiguousarray(plain)


def pack_weights(w: np.ndarray, in_block: int, out_block: int, depthwise: bool) -> np.ndarray:
    """OIHW -> OIHW[i]i[o]o: (O/ob, I/ib, KH, KW, ib, ob); a depthwise conv's (C, 1, KH, KW) weights
    become (C/b, 1, KH, KW, 1, b) so the channel block is the vector axis of input and output alike."""
    o, i, kh, kw = w.shape
    if depthwise:
        return np.ascontiguousarray(w.reshape(o // out_block, out_block, 1, kh, kw).transpose(0, 2, 3, 4, 1)
                                    .reshape(o // out_block, 1, kh, kw, 1, out_block))
    return np.ascontiguousarray(w.reshape(o // out_block, out_block, i // in_block, in_block, kh, kw)
                                .transpose(0, 2, 4, 5, 3, 1))


def unpack_weights(w: np.ndarray, depthwise: bool) -> np.ndarray:
    """The inverse of pack_weights: OIHW (depthwise: (C, 1, KH, KW))."""
    ocb, icb, kh, kw, ib, ob = w.shape
    if depthwise:
        return np.ascontiguousarray(w.reshape(ocb, kh, kw, ob).transpose(0, 3, 1, 2).reshape(ocb * ob, 1, kh, kw))
    return np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3).reshape(ocb * ob, icb * ib, kh, kw))


def pack_channel_vector(v: np.ndarray, block: int) -> np.ndarray:
    """A per-channel vector (C,) -> (C/block, block), the blocked bias."""
    return np.ascontiguousarray(v.reshape(-1, block))
