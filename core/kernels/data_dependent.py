"""NonZero, Compress and Unique: results at an upper-bound size plus an int64 `[axis, length]` bound
(see core/graph/op_defs/data_dependent.py). NonZero and Compress flag the kept elements with a tensor
expression and compact their positions in one sequential pass (te.extern); Unique compares slices
pairwise (O(m^2) reductions). The padding past the count is zero."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Buffer, Expr, Var, cast, const, eq, logical_and, ne, select
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, Stmt, Store, seq
from .common import require, typed_const
from .registry import register_compute


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def compaction_program(flags: Buffer, packed: Buffer) -> Stmt:
    """packed[0..] = the positions i with flags[i] set, in order (zeros after them); packed[n] = how many."""
    n = flags.shape[0]
    i = Var("kept_i")
    count = Buffer("kept_count", (1,), "int64", "local")
    zero = _i64(0)
    clear = For(i, _i64(n), ForKind.SERIAL, Store(packed, i, zero))
    keep = seq(Store(packed, count.load(0), i), Store(count, zero, count.load(0) + 1))
    scan = For(i, _i64(n), ForKind.SERIAL, IfThenElse(ne(flags.load(i), const(0, flags.dtype)), keep))
    return Allocate(count, seq(clear, Store(count, zero, zero), scan, Store(packed, _i64(n), count.load(0))))


def prefix_positions(kept, n: int, name: str) -> tuple[te.Tensor, te.Tensor]:
    """(position[j], total[0]): where the j-th kept element of 0..n-1 sits (0 past the last one), and
    how many are kept; `kept(i)` is a bool expression for index expression i. The flags are a tensor
    expression, the compaction one sequential pass (te.extern): O(n)."""
    flags = te.compute((n,), lambda i: cast("int8", kept(i)), name=f"{name}_flags", tag="injective")
    packed = te.extern((n + 1,), [flags], lambda ins, out: compaction_program(ins[0], out), "int64",
                       name=f"{name}_packed")
    position = te.compute((n,), lambda j: packed(j), name=f"{name}_position", tag="injective")
    total = te.compute((1,), lambda _: packed(_i64(n)), name=f"{name}_total", tag="injective")
    return position, total


def bound_of(axis: int, total: te.Tensor, name: str) -> te.Tensor:
    return te.compute((2,), lambda t: select(eq(t, _i64(0)), _i64(axis), total(_i64(0))), name=f"{name}_bound",
                      tag="injective")


def _unravel(flat: Expr, shape: Sequence[int]) -> list[Expr]:
    idx, stride = [], 1
    for d in shape:
        stride *= d
    for d in shape:
        stride //= d
        idx.append((flat // stride) % d if d > 1 else _i64(0))
    return idx


@register_compute("NonZero")
def non_zero(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "NonZero")
    n = 1
    for d in x.shape:
        n *= d
    zero = typed_const(0, x.dtype)
    position, total = prefix_positions(lambda i: ne(x(*_unravel(i, x.shape)), zero), n, "non_zero")

    def body(axis: Expr, j: Expr) -> Expr:
        coords = _unravel(position(j), x.shape)
        value = coords[-1]
        for a in range(x.ndim - 2, -1, -1):
            value = select(eq(axis, _i64(a)), coords[a], value)
        return select(j < total(_i64(0)), value, _i64(0))

    out = te.compute((x.ndim, n), body, name="non_zero", tag="injective")
    return [out, bound_of(1, total, "non_zero")]


@register_compute("Compress")
def compress(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, condition = require(inputs, 2, "Compress")
    axis = int(attrs["axis"])
    length = min(condition.shape[0], x.shape[axis])
    position, total = prefix_positions(lambda c: condition(c), length, "compress")
    shape = tuple(length if a == axis else d for a, d in enumerate(x.shape))
    zero = typed_const(0, x.dtype)

    def body(*i: Expr) -> Expr:
        idx = list(i)
        idx[axis] = position(i[axis])
        return select(i[axis] < total(_i64(0)), x(*idx), zero)

    return [te.compute(shape, body, name="compress", tag="injective"), bound_of(axis, total, "compress")]


@register_compute("Unique")
def unique(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    """Slices along `axis` (single elements for a flattened input) compared pairwise: `diff[k, i]` is
    the first element where slices k and i differ (`width` when equal), which gives equality, the
    lexicographic order, first occurrences and each slice's rank among the distinct ones."""
    (x,) = require(inputs, 1, "Unique")
    axis, keep_sorted = int(attrs["axis"]), bool(attrs["sorted"])
    m = x.shape[axis]
    rest = [d for a, d in enumerate(x.shape) if a != axis]
    width = 1
    for d in rest:
        width *= d

    def at(slice_: Expr, element: Expr) -> Expr:
        idx = _unravel(element, rest)
        idx.insert(axis, slice_)
        return x(*idx)

    def diff_body(k: Expr, i: Expr) -> Expr:
        s = te.reduce_axis(width, "s")
        return te.min(select(ne(at(k, s.var), at(i, s.var)), s.var, _i64(width)), [s])

    diff = te.compute((m, m), diff_body, name="unique_diff", tag="reduce")

    def first_body(i: Expr) -> Expr:
        k = te.reduce_axis(m, "k")
        return te.min(select(eq(diff(k.var, i), _i64(width)), k.var, _i64(m)), [k])

    first_at = te.compute((m,), first_body, name="unique_first", tag="reduce")  # first equal slice

    def is_first(i: Expr) -> Expr:
        return eq(first_at(i), i)

    def rank_body(i: Expr) -> Expr:
        k = te.reduce_axis(m, "k")
        if keep_sorted:
            d = diff(k.var, i)
            d_safe = select(d < _i64(width), d, _i64(0))
            earlier = logical_and(d < _i64(width), at(k.var, d_safe) < at(i, d_safe))
        else:
            earlier = k.var < first_at(i)
        return te.sum(cast("int64", logical_and(is_first(k.var), earlier)), [k])

    rank = te.compute((m,), rank_body, name="unique_rank", tag="reduce")  # = inverse_indices

    def source_body(j: Expr) -> Expr:
        i = te.reduce_axis(m, "i")
        return te.sum(select(logical_and(is_first(i.var), eq(rank(i.var), j)), i.var, _i64(0)), [i])

    def total_body(_: Expr) -> Expr:
        k = te.reduce_axis(m, "k")
        return te.sum(cast("int64", is_first(k.var)), [k])

    def counts_body(j: Expr) -> Expr:
        i = te.reduce_axis(m, "i")
        return te.sum(cast("int64", eq(rank(i.var), j)), [i])

    source = te.compute((m,), source_body, name="unique_indices", tag="reduce")
    total = te.compute((1,), total_body, name="unique_total", tag="reduce")
    counts = te.compute((m,), counts_body, name="unique_counts", tag="reduce")
    zero = typed_const(0, x.dtype)

    def y_body(*p: Expr) -> Expr:
        idx = list(p)
        idx[axis] = source(p[axis])
        return select(p[axis] < total(_i64(0)), x(*idx), zero)

    y = te.compute(x.shape, y_body, name="unique", tag="injective")
    inverse = te.compute((m,), lambda i: rank(i), name="unique_inverse", tag="injective")
    return [y, source, inverse, counts, bound_of(axis, total, "unique"), bound_of(0, total, "unique_rows")]
