"""Bounds inference for compute_at: the region of a producer that one iteration of the attach loop
reads, as a first point (over the loops outside it) and an extent per axis (over the loops inside).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ..tir.expr import Expr, IntImm, Var
from ..tir.functor import walk_expr
from ..tir.simplify import from_linear, linear_form, simplify

# (first point, extent) of one axis of the region
AxisRegion = tuple[Expr, int]


def infer_region(reads: Sequence[Sequence[Expr]], inner: Mapping[Var, int],
                 shape: Sequence[int]) -> list[AxisRegion]:
    """The union of the points `reads` (index tuples over loop variables) reach while the `inner`
    loop variables (var -> extent) run over their ranges and every other variable is fixed.

    Per axis, an index that is linear in the inner variables, with the same outer part in every
    read, gives a box [outer + lo, outer + hi]; anything else (an inner variable under a division,
    reads at different outer offsets) or a box as large as the axis gives the whole axis."""
    return [_axis_region([r[d] for r in reads], inner, dim) for d, dim in enumerate(shape)]


def _axis_region(indices: Sequence[Expr], inner: Mapping[Var, int], dim: int) -> AxisRegion:
    whole = (IntImm(0), dim)
    outer_terms = None
    lo = hi = 0
    for k, index in enumerate(indices):
        terms, const = linear_form(simplify(index))
        rest: dict[Expr, int] = {}
        first = last = const
        for term, coeff in terms.items():
            if isinstance(term, Var) and term in inner:
                span = coeff * (inner[term] - 1)
                first += min(0, span)
                last += max(0, span)
            elif any(isinstance(x, Var) and x in inner for x in walk_expr(term)):
                return whole  # an inner loop reaches this axis non-linearly
            else:
                rest[term] = coeff
        if outer_terms is None:
            outer_terms = rest
        elif rest != outer_terms:
            return whole
        lo, hi = (first, last) if k == 0 else (min(lo, first), max(hi, last))
    if outer_terms is None or hi - lo + 1 >= dim:
        return whole
    return from_linear(outer_terms, lo), hi - lo + 1
