"""The blocked channel layout NCHW[x]c and its packed conv weights OIHW[x]i[y]o, in numpy: block
choice, packing and unpacking (shared by the layout pass, the blocked ops' folds, kernel benchmarks and tests)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np


def block_for(channels: int, lanes: int) -> int:
    """The largest block <= lanes that divides `channels` (TVM's rule for odd channel counts)."""
    for b in range(min(lanes, channels), 0, -1):
        if channels % b == 0:
            return b
    return 1


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """(N, C, *spatial) -> (N, C/block, *spatial, block): NCHW -> NCHW[x]c, NCDHW -> NCDHW[x]c."""
    n, c, *spatial = x.shape
    axes = tuple(range(3, 3 + len(spatial)))
    return np.ascontiguousarray(x.reshape(n, c // block, block, *spatial).transpose(0, 1, *axes, 2))


def from_blocked(x: np.ndarray) -> np.ndarray:
    """(N, C/b, *spatial, b) -> (N, C, *spatial)."""
    n, cb, *spatial, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, x.ndim - 1, *range(2, x.ndim - 1)).reshape(n, cb * b, *spatial))


def relayout(x: np.ndarray, src_block: int, dst_block: int) -> np.ndarray:
    """Between NCHW (block 0) and NCHW[b]c layouts."""
    plain = from_blocked(x) if src_block else x
    return to_blocked(plain, dst_block) if dst_block else np.ascontiguousarray(plain)


def pack_weights(w: np.ndarray, in_block: int, out_block: int, depthwise: bool) -> np.ndarray:
    """OIHW -> OIHW[i]i[o]o: (O/ob, I/ib, KH, KW, ib, ob); a depthwise conv's (C, 1, KH, KW) weights
    become (C/b, 1, KH, KW, 1, b) so the channel block is the vector axis of input and output alike."""
    o, i, *kernel = w.shape  # (KH, KW), or (KD, KH, KW) for 3-D convs
    taps = tuple(range(4, 4 + len(kernel)))
    if depthwise:
        return np.ascontiguousarray(w.reshape(o // out_block, out_block, 1, *kernel)
                                    .transpose(0, 2, *(t - 1 for t in taps), 1)
                                    .reshape(o // out_block, 1, *kernel, 1, out_block))
    return np.ascontiguousarray(w.reshape(o // out_block, out_block, i // in_block, in_block, *kernel)
                                .transpose(0, 2, *taps, 3, 1))


def unpack_weights(w: np.ndarray, depthwise: bool) -> np.ndarray:
    """The inverse of pack_weights: OIHW (depthwise: (C, 1, KH, KW))."""
    ocb, icb, *kernel, ib, ob = w.shape
    taps = tuple(range(2, 2 + len(kernel)))
    if depthwise:
        return np.ascontiguousarray(w.reshape(ocb, *kernel, ob).transpose(0, len(kernel) + 1, *(t - 1 for t in taps))
                                    .reshape(ocb * ob, 1, *kernel))
    return np.ascontiguousarray(w.transpose(0, w.ndim - 1, 1, w.ndim - 2, *taps).reshape(ocb * ob, icb * ib, *kernel))


# A grouped conv whose groups are narrower than a block runs each block of whole groups as one dense
# block with zero weights between its groups: at most this many multiply-adds per useful one.
MAX_GROUP_WASTE = 4


def grouped_blocking(in_channels: int, out_channels: int, group: int, lanes: int,
                     min_block: int) -> Optional[tuple[int, int]]:
    """(block, groups of the blocked kernel) for a grouped conv that is not depthwise, preferring the
    block a dense conv of as many channels takes (no transforms between them): blocks inside each
    group (the groups stay), else blocks of whole groups of equal in and out width (in_channels /
    block block-diagonal groups, expand_groups), else smaller blocks inside each group of at least
    min_block channels, else None."""
    cg, og = in_channels // group, out_channels // group
    block = block_for(out_channels, lanes)
    if block >= min_block and cg % block == 0 and og % block == 0:
        return block, group
    if block >= min_block and in_channels == out_channels and og == cg and block % cg == 0 \
            and block // cg <= MAX_GROUP_WASTE:
        return block, out_channels // block
    block = block_for(math.gcd(cg, og), lanes)
    return (block, group) if block >= min_block else None


def expand_groups(w: np.ndarray, group: int, blocked_groups: int) -> np.ndarray:
    """Grouped OIHW weights (O, I/group, KH, KW) as `blocked_groups` wider groups (fewer, each holding
    whole groups of equal in and out width): each output channel's weights sit at its group's offset
    inside its wide group, zeros elsewhere."""
    if blocked_groups == group:
        return w
    o, cg, kh, kw = w.shape
    width = o // blocked_groups  # channels per wide group, in and out
    out = np.zeros((o, width, kh, kw), w.dtype)
    for c in range(o):
        start = (c % width) // cg * cg
        out[c, start:start + cg] = w[c]
    return out


def pack_channel_vector(v: np.ndarray, block: int) -> np.ndarray:
    """A per-channel vector (C,) -> (C/block, block), the blocked bias."""
    return np.ascontiguousarray(v.reshape(-1, block))
