"""Pools on NCHW[x]c values: windows over (H, W) of each channel block, the block the vector axis."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, maximum, minimum
from .common import prod, require
from .conv2d_nchwc import padded_window_input
from .pool import pool_geometry
from .reduce import reduce_over
from .registry import register_compute


def _geometry(op: str, x: te.Tensor, attrs: Mapping[str, Any], out_types: list[TensorType]):
    if x.ndim != 5:
        raise ShapeError(f"{op}: expects a 5-D NCHW[x]c input, got {list(x.shape)}")
    return pool_geometry(op, x, attrs, out_types)


def _window_reduce(op: str, x: te.Tensor, attrs, out_types, fill, reducer, name: str, tag: str) -> te.Tensor:
    kernel, strides, pads, dil, out_hw = _geometry(op, x, attrs, out_types)
    src = padded_window_input(x, out_hw, kernel, strides, pads, dil, fill, "pool_nchwc_pad")
    rkh, rkw = te.reduce_axis(kernel[0], "rkh"), te.reduce_axis(kernel[1], "rkw")
    (sh, sw), (dh, dw) = strides, dil

    def body(n: Expr, c: Expr, y: Expr, xx: Expr, b: Expr) -> Expr:
        return reducer(src(n, c, y * sh + rkh.var * dh, xx * sw + rkw.var * dw, b), [rkh, rkw])

    shape = x.shape[:2] + out_hw + x.shape[4:]
    return te.compute(shape, body, name=name, tag=tag, attrs={"strides": strides})


@register_compute("MaxPoolNCHWc")
def max_pool_nchwc(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "MaxPoolNCHWc")
    return [_window_reduce("MaxPoolNCHWc", x, attrs, out_types, te.lowest(x.dtype), te.max, "max_pool_nchwc",
                           "pool_nchwc")]


@register_compute("AveragePoolNCHWc")
def avg_pool_nchwc(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "AveragePoolNCHWc")
    kernel, strides, pads, dil, _ = _geometry("AveragePoolNCHWc", x, attrs, out_types)
    if dil != (1, 1):
        raise ShapeError("AveragePoolNCHWc: dilations are not supported")
    total = _window_reduce("AveragePoolNCHWc", x, attrs, out_types, 0, te.sum, "avg_pool_nchwc_sum", "pool_nchwc")
    include_pad = bool(attrs.get("count_include_pad", 0))

    def count(o: Expr, a: int) -> Expr:  # as pool.avg_pool: window cells inside input (plus pads)
        start = o * strides[a] - pads[a]
        lo = -pads[a] if include_pad else 0
        hi = x.shape[2 + a] + (pads[a + 2] if include_pad else 0)
        return minimum(start + kernel[a], const(hi, "int64")) - maximum(start, const(lo, "int64"))

    def avg(n: Expr, c: Expr, y: Expr, xx: Expr, b: Expr) -> Expr:
        return total(n, c, y, xx, b) / cast(x.dtype, count(y, 0) * count(xx, 1))

    return [te.compute(total.shape, avg, name="avg_pool_nchwc", tag="pool_nchwc_out")]


@register_compute("GlobalMaxPoolNCHWc")
def global_max_pool_nchwc(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any],
                          out_types: list[TensorType]):
    (x,) = require(inputs, 1, "GlobalMaxPoolNCHWc")
    return [reduce_over(x, [2, 3], True, "max", "global_max_pool_nchwc")]


@register_compute("GlobalAveragePoolNCHWc")
def global_avg_pool_nchwc(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any],
                          out_types: list[TensorType]):
    (x,) = require(inputs, 1, "GlobalAveragePoolNCHWc")
    total = reduce_over(x, [2, 3], True, "sum", "global_avg_pool_nchwc_sum")
    count = prod(x.shape[2:4])
    return [te.compute(total.shape, lambda *i: total(*i) / const(count, x.dtype), name="global_avg_pool_nchwc",
                       tag="pool")]
