"""Conv: 2-D NCHW convolution with groups, explicit pads, strides and dilations."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, expect_arity, expect_dtype, expect_same_dtype, multiply_add_flops
from .windows import output_hw, padded, pads4, pair, windows


def grouped_conv_geometry(op: str, x: TensorType, w: TensorType, attrs: Mapping):
    """An NCHW x and OIHW w convolved with Conv's attributes (also ConvInteger's): the output shape, strides,
    pads, dilations and group, or a ShapeError naming `op`."""
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"{op}: expects 4-D NCHW input and 4-D weights, got {x} and {w}")
    strides, dilations = pair(op, attrs, "strides", 1), pair(op, attrs, "dilations", 1)
    pads = pads4(op, attrs)
    group = attrs.get("group")
    if not isinstance(group, int) or group < 1:
        raise ShapeError(f"{op}: attribute group must be a positive int, got {group!r}")
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    if c != cg * group or m % group:
        raise ShapeError(f"{op}: input {x} and weights {w} do not agree with group={group}")
    oh, ow = output_hw(op, (h, wd), (kh, kw), strides, pads, dilations)
    return (n, m, oh, ow), strides, pads, dilations, group


def _conv_geometry(types: Sequence[TensorType], attrs: Mapping):
    expect_arity("Conv", types, 2, 3)
    expect_dtype("Conv", types[0], FLOAT_DTYPES)
    expect_same_dtype("Conv", types)
    geometry = grouped_conv_geometry("Conv", types[0], types[1], attrs)
    m = geometry[0][1]
    if len(types) == 3 and types[2].shape != (m,):
        raise ShapeError(f"Conv: bias must have shape [{m}], got {types[2]}")
    return geometry


def conv2d_nchw(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """Reference conv via im2col: one matmul when group == 1, an einsum over groups otherwise."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    types = [TensorType(a.shape, a.dtype.name) for a in inputs if a is not None]
    (n, m, oh, ow), strides, pads, dilations, group = _conv_geometry(types, attrs)
    compute = np.float32 if x.dtype == np.float16 else x.dtype
    x, w = x.astype(compute, copy=False), w.astype(compute, copy=False)
    c, (_, cg, kh, kw) = x.shape[1], w.shape
    cols = windows(padded(x, (oh, ow), (kh, kw), strides, pads, dilations, 0), (oh, ow), (kh, kw), strides, dilations)
    if group == 1:
        patches = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
        y = (patches @ w.reshape(m, -1).T).reshape(n, oh, ow, m).transpose(0, 3, 1, 2)
    else:
        grouped = cols.reshape(n, group, cg, oh, ow, kh, kw)
        y = np.einsum("ngchwij,gmcij->ngmhw", grouped, w.reshape(group, m // group, cg, kh, kw), optimize=True)
        y = y.reshape(n, m, oh, ow)
    if bias is not None:
        y = y + bias.astype(compute).reshape(1, m, 1, 1)
    return [np.ascontiguousarray(y).astype(inputs[0].dtype, copy=False)]


# OIHW weights: input channels per group x window multiply-adds per output element.
@register_op("Conv", Pattern.OUT_ELEMWISE_FUSABLE, fold=conv2d_nchw,
             flops=multiply_add_flops(lambda inputs: int(np.prod(inputs[1].shape[1:]))))
def _conv(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    shape = _conv_geometry(types, attrs)[0]
    return [TensorType(shape, types[0].dtype)]
