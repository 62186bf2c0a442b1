"""DeformColumns compute (DeformConv's im2col): each (channel, tap, output pixel) bilinearly samples the
input at the tap's position moved by its learned offset (zero outside, as GridSample's zeros padding
with align_corners), times the tap's mask; the conv itself is then a MatMul."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, call, cast, const, logical_and, maximum, minimum, select
from .common import require
from .registry import register_compute


@register_compute("DeformColumns")
def deform_columns(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, offset = require(inputs, 2, "DeformColumns")
    mask = inputs[2] if len(inputs) > 2 else None
    n, c, h, w = x.shape
    kh, kw = attrs["kernel"]
    (sh, sw), (dh, dw), pads = attrs["strides"], attrs["dilations"], attrs["pads"]
    per_group = c // int(attrs.get("offset_group", 1))
    acc = "float64" if x.dtype == "float64" else "float32"
    i64 = lambda v: const(v, "int64")  # noqa: E731

    def sample(b: Expr, ch: Expr, y: Expr, xx: Expr) -> Expr:
        y0, x0 = call("floor", y), call("floor", xx)
        total: Expr | None = None
        for dy in (0, 1):
            for dx in (0, 1):
                cy, cx = y0 + float(dy), x0 + float(dx)
                weight = (1.0 - call("abs", y - cy)) * (1.0 - call("abs", xx - cx))
                iy, ix = cast("int64", cy), cast("int64", cx)
                inside = logical_and(logical_and(iy >= 0, iy < h), logical_and(ix >= 0, ix < w))
                value = x(b, ch, minimum(maximum(iy, i64(0)), i64(h - 1)), minimum(maximum(ix, i64(0)), i64(w - 1)))
                term = select(inside, cast(acc, value) * weight, const(0, acc))
                total = term if total is None else total + term
        return total

    def body(b: Expr, ch: Expr, ky: Expr, kx: Expr, oy: Expr, ox: Expr) -> Expr:
        g = ch // per_group
        tap = g * (kh * kw) + ky * kw + kx
        y = cast(acc, oy * sh - pads[0] + ky * dh) + cast(acc, offset(b, tap * 2, oy, ox))
        xx = cast(acc, ox * sw - pads[1] + kx * dw) + cast(acc, offset(b, tap * 2 + 1, oy, ox))
        value = sample(b, ch, y, xx)
        if mask is not None:
            value = value * cast(acc, mask(b, tap, oy, ox))
        return cast(x.dtype, value)

    shape = (n, c, kh, kw) + tuple(offset.shape[2:])
    return [te.compute(shape, body, name="deform_columns", tag="injective")]
