"""Interpolate compute: each output element is an unrolled weighted sum of the input taps its
per-axis tables name (nearest: one gathered tap). One injective stage, so it fuses and vectorizes
like any gather; the importer splits resizes with very many taps into one Interpolate per axis."""
from __future__ import annotations

import itertools
from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.resize import table_layout
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, logical_and, select
from .common import typed_const
from .registry import register_compute


@register_compute("Interpolate")
def interpolate(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    axes, index_at, weight_at, mask_at = table_layout(len(inputs), attrs)
    x = inputs[0]
    shape = list(x.shape)
    for a, i in zip(axes, index_at):
        shape[a] = inputs[i].shape[0]
    taps = [inputs[i].shape[1] for i in index_at]
    weighted = bool(attrs.get("weighted"))
    acc_dtype = "float64" if x.dtype == "float64" else "float32"

    def body(*out: Expr) -> Expr:
        total: Expr | None = None
        for combo in itertools.product(*(range(t) for t in taps)):
            at = list(out)
            weight: Expr | None = None
            for a, i, w, k in zip(axes, index_at, weight_at, combo):
                at[a] = cast("int64", inputs[i](out[a], const(k, "int64")))
                if w is not None:
                    tap = cast(acc_dtype, inputs[w](out[a], const(k, "int64")))
                    weight = tap if weight is None else weight * tap
            value = x(*at)
            if weighted:
                value = cast(acc_dtype, value) * weight
            total = value if total is None else total + value
        result = cast(x.dtype, total)
        if attrs.get("masked"):
            inside: Expr | None = None
            for a, m in zip(axes, mask_at):
                flag = cast("bool", inputs[m](out[a]))
                inside = flag if inside is None else logical_and(inside, flag)
            result = select(inside, result, typed_const(attrs.get("extrapolation_value", 0.0), x.dtype))
        return result

    return [te.compute(tuple(shape), body, name="interpolate", tag="injective")]
