"""MaxUnpool compute: output element p takes the value of the first covering pooling window whose
index names p (the windows covering p along an axis are at most ceil(kernel / stride)); else zero."""
from __future__ import annotations

import itertools
from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, eq, logical_and, maximum, minimum, select
from .common import require
from .registry import register_compute


@register_compute("MaxUnpool")
def max_unpool(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, indices = require(inputs, 2, "MaxUnpool")
    out = tuple(attrs["output_shape"])
    kernel, strides, pads = attrs["kernel"], attrs["strides"], attrs["pads"]
    spatial = x.ndim - 2
    reach = [-(-k // s) for k, s in zip(kernel, strides)]  # windows that can cover one output position
    # Indices are flat over the unpooled shape the pooling implies; a larger output_shape only adds
    # zeros after it (ONNX's reference and ONNX Runtime agree).
    natural = [(x.shape[2 + a] - 1) * strides[a] - pads[a] - pads[spatial + a] + kernel[a] for a in range(spatial)]

    def i64(v: int) -> Expr:
        return const(v, "int64")

    def body(n: Expr, c: Expr, *p: Expr) -> Expr:
        flat = n * out[1] + c
        for a in range(spatial):
            flat = flat * natural[a] + p[a]
        value = const(0, x.dtype)
        for back in reversed(list(itertools.product(*(range(r) for r in reach)))):
            ok, at = None, []
            for a in range(spatial):
                shifted = p[a] + pads[a]
                j = shifted // strides[a] - back[a]
                cond = logical_and(logical_and(j >= 0, j < x.shape[2 + a]), shifted - j * strides[a] < kernel[a])
                ok = cond if ok is None else logical_and(ok, cond)
                at.append(minimum(maximum(j, i64(0)), i64(x.shape[2 + a] - 1)))
                if out[2 + a] > natural[a]:
                    ok = logical_and(ok, p[a] < natural[a])
            hit = logical_and(ok, eq(cast("int64", indices(n, c, *at)), flat))
            value = select(hit, x(n, c, *at), value)  # built last-to-first: the first hit wins
        return value

    return [te.compute(out, body, name="max_unpool", tag="injective")]
