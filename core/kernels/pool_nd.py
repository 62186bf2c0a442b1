"""PoolND compute: a reduction over the window taps of any number of spatial axes (max, average, Lp)
of the padded input (its own stage, as for ConvND: dense, strided last axis in phases); the
average's divisor and the Lp root are an elementwise stage after it. MaxPoolWithIndices reads the
input itself, bounds checked inline (clamped reads, padded taps masked out)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.pool_nd import pool_nd_geometry
from ..te import tensor as te
from ..tir.expr import Expr, call, cast, const, eq, logical_and, maximum, minimum, select
from .common import require
from .conv_nd import padded_source
from .registry import register_compute


def _i64(value: int) -> Expr:
    return const(value, "int64")


def tap_count(start: Expr, kernel: int, dilation: int, lo: int, hi: int) -> Expr:
    """How many taps start + k*dilation (0 <= k < kernel) land in [lo, hi): closed form. Undilated windows
    need no floor division: AveragePool3d's divisor stage took longer than its sums with one per axis."""
    if dilation == 1:
        return minimum(_i64(kernel) + start, _i64(hi)) - maximum(start, _i64(lo))
    first = maximum(_i64(0), -((start - lo) // dilation))  # ceil((lo - start) / d)
    last = minimum(_i64(kernel - 1), (_i64(hi - 1) - start) // dilation)
    return maximum(last - first + 1, _i64(0))


def window_count(o: Sequence[Expr], sizes: Sequence[int], w: Mapping[str, Any], include_pad: bool) -> Expr:
    """The taps an average pool divides output position `o` by: those inside the input (of spatial `sizes`), or
    inside input and pads with count_include_pad; `w` is pool_nd_geometry's window."""
    spatial = len(o)
    count: Expr | None = None
    for a in range(spatial):
        pads = w["pads"]
        lo = -pads[a] if include_pad else 0
        hi = sizes[a] + (pads[spatial + a] if include_pad else 0)
        axis_count = tap_count(o[a] * w["strides"][a] - pads[a], w["kernel"][a], w["dilations"][a], lo, hi)
        count = axis_count if count is None else count * axis_count
    return count


@register_compute("PoolND")
def pool_nd(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "PoolND")
    out, w = pool_nd_geometry(x.shape, attrs)
    mode = attrs["mode"]
    kernel, strides, dilations, pads = w["kernel"], w["strides"], w["dilations"], w["pads"]
    p = float(attrs.get("p", 2))
    taps = [te.reduce_axis(k, f"rk{a}") for a, k in enumerate(kernel)]
    acc = x.dtype if mode == "max" or x.dtype == "float64" else "float32"
    # Padded taps read the fill, which leaves a max or a sum unchanged (the average divides by the real count).
    src = padded_source(x, out, kernel, strides, dilations, pads, te.lowest(x.dtype) if mode == "max" else None,
                        "pool_nd_pad")

    def body(n: Expr, c: Expr, *o: Expr) -> Expr:
        value = src.read(n, c, o, [t.var for t in taps])
        if mode == "max":
            return te.max(value, taps)
        value = cast(acc, value)
        if mode == "lp":
            value = call("abs", value)
            if p == 2:
                value = value * value
            elif p != 1:
                value = call("exp", call("log", value) * const(p, acc))
        return te.sum(value, taps)

    name = {"max": "max_pool_nd", "avg": "avg_pool_nd", "lp": "lp_pool_nd"}[mode]
    shape = x.shape[:2] + out
    total = te.compute(shape, body, name=name if mode == "max" else name + "_sum", tag="pool_nd")
    if mode == "max":
        return [total]
    if mode == "lp":
        def root(*i: Expr) -> Expr:
            s = total(*i)
            if p == 2:
                s = call("sqrt", s)
            elif p != 1:
                s = call("exp", call("log", s) / const(p, acc))
            return cast(x.dtype, s)

        return [te.compute(shape, root, name=name, tag="pool_nd")]
    include_pad = bool(attrs.get("count_include_pad", 0))

    def average(n: Expr, c: Expr, *o: Expr) -> Expr:
        return cast(x.dtype, total(n, c, *o) / cast(acc, window_count(o, x.shape[2:], w, include_pad)))

    return [te.compute(shape, average, name=name, tag="pool_nd")]


@register_compute("MaxPoolWithIndices")
def max_pool_with_indices(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any],
                          out_types: list[TensorType]):
    """MaxPool's values and the flat index (over N, C and the spatial axes, row-major, or column-major
    over H, W with storage_order=1) of the first tap holding each maximum."""
    (x,) = require(inputs, 1, "MaxPoolWithIndices")
    values = pool_nd([x], dict(attrs, mode="max"), out_types[:1])[0]
    out, w = pool_nd_geometry(x.shape, dict(attrs, mode="max"))
    spatial = len(out)
    kernel, strides, dilations, pads = w["kernel"], w["strides"], w["dilations"], w["pads"]
    column_major = bool(attrs.get("storage_order", 0))
    taps = [te.reduce_axis(k, f"ri{a}") for a, k in enumerate(kernel)]
    none = te.highest("int64")

    def first_index(n: Expr, c: Expr, *o: Expr) -> Expr:
        inside: Expr | None = None
        at = []
        for a in range(spatial):
            coord = o[a] * strides[a] + taps[a].var * dilations[a] - pads[a]
            ok = logical_and(coord >= 0, coord < x.shape[2 + a])
            inside = ok if inside is None else logical_and(inside, ok)
            at.append(minimum(maximum(coord, _i64(0)), _i64(x.shape[2 + a] - 1)))
        flat = n * x.shape[1] + c
        order = list(range(spatial))[::-1] if column_major else list(range(spatial))
        for a in order:
            flat = flat * x.shape[2 + a] + at[a]
        hit = logical_and(inside, eq(x(n, c, *at), values(n, c, *o)))
        return te.min(select(hit, flat, _i64(none)), taps)

    indices = te.compute(values.shape, first_index, name="max_pool_indices", tag="pool_nd")
    return [values, indices]
