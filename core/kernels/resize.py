"""Interpolate compute: each output element is an unrolled weighted sum of the input taps its
per-axis tables name (nearest: one gathered tap). One injective stage, so it fuses and vectorizes
like any gather; the importer splits resizes with very many taps into one Interpolate per axis."""
from __future__ import annotations

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
        shape[a] = inputs[i].shape[1]
    taps = [inputs[i].shape[0] for i in index_at]
    weighted = bool(attrs.get("weighted"))
    acc_dtype = "float64" if x.dtype == "float64" else "float32"

    def nested(level: int, out: tuple, at: list) -> Expr:
        """Sum over this axis's taps of weight * (the sum over the later axes): separable, so each
        weight multiplies once per tap instead of once per tap combination."""
        if level == len(axes):
            value = x(*at)
            return cast(acc_dtype, value) if weighted else value
        a, i, w = axes[level], index_at[level], weight_at[level]
        total: Expr | None = None
        for k in range(taps[level]):
            here = list(at)
            here[a] = cast("int64", inputs[i](const(k, "int64"), out[a]))
            term = nested(level + 1, out, here)
            if w is not None:
                term = cast(acc_dtype, inputs[w](const(k, "int64"), out[a])) * term
            total = term if total is None else total + term
        return total

    def body(*out: Expr) -> Expr:
        total = nested(0, out, list(out))
        result = cast(x.dtype, total)
        if attrs.get("masked"):
            inside: Expr | None = None
            for a, m in zip(axes, mask_at):
                flag = cast("bool", inputs[m](out[a]))
                inside = flag if inside is None else logical_and(inside, flag)
            result = select(inside, result, typed_const(attrs.get("extrapolation_value", 0.0), x.dtype))
        return result

    return [te.compute(tuple(shape), body, name="interpolate", tag="injective")]
