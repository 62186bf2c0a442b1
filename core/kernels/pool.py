"""2-D pooling computes (NCHW): MaxPool, AveragePool (ceil_mode, count_include_pad as ONNX Runtime), global pools."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, maximum, minimum
from .common import attr, require
from .reduce import reduce_over
from .registry import register_compute
from .window import window_source


def pool_out_size(size: int, kernel: int, stride: int, lo: int, hi: int, dilation: int, ceil_mode: bool) -> int:
    span = size + lo + hi - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + lo:  # a window may not start inside the right padding only
        out -= 1
    return out


def _geometry(op: str, x: te.Tensor, attrs: Mapping[str, Any], out_types: list[TensorType]):
    if x.ndim != 4:
        raise ShapeError(f"{op}: only 2-D pooling (4-D NCHW input) is supported, got {list(x.shape)}")
    return pool_geometry(op, x, attrs, out_types)


def pool_geometry(op: str, x: te.Tensor, attrs: Mapping[str, Any], out_types: list[TensorType]):
    """Window, strides, pads, dilations and output rows x columns of a 2-D pool over axes 2 and 3
    (NCHW, or NCHW[x]c whose block axis comes after them)."""
    kernel = tuple(attr(attrs, "kernel", op))
    strides = tuple(attr(attrs, "strides", op, (1, 1)))
    pads = tuple(attr(attrs, "pads", op, (0, 0, 0, 0)))
    dil = tuple(attrs.get("dilations") or (1, 1))
    ceil_mode = bool(attrs.get("ceil_mode", 0))
    if out_types:
        out_hw = tuple(out_types[0].shape[2:4])
    else:
        out_hw = tuple(pool_out_size(x.shape[2 + a], kernel[a], strides[a], pads[a], pads[a + 2], dil[a], ceil_mode)
                       for a in range(2))
    return kernel, strides, pads, dil, out_hw


@register_compute("MaxPool")
def max_pool(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "MaxPool")
    kernel, strides, pads, dil, out_hw = _geometry("MaxPool", x, attrs, out_types)
    src = window_source(x, out_hw, kernel, strides, pads, dil, te.lowest(x.dtype), "pool_pad")
    rkh, rkw = te.reduce_axis(kernel[0], "rkh"), te.reduce_axis(kernel[1], "rkw")

    def body(n: Expr, c: Expr, y: Expr, xx: Expr) -> Expr:
        return te.max(src.read(n, c, y, xx, rkh.var, rkw.var), [rkh, rkw])

    return [te.compute(x.shape[:2] + out_hw, body, name="max_pool", tag="pool", attrs={"strides": strides})]


@register_compute("AveragePool")
def avg_pool(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "AveragePool")
    kernel, strides, pads, dil, out_hw = _geometry("AveragePool", x, attrs, out_types)
    if dil != (1, 1):
        raise ShapeError("AveragePool: dilations are not supported")
    include_pad = bool(attrs.get("count_include_pad", 0))
    src = window_source(x, out_hw, kernel, strides, pads, dil, 0, "pool_pad")
    rkh, rkw = te.reduce_axis(kernel[0], "rkh"), te.reduce_axis(kernel[1], "rkw")

    def body(n: Expr, c: Expr, y: Expr, xx: Expr) -> Expr:
        return te.sum(src.read(n, c, y, xx, rkh.var, rkw.var), [rkh, rkw])

    total = te.compute(x.shape[:2] + out_hw, body, name="avg_pool_sum", tag="pool_sum", attrs={"strides": strides})

    def count(o: Expr, a: int) -> Expr:
        # Window cells inside [lo, hi): the input, or the input plus its declared pads (never ceil overhang).
        start = o * strides[a] - pads[a]
        lo = -pads[a] if include_pad else 0
        hi = x.shape[2 + a] + (pads[a + 2] if include_pad else 0)
        return minimum(start + kernel[a], const(hi, "int64")) - maximum(start, const(lo, "int64"))

    def avg(n: Expr, c: Expr, y: Expr, xx: Expr) -> Expr:
        return total(n, c, y, xx) / cast(x.dtype, count(y, 0) * count(xx, 1))

    return [te.compute(total.shape, avg, name="avg_pool", tag="pool")]


@register_compute("GlobalMaxPool")
def global_max_pool(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "GlobalMaxPool")
    return [reduce_over(x, list(range(2, x.ndim)), True, "max", "global_max_pool")]


@register_compute("GlobalAveragePool")
def global_avg_pool(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "GlobalAveragePool")
    total = reduce_over(x, list(range(2, x.ndim)), True, "sum", "global_avg_pool_sum")
    count = 1
    for d in x.shape[2:]:
        count *= d
    return [te.compute(total.shape, lambda *i: total(*i) / const(count, x.dtype), name="global_avg_pool", tag="pool")]
