"""ConvND: grouped convolution over any number of spatial axes with strides, dilations and explicit
pads (3-D Conv, and ConvTranspose/Col2Im on 3-D images, lower to it; 2-D convs keep the tuned Conv op)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, expect_arity, expect_dtype, expect_same_dtype, multiply_add_flops
from .windows import output_size


def conv_nd_window(spatial: int, attrs: Mapping) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(strides, dilations, pads) of a ConvND with `spatial` axes; strides and dilations default to 1."""
    strides = tuple(attrs.get("strides") or (1,) * spatial)
    dilations = tuple(attrs.get("dilations") or (1,) * spatial)
    pads = tuple(attrs.get("pads") or ())
    if len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial \
            or min(strides + dilations, default=1) < 1 or min(pads, default=0) < 0:
        raise ShapeError(f"ConvND: strides {strides}, dilations {dilations} and pads {pads} do not fit "
                         f"{spatial} spatial axes")
    return strides, dilations, pads


def conv_nd_shape(types: Sequence[TensorType], attrs: Mapping) -> tuple[int, ...]:
    expect_arity("ConvND", types, 2, 3)
    expect_dtype("ConvND", types[0], FLOAT_DTYPES)
    expect_same_dtype("ConvND", types)
    x, w = types[0], types[1]
    spatial = x.rank - 2
    group = attrs.get("group", 1)
    if w.rank != x.rank or spatial < 1 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ShapeError(f"ConvND: input {x}, weights {w} and group {group} do not agree")
    strides, dilations, pads = conv_nd_window(spatial, attrs)
    if len(types) == 3 and types[2].shape != (w.shape[0],):
        raise ShapeError(f"ConvND: bias must have shape [{w.shape[0]}], got {types[2]}")
    out = tuple(output_size("ConvND", x.shape[2 + a], w.shape[2 + a], strides[a], pads[a], pads[spatial + a],
                            dilations[a]) for a in range(spatial))
    return (x.shape[0], w.shape[0]) + out


def conv_nd_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """Reference: windows of the zero-padded input (dilated, strided) contracted with the weights group by group."""
    x, w = inputs[0], inputs[1]
    types = [TensorType(a.shape, a.dtype.name) for a in inputs if a is not None]
    shape = conv_nd_shape(types, attrs)
    spatial, group = x.ndim - 2, int(attrs.get("group", 1))
    strides, dilations, pads = conv_nd_window(spatial, attrs)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[a], pads[spatial + a]) for a in range(spatial)])
    span = tuple((w.shape[2 + a] - 1) * dilations[a] + 1 for a in range(spatial))
    win = sliding_window_view(xp, span, axis=tuple(range(2, x.ndim)))  # [N, C, *positions, *span]
    pick = tuple(slice(None, (shape[2 + a] - 1) * strides[a] + 1, strides[a]) for a in range(spatial))
    taps = tuple(slice(None, None, d) for d in dilations)
    win = win[(slice(None), slice(None)) + pick + taps]
    win = win.reshape((x.shape[0], group, w.shape[1]) + win.shape[2:])
    wg = w.astype(np.float64).reshape((group, w.shape[0] // group) + w.shape[1:])
    letters = "hijkl"[:spatial]  # n, g, c, m name the batch, group and channels
    kernel = "pqrst"[:spatial]
    y = np.einsum(f"ngc{letters}{kernel},gmc{kernel}->ngm{letters}", win, wg, optimize=True).reshape(shape)
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + inputs[2].astype(np.float64).reshape((1, -1) + (1,) * spatial)
    return [y.astype(x.dtype)]


# Weights [M, C/group, *kernel]: input channels per group x window multiply-adds per output element.
@register_op("ConvND", Pattern.OUT_ELEMWISE_FUSABLE, fold=conv_nd_fold,
             flops=multiply_add_flops(lambda inputs: int(np.prod(inputs[1].shape[1:]))))
def _conv_nd(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    return [TensorType(conv_nd_shape(types, attrs), types[0].dtype)]
