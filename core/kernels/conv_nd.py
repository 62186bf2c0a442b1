"""ConvND compute: a reduction over input channels and kernel taps with bounds-checked (clamped,
masked) reads of the unpadded input, then a bias stage; the generic reduction schedule runs it."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.conv_nd import conv_nd_shape
from ..te import tensor as te
from ..tir.expr import Expr, const, logical_and, maximum, minimum, select
from .common import require
from .registry import register_compute


@register_compute("ConvND")
def conv_nd(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, w = require(inputs, 2, "ConvND")
    bias = inputs[2] if len(inputs) > 2 else None
    types = [TensorType(t.shape, t.dtype) for t in inputs if t is not None]
    shape = conv_nd_shape(types, attrs)
    spatial, pads, group = x.ndim - 2, attrs["pads"], int(attrs.get("group", 1))
    cg, mg = w.shape[1], w.shape[0] // group
    rc = te.reduce_axis(cg, "rc")
    taps = [te.reduce_axis(k, f"rk{a}") for a, k in enumerate(w.shape[2:])]

    def body(n: Expr, m: Expr, *o: Expr) -> Expr:
        inside: Expr | None = None
        at = []
        for a in range(spatial):
            coord = o[a] + taps[a].var - pads[a]
            ok = logical_and(coord >= 0, coord < x.shape[2 + a])
            inside = ok if inside is None else logical_and(inside, ok)
            at.append(minimum(maximum(coord, const(0, "int64")), const(x.shape[2 + a] - 1, "int64")))
        channel = rc.var if group == 1 else (m // mg) * cg + rc.var
        value = select(inside, x(n, channel, *at), const(0, x.dtype))
        return te.sum(value * w(m, rc.var, *[t.var for t in taps]), [rc] + taps)

    out = te.compute(shape, body, name="conv_nd", tag="conv_nd")
    if bias is None:
        return [out]
    return [te.compute(shape, lambda n, m, *o: out(n, m, *o) + bias(m), name="conv_nd_bias", tag="conv_nd")]
