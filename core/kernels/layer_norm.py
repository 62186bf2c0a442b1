"""LayerNormalization over axes axis..rank-1 in float32: mean, variance (two passes), normalize."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, call, cast, const
from .common import attr, broadcast_read, prod, require
from .reduce import reduce_over
from .registry import register_compute


def layer_norm_operands(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any]):
    """(x, scale, bias or None, first normalized axis, epsilon), checked; every target's compute reads them so."""
    x, scale = require(inputs, 2, "LayerNormalization")
    bias = inputs[2] if len(inputs) > 2 else None
    axis = int(attr(attrs, "axis", "LayerNormalization", -1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        raise ShapeError(f"LayerNormalization: axis {axis} out of range for rank {x.ndim}")
    return x, scale, bias, axis, float(attr(attrs, "epsilon", "LayerNormalization", 1e-5))


@register_compute("LayerNormalization")
def layer_norm(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, scale, bias, axis, eps = layer_norm_operands(inputs, attrs)
    axes = list(range(axis, x.ndim))
    n = prod(x.shape[axis:])
    f32 = "float32"
    inv_n = const(1.0 / n, f32)

    def xf(idx: Sequence[Expr]) -> Expr:
        return cast(f32, x(*idx))

    def row(idx: Sequence[Expr]) -> list[Expr]:
        return [ix if k < axis else 0 * ix for k, ix in enumerate(idx)]

    total = reduce_over(x, axes, True, "sum", "layer_norm_sum", source=xf, tag="layer_norm_sum")
    sq = reduce_over(x, axes, True, "sum", "layer_norm_sqsum", tag="layer_norm_sqsum",
                     source=lambda idx: square(xf(idx) - total(*row(idx)) * inv_n))
    eps_c = const(eps, f32)

    def rstd(idx: Sequence[Expr]) -> Expr:
        return const(1.0, f32) / call("sqrt", sq(*row(idx)) * inv_n + eps_c)

    def body(*i: Expr) -> Expr:
        y = (xf(i) - total(*row(i)) * inv_n) * rstd(i) * cast(f32, broadcast_read(scale, i[axis:]))
        if bias is not None:
            y = y + cast(f32, broadcast_read(bias, i[axis:]))
        return cast(x.dtype, y)

    outs = [te.compute(x.shape, body, name="layer_norm", tag="layer_norm")]
    if len(out_types) > 1:  # optional Mean and InvStdDev outputs, shaped like keepdims reductions
        outs.append(te.compute(total.shape, lambda *i: total(*i) * inv_n, name="layer_norm_mean", tag="layer_norm"))
    if len(out_types) > 2:
        outs.append(te.compute(sq.shape, lambda *i: rstd(i), name="layer_norm_inv_std", tag="layer_norm"))
    return outs


def square(v: Expr) -> Expr:
    return v * v
