"""Sliding-window arithmetic shared by Conv and pooling: output sizes, attribute checks, numpy views."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from core.errors import ShapeError


def pair(op: str, attrs: Mapping, key: str, minimum: int) -> tuple[int, int]:
    value = attrs.get(key)
    if not isinstance(value, tuple) or len(value) != 2 or not all(isinstance(v, int) and v >= minimum for v in value):
        raise ShapeError(f"{op}: attribute {key} must be two ints >= {minimum}, got {value!r}")
    return value


def pads4(op: str, attrs: Mapping) -> tuple[int, int, int, int]:
    value = attrs.get("pads")
    if not isinstance(value, tuple) or len(value) != 4 or not all(isinstance(v, int) and v >= 0 for v in value):
        raise ShapeError(f"{op}: attribute pads must be (top, left, bottom, right) non-negative ints, got {value!r}")
    return value


def output_size(op: str, size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int,
                ceil_mode: int = 0) -> int:
    """ONNX's window count; with ceil_mode the last window must still start inside input or left padding."""
    span = size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)
    if span < 0:
        raise ShapeError(f"{op}: window of {kernel} (dilation {dilation}) does not fit input of {size} "
                         f"with pads ({pad_begin}, {pad_end})")
    if not ceil_mode:
        return span // stride + 1
    count = -(-span // stride) + 1
    if (count - 1) * stride >= size + pad_begin:
        count -= 1
    return count


def output_hw(op: str, hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int],
              dilations: Sequence[int], ceil_mode: int = 0) -> tuple[int, int]:
    return tuple(output_size(op, hw[a], kernel[a], strides[a], pads[a], pads[a + 2], dilations[a], ceil_mode)
                 for a in range(2))  # type: ignore[return-value]


def padded(x: np.ndarray, out_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
           pads: Sequence[int], dilations: Sequence[int], fill) -> np.ndarray:
    """Pads (or crops) the last two axes so that exactly the windows of every output position exist."""
    widths = [(0, 0)] * (x.ndim - 2)
    limits = []
    for a in range(2):
        needed = (out_hw[a] - 1) * strides[a] + (kernel[a] - 1) * dilations[a] + 1
        widths.append((pads[a], max(needed - pads[a] - x.shape[x.ndim - 2 + a], 0)))
        limits.append(needed)
    xp = np.pad(x, widths, mode="constant", constant_values=fill)
    return xp[..., : limits[0], : limits[1]]


def windows(xp: np.ndarray, out_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int]) -> np.ndarray:
    """View [..., OH, OW, KH, KW] of the windows of an already padded array (no copy)."""
    extent = tuple((kernel[a] - 1) * dilations[a] + 1 for a in range(2))
    view = sliding_window_view(xp, extent, axis=(-2, -1))
    view = view[..., :: strides[0], :: strides[1], :: dilations[0], :: dilations[1]]
    return view[..., : out_hw[0], : out_hw[1], :, :]
