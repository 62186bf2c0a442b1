"""Injective index-driven computes: Trilu, EyeLike, GatherND, OneHot, ReverseSequence (each output
element reads at most one input element, at a position computed from indices)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, eq, select
from ..tir.index_guard import checked_index
from .common import require, typed_const
from .registry import register_compute

Inputs = Sequence[Optional[te.Tensor]]

# Ops whose kernels check the indices they read at run time (core/tir/index_guard.py): an error names them.
CHECKS_INDICES = frozenset({"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "RoiAlign"})


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def wrap_negative(idx: Expr, dim: int) -> Expr:
    """An index value as int64, negative ones counted from the end of an axis of `dim`."""
    idx = cast("int64", idx)
    return select(idx < _i64(0), idx + dim, idx)


@register_compute("Trilu")
def trilu(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Trilu")
    k, upper = int(attrs["k"]), bool(attrs["upper"])
    zero = typed_const(0, x.dtype)

    def body(*i: Expr) -> Expr:
        offset = i[-1] - i[-2]  # column minus row: the diagonal it lies on
        keep = offset >= _i64(k) if upper else offset <= _i64(k)
        return select(keep, x(*i), zero)

    return [te.compute(x.shape, body, name="trilu", tag="injective")]


@register_compute("EyeLike")
def eye_like(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "EyeLike")
    dtype, k = attrs["dtype"], int(attrs["k"])
    one, zero = typed_const(1, dtype), typed_const(0, dtype)
    return [te.compute(x.shape, lambda i, j: select(eq(j - i, _i64(k)), one, zero), name="eye_like", tag="injective")]


@register_compute("GatherND")
def gather_nd(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    data, indices = require(inputs, 2, "GatherND")
    b = int(attrs["batch_dims"])
    depth = indices.shape[-1]
    shape = tuple(indices.shape[:-1]) + tuple(data.shape[b + depth:])
    outer = indices.ndim - 1  # output axes that walk the index tuples

    def body(*i: Expr) -> Expr:
        tuple_at = list(i[:outer])
        picked = [checked_index(indices(*tuple_at, _i64(d)), data.shape[b + d]) for d in range(depth)]
        return data(*i[:b], *picked, *i[outer:])

    return [te.compute(shape, body, name="gather_nd", tag="injective")]


@register_compute("OneHot")
def one_hot(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    indices, values = require(inputs, 2, "OneHot")
    depth, axis = int(attrs["depth"]), int(attrs["axis"])
    shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]

    def body(*i: Expr) -> Expr:
        # Out-of-range indices (after wrapping negatives) match no position: an all-off row.
        idx = wrap_negative(indices(*i[:axis], *i[axis + 1:]), depth)
        return select(eq(idx, i[axis]), values(_i64(1)), values(_i64(0)))

    return [te.compute(shape, body, name="one_hot", tag="injective")]


@register_compute("ReverseSequence")
def reverse_sequence(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, lengths = require(inputs, 2, "ReverseSequence")
    t_axis, b_axis = int(attrs["time_axis"]), int(attrs["batch_axis"])

    def body(*i: Expr) -> Expr:
        n = lengths(i[b_axis])
        t = i[t_axis]
        idx = list(i)
        idx[t_axis] = select(t < n, n - 1 - t, t)
        return x(*idx)

    return [te.compute(x.shape, body, name="reverse_sequence", tag="injective")]


__all__ = ["CHECKS_INDICES", "wrap_negative"]
