"""PoolNDNCHWc compute: 3-D max and average pools on NCDHW[x]c values, the window reduced over the padded input
(tag pool_nd_nchwc), the average divided by its count of taps inside the input (tag pool_nd_nchwc_out)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..graph.op_defs.pool_nd import pool_nd_geometry
from ..te import tensor as te
from ..tir.expr import Expr, cast
from .common import require
from .conv_nd_nchwc import padded_blocked_input
from .pool_nd import window_count
from .registry import register_compute


@register_compute("PoolNDNCHWc")
def pool_nd_nchwc(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "PoolNDNCHWc")
    mode = attrs.get("mode")
    if mode not in ("max", "avg") or x.ndim < 4:
        raise ShapeError(f"PoolNDNCHWc: expects a blocked input and mode max or avg, got {list(x.shape)}, {mode!r}")
    plain_shape = (x.shape[0], x.shape[1] * x.shape[-1]) + tuple(x.shape[2:-1])
    out, w = pool_nd_geometry(plain_shape, attrs)
    spatial = len(out)
    kernel, strides, dilations, pads = w["kernel"], w["strides"], w["dilations"], w["pads"]
    fill = te.lowest(x.dtype) if mode == "max" else 0
    src = padded_blocked_input(x, out, kernel, strides, dilations, pads, fill, "pool_nd_nchwc_pad")
    taps = [te.reduce_axis(k, f"rk{a}") for a, k in enumerate(kernel)]
    reducer = te.max if mode == "max" else te.sum

    def body(n: Expr, c: Expr, *rest: Expr) -> Expr:
        *o, b = rest
        return reducer(src(n, c, *[o[a] * strides[a] + taps[a].var * dilations[a] for a in range(spatial)], b), taps)

    shape = tuple(x.shape[:2]) + tuple(out) + tuple(x.shape[-1:])
    total = te.compute(shape, body, name=f"{mode}_pool_nd_nchwc", tag="pool_nd_nchwc")
    if mode == "max":
        return [total]
    include_pad = bool(attrs.get("count_include_pad", 0))

    def average(n: Expr, c: Expr, *rest: Expr) -> Expr:
        *o, b = rest
        return total(n, c, *o, b) / cast(x.dtype, window_count(o, x.shape[2:2 + spatial], w, include_pad))

    return [te.compute(shape, average, name="avg_pool_nd_nchwc", tag="pool_nd_nchwc_out")]
