"""Depthwise ConvInteger: zero-point-shifted data padded as int16 (NCHW planes or channels-last rows), int32 taps."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, logical_and, select
from .common import require
from .conv2d import WIDTH_UNIT, conv_out_size
from .registry import register_compute
from .window import window_source

PAD_TAG = "int8_dw_pad"


def is_depthwise(x: te.Tensor, w: te.Tensor, group: int) -> bool:
    return group > 1 and group == x.shape[1] == w.shape[0] and w.shape[1] == 1


def depthwise_conv_integer(x: te.Tensor, x_zero: Optional[te.Tensor], w32: te.Tensor, strides: Sequence[int],
                           pads: Sequence[int], dilations: Sequence[int], shift_tag: str) -> te.Tensor:
    """The `conv2d`-tagged reduction over the taps of int32(padded) * w32, as the float depthwise conv (same
    attrs, so its schedule applies). The padded input holds x - x_zero as int16 (|value| <= 255: exact),
    0 outside the image (ONNX pads the shifted input with 0), and is its own stage (PAD_TAG) that the
    schedule computes one channel plane at a time next to the reduction, instead of a pass of int32 over memory."""
    n, c, h, wd = x.shape
    _, _, kh, kw = w32.shape
    (sh, sw), (dh, dw) = strides, dilations
    oh, ow = conv_out_size(h, kh, sh, pads[0], pads[2], dh), conv_out_size(wd, kw, sw, pads[1], pads[3], dw)

    def narrow(*idx: Expr) -> Expr:
        value = cast("int32", x(*idx))
        if x_zero is not None:
            value = value - cast("int32", x_zero(*([0] * x_zero.ndim)))
        return cast("int16", value)

    x16 = te.compute(x.shape, narrow, name="conv_int_x16", tag=shift_tag)
    ow_c = ow if ow % WIDTH_UNIT == 0 or ow <= WIDTH_UNIT // 2 else -(-ow // WIDTH_UNIT) * WIDTH_UNIT
    src = window_source(x16, (oh, ow_c), (kh, kw), strides, pads, dilations, 0, PAD_TAG)
    rc, rkh, rkw = te.reduce_axis(1, "rc"), te.reduce_axis(kh, "rkh"), te.reduce_axis(kw, "rkw")

    def body(b: Expr, o: Expr, y: Expr, xx: Expr) -> Expr:
        tap = cast("int32", src.read(b, o + rc.var, y, xx, rkh.var, rkw.var))
        return te.sum(tap * w32(o, rc.var, rkh.var, rkw.var), [rc, rkh, rkw])

    attrs = {"strides": (sh, sw), "pads": tuple(pads), "dilations": (dh, dw), "group": c, "kernel": (kh, kw),
             "depthwise": True, "width": ow, "flat": False, "pointwise": False}
    return te.compute((n, c, oh, ow_c), body, name="conv2d", tag="conv2d", attrs=attrs)


ROWS_TAG = "int8_dw_rows"


@register_compute("DepthwiseConvIntegerNCHWc")
def depthwise_conv_integer_blocked(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any],
                                   out_types: list[TensorType]):
    """Channels-last depthwise conv: `int8_dw_rows` [n, rows, columns, C] (x - zero point as int16, 0 outside
    the image) and the reduction over the taps `int8_dw` [n, 1, oh, ow, C], channels the vector lanes (each
    tap one contiguous vector load, one broadcast-free multiply: the weights are a vector per tap too)."""
    x, w, zero = require(inputs, 3, "DepthwiseConvIntegerNCHWc")
    n, _, h, wd, c = x.shape
    kh, kw, _ = w.shape
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    top, left, bottom, right = attrs["pads"]
    oh, ow = conv_out_size(h, kh, sh, top, bottom, dh), conv_out_size(wd, kw, sw, left, right, dw)
    rows, columns = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1

    def padded(b: Expr, r: Expr, col: Expr, ch: Expr) -> Expr:
        row, column = r - top, col - left
        value = cast("int16", cast("int32", x(b, 0, row, column, ch)) - cast("int32", zero(*([0] * zero.ndim))))
        conds = [row >= 0, row < h, column >= 0, column < wd]
        return select(logical_and(logical_and(conds[0], conds[1]), logical_and(conds[2], conds[3])), value,
                      const(0, "int16"))

    src = te.compute((n, rows, columns, c), padded, name=ROWS_TAG, tag=ROWS_TAG)
    rkh, rkw = te.reduce_axis(kh, "rkh"), te.reduce_axis(kw, "rkw")

    def body(b: Expr, _: Expr, y: Expr, xx: Expr, ch: Expr) -> Expr:
        tap = cast("int32", src(b, y * sh + rkh.var * dh, xx * sw + rkw.var * dw, ch))
        return te.sum(tap * w(rkh.var, rkw.var, ch), [rkh, rkw])

    return [te.compute((n, 1, oh, ow, c), body, name="int8_dw", tag="int8_dw")]
