"""TopK along one axis as three tensor-expression stages, no sort loop needed:

1. rank[i]: how many elements beat element i (larger, or smaller for largest=0; equal values rank by
   index, the order ONNX specifies), a count that is a distinct position 0..n-1 per element;
2. indices[j]: the position whose rank is j (a sum with exactly one hit), for j < k;
3. values[j] = x[indices[j]].
O(n^2) comparisons along the axis: fine for the short axes TopK sees, and fully parallel."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, eq, logical_and, logical_or, select
from .common import require
from .registry import register_compute


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


@register_compute("TopK")
def top_k(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "TopK")
    axis, k, largest = int(attrs["axis"]), int(attrs["k"]), bool(attrs.get("largest", 1))
    n = x.shape[axis]

    def at(i: Sequence[Expr], position: Expr) -> list[Expr]:
        idx = list(i)
        idx[axis] = position
        return idx

    def rank_body(*i: Expr) -> Expr:
        other = te.reduce_axis(n, "other")
        mine, theirs = x(*i), x(*at(i, other.var))
        better = theirs > mine if largest else theirs < mine
        beats = logical_or(better, logical_and(eq(theirs, mine), other.var < i[axis]))
        return te.sum(cast("int64", beats), [other])

    rank = te.compute(x.shape, rank_body, name="topk_rank", tag="reduce")
    shape = tuple(k if a == axis else d for a, d in enumerate(x.shape))

    def index_body(*j: Expr) -> Expr:
        pos = te.reduce_axis(n, "pos")
        return te.sum(select(eq(rank(*at(j, pos.var)), j[axis]), pos.var, _i64(0)), [pos])

    indices = te.compute(shape, index_body, name="topk_indices", tag="reduce")
    values = te.compute(shape, lambda *j: x(*at(j, indices(*j))), name="topk_values", tag="injective")
    return [values, indices]
