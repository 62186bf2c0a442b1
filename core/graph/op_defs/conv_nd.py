"""ConvND: stride-1, undilated grouped convolution over any number of spatial axes with explicit pads
(ConvTranspose and Col2Im on 3-D images lower to it; 2-D convs keep the tuned Conv op)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, expect_arity, expect_dtype, expect_same_dtype


def conv_nd_shape(types: Sequence[TensorType], attrs: Mapping) -> tuple[int, ...]:
    expect_arity("ConvND", types, 2, 3)
    expect_dtype("ConvND", types[0], FLOAT_DTYPES)
    expect_same_dtype("ConvND", types)
    x, w = types[0], types[1]
    spatial = x.rank - 2
    pads = tuple(attrs.get("pads") or ())
    group = attrs.get("group", 1)
    if w.rank != x.rank or spatial < 1 or len(pads) != 2 * spatial or x.shape[1] != w.shape[1] * group \
            or w.shape[0] % group:
        raise ShapeError(f"ConvND: input {x}, weights {w}, pads {pads} and group {group} do not agree")
    if len(types) == 3 and types[2].shape != (w.shape[0],):
        raise ShapeError(f"ConvND: bias must have shape [{w.shape[0]}], got {types[2]}")
    out = tuple(x.shape[2 + a] + pads[a] + pads[spatial + a] - w.shape[2 + a] + 1 for a in range(spatial))
    if any(o < 1 for o in out):
        raise ShapeError(f"ConvND: kernel {w.shape[2:]} does not fit the padded input {x}")
    return (x.shape[0], w.shape[0]) + out


def conv_nd_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """Reference: windows of the zero-padded input contracted with the weights group by group."""
    x, w = inputs[0], inputs[1]
    types = [TensorType(a.shape, a.dtype.name) for a in inputs if a is not None]
    shape = conv_nd_shape(types, attrs)
    spatial, pads, group = x.ndim - 2, attrs["pads"], int(attrs.get("group", 1))
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[a], pads[spatial + a]) for a in range(spatial)])
    win = sliding_window_view(xp, w.shape[2:], axis=tuple(range(2, x.ndim)))  # [N, C, *out, *kernel]
    win = win.reshape((x.shape[0], group, w.shape[1]) + win.shape[2:])
    wg = w.astype(np.float64).reshape((group, w.shape[0] // group) + w.shape[1:])
    letters = "abcdefgh"[:spatial]
    kernel = "pqrstuvw"[:spatial]
    y = np.einsum(f"ngc{letters}{kernel},gmc{kernel}->ngm{letters}", win, wg, optimize=True).reshape(shape)
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + inputs[2].astype(np.float64).reshape((1, -1) + (1,) * spatial)
    return [y.astype(x.dtype)]


@register_op("ConvND", Pattern.REDUCTION, fold=conv_nd_fold)
def _conv_nd(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    return [TensorType(conv_nd_shape(types, attrs), types[0].dtype)]
