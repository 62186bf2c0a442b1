"""8-bit convs in the channels-last blocked layout [n, 1, H, W, C] (NCHW[x]c with x = C; alter_layout.py)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import expect_arity, expect_dtype
from .integer import EIGHT_BIT, _packed_conv_integer, conv_integer_reference, packed_conv_integer_reference
from .windows import output_hw, pads4, pair


def to_nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(x.shape[0], -1, x.shape[2], x.shape[3]))


def to_channels_last(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)[:, None])


def _channels_last(op: str, x: TensorType) -> None:
    if x.rank != 5 or x.shape[1] != 1:
        raise ShapeError(f"{op}: expects channels-last data [n, 1, H, W, C], got {x}")


def _nchw_type(x: TensorType) -> TensorType:
    n, cb, h, w, c = x.shape
    return TensorType((n, cb * c, h, w), x.dtype)


def packed_conv_blocked_reference(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = to_nchw(inputs[0]) if attrs.get("in_block") else inputs[0]
    return [to_channels_last(packed_conv_integer_reference([x, *inputs[1:]], attrs)[0])]


@register_op("ConvIntegerPackedNCHWc", Pattern.OUT_ELEMWISE_FUSABLE, fold=packed_conv_blocked_reference,
             flops=lambda inputs, outputs, attrs: 2 * outputs[0].numel * inputs[1].shape[1] * inputs[1].shape[3])
def _packed_conv_blocked(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """ConvIntegerPacked writing channels-last output [n, 1, oh, ow, O]; its input is NCHW (in_block 0) or
    NCHW[in_block]c."""
    expect_arity("ConvIntegerPackedNCHWc", types, 3)
    x = types[0]
    if attrs.get("in_block"):
        if x.rank != 5 or x.shape[4] != attrs["in_block"]:
            raise ShapeError(f"ConvIntegerPackedNCHWc: expects NCHW[{attrs['in_block']}]c data, got {x}")
        x = _nchw_type(x)
    (out,) = _packed_conv_integer([x, *types[1:]], attrs)
    n, o, oh, ow = out.shape
    return [TensorType((n, 1, oh, ow, o), "int32")]


def depthwise_blocked_reference(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, w, zero = inputs
    weights = np.ascontiguousarray(w.transpose(2, 0, 1)[:, None])  # [C, 1, kh, kw], already shifted
    conv_attrs = {key: attrs[key] for key in ("strides", "pads", "dilations")} | {"group": weights.shape[0]}
    y = conv_integer_reference([to_nchw(x), weights.astype(np.int64), zero], conv_attrs)[0]
    return [to_channels_last(y)]


@register_op("DepthwiseConvIntegerNCHWc", Pattern.OUT_ELEMWISE_FUSABLE, fold=depthwise_blocked_reference,
             flops=lambda inputs, outputs, attrs: 2 * outputs[0].numel * inputs[1].shape[0] * inputs[1].shape[1])
def _depthwise_blocked(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """Depthwise ConvInteger on channels-last data: inputs (x [n, 1, H, W, C] 8-bit, weights [kh, kw, C] int32
    minus their zero points, x's zero point (a scalar of x's dtype)); attrs strides, pads, dilations."""
    expect_arity("DepthwiseConvIntegerNCHWc", types, 3)
    x, w, zero = types
    expect_dtype("DepthwiseConvIntegerNCHWc", x, EIGHT_BIT, "input 0")
    _channels_last("DepthwiseConvIntegerNCHWc", x)
    if w.rank != 3 or w.shape[2] != x.shape[4] or w.dtype != "int32":
        raise ShapeError(f"DepthwiseConvIntegerNCHWc: weights must be int32 [kh, kw, {x.shape[4]}], got {w}")
    if zero.numel != 1 or zero.dtype != x.dtype:
        raise ShapeError(f"DepthwiseConvIntegerNCHWc: the zero point must be a scalar {x.dtype}, got {zero}")
    op = "DepthwiseConvIntegerNCHWc"
    oh, ow = output_hw(op, x.shape[2:4], w.shape[:2], pair(op, attrs, "strides", 1), pads4(op, attrs),
                       pair(op, attrs, "dilations", 1))
    return [TensorType((x.shape[0], 1, oh, ow, x.shape[4]), "int32")]
